//! lockrun's integration tests: one test binary that drives the real `lockrun` binary against
//! private state directories and real servers it starts itself on loopback.
//!
//! - [`conformance`]: the contract's scenarios, written once and run on every backend;
//! - one module per backend for what only that backend has ([`file_backend`], [`redis`],
//!   [`redlock`], [`etcd`], [`postgres`] (and [`pgbouncer`] in front of it), [`mysql`], [`zookeeper`],
//!   [`dynamodb`]);
//! - [`faults`]: lost acknowledgements, late releases, delays and resets through a fault proxy;
//! - [`readme`]: README.md's examples, run as written;
//! - [`cli`], [`hostile_input`]: usage errors and fuzzed input; [`process`]: the command's life
//!   (exit statuses, signals, descendants); [`clocks`]: wall-clock steps; [`drill`]: `lockrun
//!   drill`; [`generated`]: completions and the man page are not stale; [`starved`]: a system
//!   that refuses descriptors or processes;
//! - [`support`]: what they share.

mod support;

mod cli;
mod clocks;
mod conformance;
mod drill;
mod dynamodb;
mod etcd;
mod faults;
mod file_backend;
mod generated;
mod hostile_input;
mod mysql;
mod pgbouncer;
mod postgres;
mod process;
mod readme;
mod redis;
mod redlock;
mod starved;
mod zookeeper;
