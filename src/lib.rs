//! lockrun: run a command while holding a named, renewed lease with a fencing token.
//!
//! The pieces, in the order a run goes through them: [`cli`] (flags) → [`config`] (validation) →
//! [`backend`] (the lease engines behind one trait) → [`supervisor`] (the command, its signals and
//! the renewal loop) → [`exit`] (the status table). [`clock`] and [`timing`] hold the rules every
//! deadline follows; [`messages`] is how lockrun speaks. [`drill`] rehearses a paused holder against a real backend.

mod account;
pub mod app;
pub mod backend;
pub mod cli;
pub mod clock;
pub mod config;
pub mod drill;
mod environment;
pub mod exit;
mod holding;
mod inspect;
pub mod messages;
pub mod name;
mod progress;
mod reactor;
mod stderr_sink;
pub mod supervisor;
pub mod timing;
