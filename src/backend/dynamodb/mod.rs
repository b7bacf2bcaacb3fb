//! The networked `dynamodb://` backend: leases as items of one DynamoDB table (created on first
//! use), taken, renewed and released by conditional `UpdateItem`s — one write per operation —
//! with fencing tokens from a per-name counter bumped by the very write that claims, and a
//! clock-free takeover: a holder that stopped renewing is replaced only once a waiter has seen
//! its record version unchanged for a whole lease on its own monotonic clock. DynamoDB cannot
//! notify, so waiters re-read: the head of the line quickly, the rest slowly. Item layout and the
//! token design: [`item`]; the takeover rule: [`sightings`]; the line: [`queue`].

mod claim;
mod expr;
mod inspect;
mod interval;
mod item;
mod lease;
mod line;
mod link;
mod queue;
mod settings;
mod sightings;
mod table;
mod write;

pub use settings::Settings;
