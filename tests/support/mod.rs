//! Harness pieces for the networked-backend tests: real servers started per test, and a TCP proxy
//! that can go silent.
//! The proxy also delays, resets connections and loses replies, for the drills in `faults.rs`.

#![allow(dead_code)] // each test binary uses a different subset

pub mod etcd_cluster;
pub mod pgbouncer;
pub mod postgres_server;
pub mod proxy;
pub mod redis_server;
pub mod scenarios;
pub mod world;
