//! lockrun's integration tests: one test binary that drives the real `lockrun` binary against
//! private state directories and real servers started per test.

mod support;

mod cli;
mod clocks;
mod drill;
mod etcd;
mod faults;
mod file_backend;
mod generated;
mod hostile_input;
mod postgres;
mod process;
mod redis;
