//! `lockrun drill`: the failure every lease-based lock must survive — a holder paused past its
//! lease (a stopped VM, a long GC pause) while another takes over, then waking up still believing
//! it holds the lock — rehearsed on the user's own backend with two real lockrun holders and a
//! fenced probe store, and reported as a timeline and a verdict.
//!
//! `run` drives the steps and records a [`timeline::Timeline`]; [`verdict`] judges it (a pure
//! function, tested on made-up timelines); `report` prints it; [`probe`] is the fenced store and
//! the internal `drill-probe` writer the holders' commands use; `holders` starts and signals the
//! holders; `measure` times the backend and reads its clock.

mod holders;
mod measure;
pub mod probe;
mod report;
mod run;
pub mod timeline;
pub mod verdict;

pub use run::drill;
