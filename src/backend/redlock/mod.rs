//! The networked `redlock://` backend: Redlock over N ≥ 3 independent Redis masters, with real
//! fencing tokens. Each master keeps the Redis backend's state for a name (its key layout, its
//! scripts where a master's part is the same); a hold is a hold once a quorum of masters granted it
//! in one round, well inside its TTL ([`grant`]); the line of waiters is kept on every master and
//! ordered alike by tickets the masters agree on; the fencing token is a max-register over a quorum
//! ([`fence`], which proves that tokens strictly rise). Every request goes to every master at once,
//! each with its own deadline ([`masters`]).

mod bells;
mod fence;
mod grant;
mod inspect;
mod lease;
mod line;
mod masters;
mod scripts;
mod settings;
mod timing;

pub use settings::Settings;
