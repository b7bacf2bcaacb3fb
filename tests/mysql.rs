//! What only the `mysql://` backend has, against a real MariaDB: its tables and procedures
//! (created once under concurrent first use, waited for when another lockrun is slow creating
//! them, relocated by `lockrun_table_prefix=`), TLS with the
//! `mysql` client's `ssl-mode`s, a client that loses its connection mid-lease, a lease row forced
//! out by another session, a restart ridden through, wake-ups that reach only the waiter whose
//! turn it is, one connection per waiter, the modes of issues 15 and 16 (`--shared`,
//! `--supersede`, `--min-interval` by the server's clock), and the durability warning.
//! Everything it shares with the other backends is in the conformance suite.

use std::time::{Duration, Instant};

use crate::support::asserts::{assert_one_line, assert_said};
use crate::support::backend_scenarios::{
    assert_a_brief_restart_is_ridden_through, assert_a_first_use_waits_for_a_slow_creator,
    assert_readers_share_and_a_waiting_writer_goes_first, run_six_first_uses_at_once,
};
use crate::support::certs::Certificates;
use crate::support::fixture::{Fixture, Reachable};
use crate::support::lockrun::{Proc, output};
use crate::support::mysql_server::{DATABASE, MySqlServer};
use crate::support::scene::Scene;
use crate::support::single_server::SingleServer;
use crate::support::tools;
use crate::support::wait::{SOON, code, numbers_in, text, wait_until};

/// Sessions connected to the tests' database, other than the one asking.
fn sessions(server: &MySqlServer) -> usize {
    server
        .sql(&format!(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
             WHERE DB = '{DATABASE}' AND ID <> CONNECTION_ID()"
        ))
        .parse()
        .expect("a count")
}

#[test]
fn concurrent_first_use_creates_the_tables_once_without_errors() {
    let server = MySqlServer::start();
    let s = Scene::new(server.url());
    run_six_first_uses_at_once(&s);
    let objects = server.sql(&format!(
        "SELECT (SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{DATABASE}'), \
         (SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = '{DATABASE}')"
    ));
    assert_eq!(objects, "3\t7", "tables and procedures");
    assert_eq!(
        server.sql(&format!("SELECT COUNT(*) FROM {DATABASE}.lockrun_names")),
        "3"
    );
}

