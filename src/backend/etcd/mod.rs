//! The networked `etcd://` backend: leases as etcd leases, kept alive from lockrun, with one key
//! per run attached to its lease; the line is the keys' create-revision order, and a holder's
//! fencing token is its key's create revision (the cluster never reuses or lowers one, across
//! restarts and leader changes). Who holds: [`plan`]; each waiter watches only the keys that can
//! make it a holder, woken by their deletion, never by every release of its name. Key layout:
//! [`keys`]; what a key stores: [`record`]; failover between members: [`link`].

mod acquire;
mod inspect;
mod interval;
mod keys;
mod lease;
mod line;
mod link;
mod plan;
mod record;
mod settings;
mod turn;
mod waiting;
mod watch;

pub use settings::Settings;
