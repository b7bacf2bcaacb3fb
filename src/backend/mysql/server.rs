//! What every session asks of the server when it starts, in one round trip, and what it learns.
//!
//! The session's own limits, so that nothing lockrun leaves behind (a statement of a lockrun that
//! was paused or cut off) holds a row lock or runs for long:
//! - `innodb_lock_wait_timeout = 3` (seconds): a row lock is waited for at most that long;
//! - the statement timeout, whose name differs: MySQL's `max_execution_time` (milliseconds, and
//!   it bounds only `SELECT`s — procedures are bounded by the lock wait and the client's own
//!   deadline), MariaDB's `max_statement_time` (seconds, every statement). Each is written in an
//!   executable comment that only its own server runs: `/*!80000 … */` is run by MySQL 8+ and
//!   skipped by MariaDB (which skips MySQL-5.7-and-later version comments), `/*M!100100 … */` is
//!   run by MariaDB only;
//! - `net_read_timeout`/`net_write_timeout = 10`: the server gives up on a client that stopped
//!   reading or writing;
//! - a fixed `sql_mode`, `autocommit = 1`, and room for the wake-up lists (`group_concat_max_len`).
//!
//! Then it reads the server's version (MySQL or MariaDB), its connection id, the durability
//! settings the token guarantee rests on, and takes the session's presence lock (see
//! [`super::schema`]).
//!
//! **Durable tokens.** A token is handed out only after the commit that raised the counter, so the
//! counter survives a crash of the server when the commit was flushed: that takes
//! `innodb_flush_log_at_trx_commit = 1` and, with binary logging on, `sync_binlog = 1` (the
//! defaults of MySQL 8; MariaDB has binary logging off by default). With weaker settings a crash of
//! the server's host can lose the last second of commits; tokens still rise then, because each is
//! at least the server's clock in microseconds, unless that clock was also set back.

use std::sync::atomic::{AtomicBool, Ordering};

/// Which server answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    MySql,
    MariaDb,
}

impl Flavor {
    /// The flavor a `VERSION()` string names (`8.0.36`, `10.11.6-MariaDB-0+deb12u1`).
    pub fn of(version: &str) -> Self {
        match version.to_ascii_lowercase().contains("mariadb") {
            true => Flavor::MariaDb,
            false => Flavor::MySql,
        }
    }
}

/// The setup statements of a session whose presence lock is `lock`.
pub fn setup(lock: &str) -> String {
    format!(
        "SET SESSION sql_mode = 'STRICT_TRANS_TABLES,NO_ENGINE_SUBSTITUTION', autocommit = 1, \
         innodb_lock_wait_timeout = 3, net_read_timeout = 10, net_write_timeout = 10, \
         group_concat_max_len = 1048576 \
         /*!80000 , max_execution_time = 5000 */ /*M!100100 , max_statement_time = 5 */; \
         SELECT VERSION(), CONNECTION_ID(), @@innodb_flush_log_at_trx_commit, @@sync_binlog, \
         @@log_bin, GET_LOCK({lock}, 0)",
        lock = super::sql::binary(lock)
    )
}

/// What a session's setup found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Facts {
    pub flavor: Flavor,
    pub version: String,
    pub connection_id: u64,
    pub flush_log_at_commit: u64,
    pub sync_binlog: u64,
    pub log_bin: bool,
    /// Whether the presence lock was taken (it is not while an earlier session of this run,
    /// abandoned mid-statement, still holds it).
    pub present: bool,
}

impl Facts {
    /// Why tokens are less durable than they could be on this server, if they are.
    pub fn weak_durability(&self) -> Option<String> {
        let mut weak = Vec::new();
        if self.flush_log_at_commit != 1 {
            weak.push(format!(
                "innodb_flush_log_at_trx_commit={}",
                self.flush_log_at_commit
            ));
        }
        if self.log_bin && self.sync_binlog != 1 {
            weak.push(format!("sync_binlog={}", self.sync_binlog));
        }
        match weak.is_empty() {
            true => None,
            false => Some(format!(
                "the server runs with {}: a crash of its host can lose the last commits, and tokens \
                 then rest on the server's clock alone (set innodb_flush_log_at_trx_commit=1{} for \
                 durable tokens)",
                weak.join(" and "),
                if self.log_bin {
                    " and sync_binlog=1"
                } else {
                    ""
                }
            )),
        }
    }
}