/// The user-level lock under which lockrun creates its tables in the tests' database (its name
/// is `lockrun-ddl:` and the FNV-1a hash of `DATABASE.PREFIX`, in hex).
fn ddl_lock() -> String {
    let hash = format!("{DATABASE}.lockrun_")
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, b| {
            (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    format!("lockrun-ddl:{hash:016x}")
}

/// A `mariadb` client that takes the tables' lock, as a lockrun creating them would, and keeps
/// it for `held` (or until it is ended); returns once the server shows the lock taken.
fn hold_the_tables_lock(server: &MySqlServer, held: Duration) -> std::process::Child {
    let creator = server
        .client_session(&format!(
            "SELECT GET_LOCK('{}', 0); SELECT SLEEP({});",
            ddl_lock(),
            held.as_secs()
        ))
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("run the mariadb client");
    assert!(
        wait_until(SOON, || server.sql(&format!(
            "SELECT IS_USED_LOCK('{}') IS NOT NULL",
            ddl_lock()
        )) == "1"),
        "the client never took the tables' lock"
    );
    creator
}

/// A first use that finds another lockrun still creating the tables (here: holding their lock
/// for longer than a request, or one statement, may take) waits for it quietly and then runs:
/// creating the tables has a budget of its own, not a request's few seconds, and the wait for the
/// lock is not cut off by the session's 5 s statement limit.
#[test]
fn a_first_use_waits_for_a_slow_creation_of_the_tables() {
    const HELD: Duration = Duration::from_secs(7);
    let server = MySqlServer::start();
    let s = Scene::new(server.url());
    let creator = hold_the_tables_lock(&server, HELD);
    assert_a_first_use_waits_for_a_slow_creator(&s, creator, HELD);
}

/// A first use whose creator holds the tables' lock past the 20 s lockrun waits for it gives up
/// with a one-line error naming the cause, and never runs the command; once the creator lets go,
/// the next run creates the tables and runs.
#[test]
fn a_first_use_gives_up_on_a_creator_that_never_finishes() {
    let server = MySqlServer::start();
    let s = Scene::new(server.url());
    let mut creator = hold_the_tables_lock(&server, Duration::from_secs(120));
    let out = s.run(["--name", "first", "--", "touch", "ran"]);
    let stderr = text(&out.stderr);
    assert_eq!(code(&out), 69, "{stderr}");
    assert!(
        stderr.contains("another lockrun took too long creating lockrun's tables"),
        "{stderr}"
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        !s.path("ran").exists(),
        "the command ran without the tables"
    );
    creator.kill().expect("end the client");
    creator.wait().expect("reap the client");
    let out = s.run(["--name", "first", "--", "touch", "ran"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(s.path("ran").exists());
}

#[test]
fn the_table_prefix_can_be_chosen_and_is_validated() {
    let server = MySqlServer::start();
    let s = Scene::new(format!("{}?lockrun_table_prefix=jobs_", server.url()));
    let out = s.run(["--name", "p", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(
        server.sql(&format!("SELECT COUNT(*) FROM {DATABASE}.jobs_names")),
        "1"
    );
    let default = server.sql(&format!(
        "SELECT COUNT(*) FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = '{DATABASE}' AND TABLE_NAME LIKE 'lockrun%'"
    ));
    assert_eq!(default, "0", "the default prefix was used too");
    // A bad prefix is a usage error, judged before connecting.
    let bad = format!("{}?lockrun_table_prefix=Bad%60Name", server.url());
    s.refuses(&bad, "p", 64, "lockrun_table_prefix");
}

#[test]
fn tls_follows_the_ssl_modes_of_the_mysql_client() {
    let Some(certs) = Certificates::if_openssl() else {
        return;
    };
    let server = MySqlServer::with_tls(certs.dir());
    // A user that may only log in over TLS proves that the connection is encrypted.
    server.sql("CREATE USER 'tls'@'%' REQUIRE SSL; GRANT ALL ON *.* TO 'tls'@'%'");
    let url = |host: &str, query: &str| {
        format!("mysql://tls@{host}:{}/{DATABASE}?{query}", server.port())
    };
    let ca = certs.file("ca.crt");
    let s = Scene::new(url(
        "127.0.0.1",
        &format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={}", ca.display()),
    ));
    s.accepts(s.url(), "tls");
    // Without TLS the user is refused: the run above was encrypted.
    s.refuses(
        &url("127.0.0.1", "ssl-mode=DISABLED"),
        "tls",
        69,
        "access denied",
    );
    // REQUIRED encrypts without checking the certificate, as the mysql client does.
    s.accepts(&url("127.0.0.1", "ssl-mode=REQUIRED"), "tls");
    // A verifying mode checks the chain: the system's roots do not vouch for the test authority.
    s.refuses(
        &url("127.0.0.1", "ssl-mode=VERIFY_CA"),
        "tls",
        69,
        "certificate",
    );
    // And the host name, VERIFY_CA too: the server also listens on 127.0.0.2, which its
    // certificate does not name.
    for mode in ["VERIFY_CA", "VERIFY_IDENTITY"] {
        let other = url(
            "127.0.0.2",
            &format!("ssl-mode={mode}&ssl-ca={}", ca.display()),
        );
        s.refuses(&other, "tls", 69, "not valid for name");
    }
}

#[test]
fn a_brief_restart_is_ridden_through() {
    let mut server = MySqlServer::start();
    assert_a_brief_restart_is_ridden_through(&mut server, |server| {
        let back = server.sql("SELECT UTC_TIMESTAMP(6)");
        // The lease now ends more than 3.5 s after the server was back.
        Box::new(move || {
            server.sql(&format!(
                "SELECT COUNT(*) FROM {DATABASE}.lockrun_leases WHERE name = 'ride' \
                 AND expires_at > '{back}' + INTERVAL 3500000 MICROSECOND"
            )) == "1"
        })
    });
}

/// Guards against a holder whose connection is cut by the server (an idle-connection reaper, a
/// failover proxy, `KILL`) losing its lease: the next renewal reconnects and extends the row.
#[test]
fn a_holder_whose_connection_is_killed_reconnects_and_keeps_the_lease() {
    let server = MySqlServer::start();
    let s = Scene::new(server.url());
    let mut holder = s.hold("cut", "h", &["--ttl", "3s", "-vv"]);
    let token = holder.token();
    let before = holder.renewals().len();
    let killed = server.sql(&format!(
        "SELECT GROUP_CONCAT(ID) FROM information_schema.PROCESSLIST \
         WHERE DB = '{DATABASE}' AND ID <> CONNECTION_ID()"
    ));
    assert!(!killed.is_empty() && killed != "NULL", "no session to kill");
    for id in killed.split(',') {
        server.sql(&format!("KILL CONNECTION {id}"));
    }
    // Two renewals after the cut (one a full TTL after it would have ended a lost lease).
    assert!(
        wait_until(Duration::from_secs(5), || holder.renewals().len()
            >= before + 4),
        "no renewals after the cut: {}",
        holder.process.stderr_so_far()
    );
    assert!(holder.command_alive(), "the command was stopped");
    let status = s.status("cut");
    assert_eq!(status["holders"][0]["token"], token, "{status}");
    assert_eq!(code(&holder.finish()), 0);
}

/// Guards against a holder that keeps running after its row was deleted or taken over by another
/// session, and against its release removing the row that replaced it.
#[test]
fn a_lease_row_forced_out_by_another_session_stops_the_holder() {
    let server = MySqlServer::start();
    let s = Scene::new(server.url());
    let mut deleted = s.hold("gone", "a", &["--ttl", "2s"]);
    server.sql(&format!(
        "DELETE FROM {DATABASE}.lockrun_leases WHERE name = 'gone'"
    ));
    let out = deleted.process.wait(SOON);
    assert_eq!(code(&out), 76, "{}", text(&out.stderr));
    assert_said(&out, "gone or has another holder");

    let mut replaced = s.hold("taken", "b", &["--ttl", "2s"]);
    server.sql(&format!(
        "UPDATE {DATABASE}.lockrun_leases SET owner = 'someone-else', \
         expires_at = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR WHERE name = 'taken'"
    ));
    let out = replaced.process.wait(SOON);
    assert_eq!(code(&out), 76, "{}", text(&out.stderr));
    assert_eq!(
        server.sql(&format!(
            "SELECT owner FROM {DATABASE}.lockrun_leases WHERE name = 'taken'"
        )),
        "someone-else",
        "the stale holder's release removed the row that replaced it"
    );
}

/// Guards against a release waking the whole line (a herd): only the waiter whose turn it is
/// is woken (its wake-up count rises); the others sleep on.
#[test]
fn a_release_wakes_only_the_waiter_whose_turn_it_is() {
    let server = MySqlServer::start();
    let s = Scene::new(server.url());
    let mut holder = s.hold("herd", "h", &["--ttl", "10s"]);
    let mut waiters = s.queue_waiters("herd", &["--ttl", "10s"], 4, |i| {
        format!("echo {i} >> ran; sleep 0.3")
    });
    let rungs = || {
        server.sql(&format!(
            "SELECT COALESCE(SUM(rung), 0) FROM {DATABASE}.lockrun_waiters WHERE name = 'herd'"
        ))
    };
    assert_eq!(rungs(), "0");
    assert_eq!(code(&holder.finish()), 0);
    // The first waiter runs; the three behind it were not woken.
    assert!(wait_until(SOON, || s.path("ran").exists()));
    assert_eq!(s.status("herd")["waiters"], 3);
    assert_eq!(rungs(), "0", "a release woke waiters whose turn it was not");
    for waiter in &mut waiters {
        assert_eq!(code(&waiter.wait(SOON)), 0);
    }
    assert_eq!(numbers_in(&s.path("ran")), [0, 1, 2, 3]);
}

/// Guards against a waiter that needs more than its one connection (issue 17's connection
/// budget): a holder has its own plus, once its command has run a moment, a listening one.
#[test]
fn a_waiter_uses_one_connection() {
    let server = MySqlServer::start();
    let s = Scene::new(server.url());
    let mut holder = s.hold("budget", "h", &["--ttl", "10s"]);
    assert!(
        wait_until(SOON, || sessions(&server) == 2),
        "the holder has {} sessions",
        sessions(&server)
    );
    let mut waiters: Vec<Proc> = (0..3)
        .map(|_| s.waiter("budget", &["--ttl", "10s"], "true"))
        .collect();
    s.wait_waiters("budget", 3);
    assert!(
        wait_until(SOON, || sessions(&server) == 5),
        "three waiters and a holder have {} sessions",
        sessions(&server)
    );
    assert_eq!(code(&holder.finish()), 0);
    for waiter in &mut waiters {
        assert_eq!(code(&waiter.wait(SOON)), 0);
    }
}

/// Guards against readers that exclude each other, and a writer starved by readers that came
/// after it (issue 16): three readers hold together, a writer waits for them, a reader that
/// arrives after the writer waits behind it, and tokens rise in the order the holds began.
#[test]
fn readers_share_and_a_waiting_writer_goes_first() {
    let server = MySqlServer::start();
    let held = assert_readers_share_and_a_waiting_writer_goes_first(&server.url(), "5s");
    let holders = held["holders"].as_array().unwrap();
    assert!(holders.iter().all(|h| h["slot"] == 0), "{held}");
}

/// Guards against an older `--supersede` waiter that keeps waiting, or learns of a newer one
/// only at its next re-check (issue 15): with three queued, the two older ones exit with the busy
/// code promptly, naming the newer one, and only the newest runs.
#[test]
fn only_the_newest_superseding_waiter_runs() {
    let server = MySqlServer::start();
    let s = Scene::new(server.url());
    let mut holder = s.hold("deploy", "h", &["--ttl", "10s"]);
    let mut older = Vec::new();
    for i in 0..2 {
        older.push(s.waiter(
            "deploy",
            &["--supersede", "--note", &format!("build {i}")],
            &format!("touch ran{i}"),
        ));
        s.wait_waiters("deploy", 1);
    }
    // The second superseded the first already.
    let out = older[0].wait(SOON);
    assert_eq!(code(&out), 75, "{}", text(&out.stderr));
    let mut newest = s.waiter(
        "deploy",
        &["--supersede", "--note", "build 2"],
        "touch ran2",
    );
    let joined = Instant::now();
    let out = older[1].wait(SOON);
    let after = joined.elapsed();
    assert_eq!(code(&out), 75, "{}", text(&out.stderr));
    assert_said(&out, "superseded by");
    assert_said(&out, "build 2");
    assert!(
        after < Duration::from_secs(1),
        "superseded only after {after:?}"
    );
    assert_eq!(code(&holder.finish()), 0);
    assert_eq!(code(&newest.wait(SOON)), 0);
    assert!(s.path("ran2").exists());
    assert!(!s.path("ran0").exists() && !s.path("ran1").exists());
}

/// Guards against `--min-interval` trusting the hosts' clocks (issue 15): two hosts whose clocks
/// are 5 s ahead and 5 s behind both try a once-a-minute job; exactly one runs, because the
/// server's clock decides.
#[test]
fn min_interval_is_judged_by_the_servers_clock() {
    let Some(library) = tools::libfaketime() else {
        return;
    };
    let server = MySqlServer::start();
    let s = Scene::new(server.url());
    let mut ran = 0;
    for (skew, tag) in [("+5s", "ahead"), ("-5s", "behind")] {
        let mut cmd = s.cmd(["--name", "cron", "--min-interval", "1m", "--", "touch", tag]);
        cmd.env("LD_PRELOAD", &library).env("FAKETIME", skew);
        let out = output(&mut cmd);
        match code(&out) {
            0 => ran += 1,
            75 => assert_said(&out, "ago"),
            other => panic!("{skew}: exit {other}: {}", text(&out.stderr)),
        }
    }
    assert_eq!(ran, 1, "a once-a-minute job ran {ran} times");
}

/// Guards against a server whose commits are not flushed at once going unmentioned (issue 13):
/// with `-v`, lockrun names the settings once; without it, nothing is said.
#[test]
fn weak_durability_settings_are_named_once_with_v() {
    let server = MySqlServer::start();
    let s = Scene::new(server.url());
    let out = s.run(["-v", "--name", "d", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert_eq!(
        stderr.matches("innodb_flush_log_at_trx_commit=2").count(),
        1,
        "{stderr}"
    );
    let out = s.run(["--name", "d", "--", "true"]);
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
}

/// Guards against a hand-over that breaks when the releaser may not interrupt the waiter's
/// session (`KILL QUERY` needs the same user or `CONNECTION ADMIN`, which application users
/// rarely have): the release succeeds all the same, and the other user's waiter, not woken,
/// finds its turn at its next look.
#[test]
fn a_waiter_of_another_user_gets_its_turn_without_being_woken() {
    let server = MySqlServer::start();
    for user in ["alice", "bob"] {
        server.sql(&format!(
            "CREATE USER '{user}'@'%' IDENTIFIED BY 'pw-{user}'; \
             GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, CREATE ROUTINE, EXECUTE \
             ON {DATABASE}.* TO '{user}'@'%'"
        ));
    }
    let url = |user: &str| {
        format!(
            "mysql://{user}:pw-{user}@127.0.0.1:{}/{DATABASE}",
            server.port()
        )
    };
    let s = Scene::new(url("alice"));
    let mut holder = s.hold("mixed", "h", &["--ttl", "3s"]);
    let mut waiter = Proc::spawn(&mut s.cmd_via(
        &url("bob"),
        ["--name", "mixed", "--wait", "20s", "--", "touch", "bob-ran"],
    ));
    s.wait_waiters("mixed", 1);
    let out = holder.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    let out = waiter.wait(SOON);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(s.path("bob-ran").exists());
}

/// Guards the look `--progress` makes beside a waiter whose only connection sleeps in a
/// statement: when the server refuses that extra session (this user may hold one), the line is
/// skipped and nothing else changes — the waiter still runs once the holder lets go.
#[test]
fn a_progress_look_the_server_refuses_skips_its_line_and_the_wait_goes_on() {
    let server = MySqlServer::start();
    server.sql(&format!(
        "CREATE USER 'solo'@'%' IDENTIFIED BY 'pw-solo' WITH MAX_USER_CONNECTIONS 1; \
         GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, CREATE ROUTINE, EXECUTE \
         ON {DATABASE}.* TO 'solo'@'%'"
    ));
    let s = Scene::new(server.url());
    let mut holder = s.hold("aside", "h", &["--ttl", "3s"]);
    let solo = format!(
        "mysql://solo:pw-solo@127.0.0.1:{}/{DATABASE}",
        server.port()
    );
    let mut waiter = Proc::spawn(&mut s.cmd_via(
        &solo,
        [
            "-vv",
            "--name",
            "aside",
            "--progress",
            "300ms",
            "--wait",
            "20s",
            "--",
            "touch",
            "solo-ran",
        ],
    ));
    assert!(
        wait_until(SOON, || waiter
            .stderr_so_far()
            .contains("cannot read who holds aside")),
        "no look was refused:\n{}",
        waiter.stderr_so_far()
    );
    assert_eq!(code(&holder.finish()), 0);
    let out = waiter.wait(SOON);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(s.path("solo-ran").exists());
}

/// Guards against a refused privilege worded as a bare server error: a user without `EXECUTE`
/// (refused at the procedure that puts a waiter in line) and one without `CREATE ROUTINE` on a
/// first use (which MariaDB words as "access denied to database") are told which grants lockrun
/// needs, and nothing runs.
#[test]
fn a_user_missing_a_privilege_is_told_which_grants_lockrun_needs() {
    let server = MySqlServer::start();
    let owner = Scene::new(server.url());
    let _holder = owner.hold("taken", "h", &[]);
    server.sql(&format!(
        "CREATE USER 'noexec'@'%' IDENTIFIED BY 'pw'; \
         GRANT SELECT, INSERT, UPDATE, DELETE ON {DATABASE}.* TO 'noexec'@'%'"
    ));
    let s = Scene::new(format!(
        "mysql://noexec:pw@127.0.0.1:{}/{DATABASE}",
        server.port()
    ));
    let out = s.run(["--name", "taken", "--wait", "5s", "--", "touch", "ran"]);
    let said = assert_one_line(&out, 69, "execute command denied");
    assert!(
        said.contains("needs SELECT, INSERT, UPDATE, DELETE and EXECUTE"),
        "{said}"
    );
    assert!(!s.path("ran").exists());

    server.sql(&format!(
        "CREATE USER 'noroutine'@'%' IDENTIFIED BY 'pw'; \
         GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, EXECUTE ON {DATABASE}.* TO 'noroutine'@'%'"
    ));
    let s = Scene::new(format!(
        "mysql://noroutine:pw@127.0.0.1:{}/{DATABASE}?lockrun_table_prefix=fresh_",
        server.port()
    ));
    let said = assert_one_line(&s.run(["--name", "x", "--", "touch", "ran"]), 69, "denied");
    assert!(said.contains("CREATE ROUTINE until"), "{said}");
    assert!(!s.path("ran").exists());
}
