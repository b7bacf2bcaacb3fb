//! The networked `zk://` backend: one ephemeral sequential znode per contender under the name's
//! node, holding its record; the first `--limit` by sequence number hold (the shared/exclusive rule
//! of [`line`]), and a holder's fencing token is its znode's create zxid, which the ensemble
//! assigns in one total order and never reuses, across restarts and leader changes. The lease is
//! the session ([`lease`]); waiters watch only what can let them in. Layout: [`paths`]; sessions,
//! ACLs and deadlines: [`link`].

mod acquire;
mod bells;
mod contender;
mod inspect;
mod interval;
mod lease;
mod line;
mod link;
mod paths;
mod record;
mod session;
mod settings;
mod slots;
mod supersede;

pub use settings::Settings;