/// Says (with `-v`), once per process, that the server's durability settings are weaker than the
/// token guarantee wants.
pub fn warn_once(facts: &Facts) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if let Some(why) = facts.weak_durability()
        && !WARNED.swap(true, Ordering::Relaxed)
    {
        crate::info!("{why}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sql` as `flavor` executes it: the executable comments each server runs, unwrapped, and
    /// the ones it skips, dropped (MySQL runs `/*!NNNNN` up to its version and ignores `/*M!`;
    /// MariaDB runs `/*M!` and skips MySQL's 5.7-and-later version comments, 50700–99999).
    fn as_run_by(sql: &str, flavor: Flavor, version: u32) -> String {
        let mut out = String::new();
        let mut rest = sql;
        while let Some(start) = rest.find("/*") {
            out.push_str(&rest[..start]);
            let end = rest[start..].find("*/").expect("closed comment") + start;
            let inner = &rest[start + 2..end];
            let (maria_only, body) = match inner.strip_prefix("M!") {
                Some(body) => (true, body),
                None => (false, inner.strip_prefix('!').unwrap_or("")),
            };
            let digits: String = body.chars().take_while(char::is_ascii_digit).collect();
            let wanted: u32 = digits.parse().unwrap_or(0);
            let runs = match flavor {
                Flavor::MySql => !maria_only && wanted <= version,
                Flavor::MariaDb => {
                    wanted <= version && (maria_only || !(50700..100000).contains(&wanted))
                }
            };
            if runs && !inner.is_empty() {
                out.push_str(&body[digits.len()..]);
            }
            rest = &rest[end + 2..];
        }
        out.push_str(rest);
        out
    }

    #[test]
    fn each_server_sets_its_own_statement_timeout() {
        let sql = setup("lockrun:00ff");
        let mysql = as_run_by(&sql, Flavor::MySql, 80036);
        assert!(mysql.contains(", max_execution_time = 5000"), "{mysql}");
        assert!(!mysql.contains("max_statement_time"), "{mysql}");
        let mariadb = as_run_by(&sql, Flavor::MariaDb, 101106);
        assert!(mariadb.contains(", max_statement_time = 5 "), "{mariadb}");
        assert!(!mariadb.contains("max_execution_time"), "{mariadb}");
        for run in [&mysql, &mariadb] {
            assert!(run.contains("innodb_lock_wait_timeout = 3"));
            assert!(run.contains("net_read_timeout = 10"));
            assert!(run.contains("GET_LOCK(X'6c6f636b72756e3a30306666', 0)"));
        }
    }

    #[test]
    fn the_flavor_comes_from_the_version_string() {
        for v in ["8.0.36", "8.4.0-commercial", "9.1.0", "5.7.44-log"] {
            assert_eq!(Flavor::of(v), Flavor::MySql, "{v}");
        }
        for v in [
            "10.11.6-MariaDB-0+deb12u1",
            "5.5.5-10.6.16-MariaDB",
            "11.4.2-MariaDB-log",
        ] {
            assert_eq!(Flavor::of(v), Flavor::MariaDb, "{v}");
        }
    }

    #[test]
    fn weak_durability_is_named_with_its_fix() {
        let facts = |flush, sync, log_bin| Facts {
            flavor: Flavor::MySql,
            version: "8.0.36".into(),
            connection_id: 1,
            flush_log_at_commit: flush,
            sync_binlog: sync,
            log_bin,
            present: true,
        };
        assert_eq!(facts(1, 1, true).weak_durability(), None);
        assert_eq!(facts(1, 0, false).weak_durability(), None);
        let why = facts(2, 0, true).weak_durability().unwrap();
        assert!(
            why.contains("innodb_flush_log_at_trx_commit=2 and sync_binlog=0"),
            "{why}"
        );
        assert!(why.contains("sync_binlog=1 for"), "{why}");
        let why = facts(0, 1, false).weak_durability().unwrap();
        assert!(!why.contains("sync_binlog"), "{why}");
    }
}
