//! The networked `etcd://` backend: leases as etcd leases, kept alive from lockrun, with one key
//! per run attached to its lease; the line is the keys' create-revision order, the first `limit`
//! hold, and a holder's fencing token is its key's create revision (the cluster never reuses or
//! lowers one, across restarts and leader changes). Waiters watch their name's deletions, woken by
//! the release itself. Key layout: [`keys`]; failover between members: [`link`]; why not the
//! predecessor watch of etcd's lock recipe: [`waiting`].

mod acquire;
mod backend;
mod inspect;
mod keys;
mod lease;
mod line;
mod link;
mod settings;
mod waiting;

pub use settings::Settings;
