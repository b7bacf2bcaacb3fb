//! The `postgres://` backend behind a real PgBouncer in transaction pooling, beyond the
//! conformance suite that also runs there: clients turned away by PgBouncer are waited out,
//! handoffs take milliseconds although `LISTEN` cannot work through it, 300 lockruns hold at
//! once on a server that allows 60 connections, PgBouncer refusing lockrun's startup options
//! is met with the setting that fixes it, a holder rides through a server restart, an answer
//! one lockrun abandons never reaches the next client, and a waiter told where the server itself
//! is (`listen=`) listens there near its turn instead of looking, or says why it cannot and
//! tries again later.

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::support::asserts::{assert_hidden, assert_one_line};
use crate::support::backend_scenarios::assert_a_turned_away_waiter_gets_in;
use crate::support::fixture::{Fixture, Reachable};
use crate::support::lockrun::{Proc, lockrun, output, stderr_of_exited};
use crate::support::pgbouncer::{Options, Pooled, listening_at};
use crate::support::proxy::Proxy;
use crate::support::scene::Scene;
use crate::support::single_server::SingleServer;
use crate::support::wait::{SOON, code, number_in, text, wait_until};

#[test]
fn pgbouncer_turning_clients_away_is_waited_out_too() {
    let pooled = Pooled::with(Options {
        max_client_conn: 1,
        ..Options::default()
    });
    let s = Scene::new(pooled.url());
    let holder = s.hold("full", "h", &[]);
    let out = s.run(["--name", "full", "--no-wait", "--", "touch", "ran"]);
    assert_one_line(&out, 69, "no more connections allowed");
    let waiter = s.spawn([
        "-v", "--name", "full", "--wait", "30s", "--", "touch", "ran",
    ]);
    assert_a_turned_away_waiter_gets_in(&s, holder, waiter);
}

/// Guards against a holder behind PgBouncer losing a lease to a server restart that it rides
/// through without PgBouncer: renewals sent while the server is down make PgBouncer's logins to it
/// fail, and PgBouncer must log in again soon after it is back (README: `server_login_retry`;
/// with its default of 15 s, this 8 s lease is lost). The lease leaves room for a restart slowed
/// by a loaded machine: a server killed with SIGKILL recovers before it takes logins, and each
/// login it refuses meanwhile costs another second of PgBouncer's wait (with 4 s, the full suite
/// on 2 cores once lost it).
#[test]
fn a_server_down_for_a_second_is_ridden_through_behind_pgbouncer() {
    let mut pooled = Pooled::start();
    let s = Scene::new(pooled.url());
    let mut holder = s.hold("ride", "h", &["--ttl", "8s", "--renew", "500ms", "-vv"]);
    pooled.server.kill();
    std::thread::sleep(Duration::from_secs(1));
    let before = holder.renewals().len();
    pooled.server.relaunch();
    let renewed = wait_until(SOON, || holder.renewals().len() >= before + 2);
    assert!(
        renewed,
        "no renewal after the restart:\n{}",
        holder.process.stderr_so_far()
    );
    assert!(holder.command_alive(), "the command was stopped");
    let out = holder.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
}

#[test]
fn handoffs_behind_pgbouncer_take_milliseconds_not_a_recheck() {
    let pooled = Pooled::start();
    let s = Scene::new(pooled.url());
    let mut gaps = Vec::new();
    for i in 0..8 {
        let script = format!(
            "touch h{i}.held; while [ ! -e h{i}.go ]; do sleep 0.01; done; \
             exec date +%s%N > h{i}.end"
        );
        let mut holder = s.spawn(["--name", "ho", "--", "sh", "-c", &script]);
        let held = wait_until(SOON, || s.path(&format!("h{i}.held")).exists());
        assert!(held, "{}", holder.stderr_so_far());
        let start = format!("date +%s%N > w{i}.start");
        let mut waiter = s.spawn(["--name", "ho", "--wait", "30s", "--", "sh", "-c", &start]);
        s.wait_waiters("ho", 1);
        std::fs::write(s.path(&format!("h{i}.go")), "").unwrap();
        for run in [&mut holder, &mut waiter] {
            let out = run.wait(SOON);
            assert_eq!(code(&out), 0, "{}", text(&out.stderr));
        }
        let end = number_in(&s.path(&format!("h{i}.end")));
        let start = number_in(&s.path(&format!("w{i}.start")));
        gaps.push(Duration::from_nanos(start.saturating_sub(end)));
    }
    gaps.sort();
    let median = gaps[gaps.len() / 2];
    // Without a wake-up through PgBouncer, a waiter finds out at its one-second re-check.
    assert!(
        median < Duration::from_millis(500),
        "handoffs behind PgBouncer: {gaps:?}"
    );
}

#[test]
fn three_hundred_lockruns_hold_at_once_behind_pgbouncer() {
    // The test server allows 60 connections; PgBouncer shares 20 of them among 300 lockruns.
    let pooled = Pooled::start();
    let s = Scene::new(pooled.url());
    let mut holders: Vec<Proc> = (0..300)
        .map(|i| {
            let name = format!("many/{i}");
            let script = format!("touch started.{i}; read nothing || true");
            let mut cmd = s.cmd(["--name", &name, "--wait", "60s", "--", "sh", "-c", &script]);
            cmd.stdin(Stdio::piped());
            Proc::spawn(&mut cmd)
        })
        .collect();
    let held = || {
        (0..300)
            .filter(|i| s.path(&format!("started.{i}")).exists())
            .count()
    };
    if !wait_until(Duration::from_secs(60), || held() == 300) {
        let ended = stderr_of_exited(&mut holders, 5);
        panic!(
            "only {} of 300 held at once; some that ended: {ended:?}; pgbouncer said:\n{}",
            held(),
            pooled.bouncer.log()
        );
    }
    assert_eq!(s.list(&["many/"]).as_array().unwrap().len(), 300);
    for holder in &mut holders {
        drop(holder.take_stdin());
    }
    for holder in &mut holders {
        let out = holder.wait(Duration::from_secs(60));
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    }
}

#[test]
fn pgbouncer_refusing_the_startup_options_names_the_fix() {
    let pooled = Pooled::with(Options {
        ignore_options: false,
        ..Options::default()
    });
    let url = format!(
        "postgres://postgres:pw-5150@127.0.0.1:{}/postgres",
        pooled.bouncer.port()
    );
    let out = output(lockrun().args(["--backend", &url, "--name", "x", "--", "true"]));
    let line = assert_one_line(&out, 69, "unsupported startup parameter");
    assert!(line.contains("ignore_startup_parameters"), "{line}");
    assert_hidden(&line, &["pw-5150"]);
}

/// Guards against one lockrun's answer reaching another through PgBouncer. PgBouncer (1.18)
/// counts a server connection idle once the first of two pipelined requests has answered; when
/// the client then goes away while the second still runs, the server connection goes to the next
/// client with the rest of that answer waiting in it. So lockrun never pipelines requests on a
/// connection that may go through a pooler. Here the second request (a `--min-interval` claim)
/// waits for a row lock that a direct session holds, and the lockrun that sent it goes away.
#[test]
fn an_abandoned_answer_never_reaches_the_next_client() {
    use lockrun::backend::BackendSpec;
    use lockrun::name::LockName;

    let pooled = Pooled::with(Options {
        pool_size: 1,
        ..Options::default()
    });
    let spec = BackendSpec::parse(&pooled.url()).expect("the pooled URL parses");
    let name = LockName::parse("abandoned").expect("a name");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let backend = runtime
        .block_on(spec.open())
        .expect("lockrun reaches PgBouncer");
    // The name's row exists (the claim makes it), so that a claim can wait for its lock.
    runtime
        .block_on(
            backend
                .inspect()
                .claim_interval(&name, Duration::from_millis(1)),
        )
        .expect("a first claim");
    let mut locker = pooled
        .server
        .psql_command(
            "SELECT 1 FROM lockrun.names WHERE name = 'abandoned' FOR UPDATE; SELECT pg_sleep(2)",
        )
        .stdout(Stdio::null())
        .spawn()
        .expect("run psql");
    assert!(
        wait_until(SOON, || pooled.server.sql(
            "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation \
             WHERE c.relname = 'names' AND l.mode = 'RowShareLock' AND l.granted"
        ) != "0"),
        "the locking session never took the row"
    );
    runtime.block_on(async {
        let inspect = backend.inspect();
        // The status answers; the claim waits for the row until lockrun gives up on it.
        let both = async {
            tokio::join!(
                inspect.status(&name),
                inspect.claim_interval(&name, Duration::from_secs(3600))
            )
        };
        let _ = tokio::time::timeout(Duration::from_millis(500), both).await;
    });
    drop(backend);
    let next = runtime.block_on(async {
        let backend = spec.open().await?;
        backend
            .inspect()
            .status(&LockName::parse("other").unwrap())
            .await
    });
    let _ = locker.wait();
    let status = next.unwrap_or_else(|e| panic!("the next client got: {e}"));
    assert!(!status.held, "{status:?}");
}

/// Guards the `listen=` doorbell: behind PgBouncer, the waiter next in line opens one connection
/// to the server itself and is woken there, instead of looking at the line every few
/// milliseconds; it closes that connection once it holds, so holders never cost the server a
/// connection of their own. Proxies count the connections to the server and see the looks.
#[test]
fn a_waiter_behind_pgbouncer_listens_at_the_server_itself_when_told_where() {
    let pooled = Pooled::start();
    let direct = Proxy::start(pooled.server.port());
    let pooler = Proxy::start(pooled.bouncer.port());
    let s = Scene::new(pooled.url());
    let url = listening_at(&pooled.server.url_on(pooler.port()), direct.port());
    let mut holder = s.hold("aside", "h", &[]);
    let script = "touch w.held; while [ ! -e w.go ]; do sleep 0.01; done";
    let mut waiter = Proc::spawn(&mut s.cmd_via(
        &url,
        [
            "-v", "--name", "aside", "--wait", "60s", "--", "sh", "-c", script,
        ],
    ));
    s.wait_waiters("aside", 1);
    let listening = wait_until(SOON, || listens_at_the_server(&pooled, "aside"));
    assert!(listening, "it never listened:\n{}", waiter.stderr_so_far());
    assert_eq!(direct.connections(), 1);
    // A look already under way when it began to listen may still arrive.
    std::thread::sleep(Duration::from_millis(200));
    let looked = pooler.observe(b"peek_v2");
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        looked.fired().is_none(),
        "the listening waiter still looks at the line"
    );
    holder.finish();
    assert!(
        wait_until(SOON, || s.path("w.held").exists()),
        "the listening waiter never took its turn:\n{}",
        waiter.stderr_so_far()
    );
    let closed = wait_until(SOON, || direct.connections() == 0);
    assert!(closed, "the holder kept its listening connection");
    std::fs::write(s.path("w.go"), "").unwrap();
    let out = waiter.wait(SOON);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(direct.accepted(), 1, "{}", text(&out.stderr));
}

/// Guards a listening waiter whose place lapsed (it was paused past its heartbeat): it joins the
/// line again on a place that records no channel, so it must listen anew there — else no release
/// would ever wake it, and it would find its turn only by re-checking.
#[test]
fn a_listening_waiter_that_lost_its_place_listens_again_on_the_new_one() {
    // Another waiter takes the head of the line meanwhile: it joins again farther back.
    a_paused_listener_listens_again("lapse", true);
}

/// Guards the same when it was alone in line: it joins again at the head, no farther from it
/// than before, so only the time it was away can tell that its place may have lapsed.
#[test]
fn a_lone_listening_waiter_that_lost_its_place_listens_again() {
    a_paused_listener_listens_again("alone", false);
}

/// A waiter on `name` listens at the server, is paused until its place lapses (with `another`
/// waiter joining meanwhile, or nobody), and once resumed listens on its new place and gets in.
fn a_paused_listener_listens_again(name: &str, another: bool) {
    let (pooled, direct, s, url) = listening_scene();
    let mut holder = s.hold(name, "h", &[]);
    let waiter = |url: &str, ran: &str| {
        let args = ["--name", name, "--wait", "60s", "--", "touch", ran];
        Proc::spawn(&mut s.cmd_via(url, args))
    };
    let mut runs = vec![waiter(&url, "paused.ran")];
    s.wait_waiters(name, 1);
    let listening = wait_until(SOON, || listens_at_the_server(&pooled, name));
    assert!(listening, "it never listened:\n{}", runs[0].stderr_so_far());
    runs[0].signal(Signal::SIGSTOP);
    // Its heartbeat (3 s) lapses.
    let lapsed = wait_until(SOON, || !listens_at_the_server(&pooled, name));
    assert!(lapsed, "its place never lapsed");
    if another {
        runs.push(waiter(s.url(), "other.ran"));
        s.wait_waiters(name, 1);
    }
    runs[0].signal(Signal::SIGCONT);
    let anew = wait_until(SOON, || listens_at_the_server(&pooled, name));
    assert!(
        anew,
        "it never listened on its new place:\n{}",
        runs[0].stderr_so_far()
    );
    holder.finish();
    for run in &mut runs {
        let out = run.wait(SOON);
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    }
    assert!(s.path("paused.ran").exists());
    assert!(!another || s.path("other.ran").exists());
    assert_eq!(direct.accepted(), 2, "one listening connection per place");
}

/// Guards a listening connection that breaks while the waiter listens (the server restarted, a
/// firewall dropped it): the waiter listens again on a new one, says nothing about it, and the
/// release still wakes it.
#[test]
fn a_broken_listening_connection_is_opened_again() {
    let (pooled, direct, s, url) = listening_scene();
    let mut holder = s.hold("broken", "h", &[]);
    let mut waiter = Proc::spawn(&mut s.cmd_via(
        &url,
        [
            "-vv", "--name", "broken", "--wait", "60s", "--", "touch", "ran",
        ],
    ));
    s.wait_waiters("broken", 1);
    // Listening, not still setting up (a break then is a failure to listen, said and rested).
    let listening = wait_until(SOON, || {
        waiter.stderr_so_far().contains("listening for its turn at")
    });
    assert!(listening, "it never listened:\n{}", waiter.stderr_so_far());
    direct.reset();
    direct.heal();
    let again = wait_until(SOON, || direct.accepted() == 2 && direct.connections() == 1);
    assert!(
        again,
        "it never listened again ({} accepted):\n{}",
        direct.accepted(),
        waiter.stderr_so_far()
    );
    assert!(listens_at_the_server(&pooled, "broken"));
    holder.finish();
    let out = waiter.wait(SOON);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(s.path("ran").exists());
    assert!(
        !text(&out.stderr).contains("cannot listen"),
        "{}",
        text(&out.stderr)
    );
}

/// Guards the retry after a failed listen: the server itself turned the waiter away (every
/// connection reset, as a restarting server would), so it looked instead; half a minute later it
/// listens there after all, having said so only once.
#[test]
fn a_waiter_that_could_not_listen_tries_again_later() {
    let (pooled, direct, s, url) = listening_scene();
    direct.reset();
    let mut holder = s.hold("retry", "h", &[]);
    let mut waiter = Proc::spawn(&mut s.cmd_via(
        &url,
        ["--name", "retry", "--wait", "90s", "--", "touch", "ran"],
    ));
    let said = cannot_listen_at(&format!("127.0.0.1:{}", direct.port()));
    let reported = wait_until(SOON, || waiter.stderr_so_far().contains(&said));
    assert!(reported, "{}", waiter.stderr_so_far());
    direct.heal();
    let listening = wait_until(Duration::from_secs(45), || {
        listens_at_the_server(&pooled, "retry")
    });
    assert!(listening, "it never listened:\n{}", waiter.stderr_so_far());
    holder.finish();
    let out = waiter.wait(SOON);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr).matches(&said).count(), 1);
}

/// Guards `listen=HOST:PORT/DBNAME` behind a PgBouncer whose name for the database is not the
/// server's: without `/DBNAME` the listening connection asks the server for a database it does
/// not have (said once; the waiter looks and still gets in), with it the waiter listens.
#[test]
fn behind_a_pgbouncer_alias_listen_names_the_servers_own_database() {
    let pooled = Pooled::start();
    let s = Scene::new(pooled.url());
    let aliased = format!(
        "postgres://postgres@127.0.0.1:{}/aliased",
        pooled.bouncer.port()
    );
    let server = format!("127.0.0.1:{}", pooled.server.port());
    let said = cannot_listen_at(&server);
    for (i, listen) in [server.clone(), format!("{server}/postgres")]
        .iter()
        .enumerate()
    {
        let name = format!("alias/{i}");
        let mut holder = s.hold(&name, &format!("h{i}"), &[]);
        let url = format!("{aliased}?listen={listen}");
        let args = ["--name", &name, "--wait", "60s", "--", "true"];
        let mut waiter = Proc::spawn(&mut s.cmd_via(&url, args));
        let named = match i {
            0 => wait_until(SOON, || waiter.stderr_so_far().contains(&said)),
            _ => wait_until(SOON, || listens_at_the_server(&pooled, &name)),
        };
        assert!(named, "{listen}: {}", waiter.stderr_so_far());
        holder.finish();
        let out = waiter.wait(SOON);
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
        let stderr = text(&out.stderr);
        assert_eq!(stderr.matches(&said).count(), 1 - i, "{listen}: {stderr}");
        if i == 0 {
            assert!(
                stderr.contains("aliased"),
                "the reason names the database: {stderr}"
            );
        }
    }
}

/// The line a lockrun says, once, when it cannot listen at `endpoint`.
fn cannot_listen_at(endpoint: &str) -> String {
    format!("cannot listen for its turn at {endpoint}")
}

/// PgBouncer in front of a server, a proxy in front of the server itself, a scene on the pooled
/// URL, and the `listen=` URL that names that proxy: where every listening test starts.
fn listening_scene() -> (Pooled, Proxy, Scene, String) {
    let pooled = Pooled::start();
    let direct = Proxy::start(pooled.server.port());
    let s = Scene::new(pooled.url());
    let url = listening_at(&pooled.url(), direct.port());
    (pooled, direct, s, url)
}

/// Whether a live waiter for NAME has recorded a channel on its place in line: it listens at the
/// server itself (behind PgBouncer, a waiter that only looks records none).
fn listens_at_the_server(pooled: &Pooled, name: &str) -> bool {
    let live_with_channel = pooled.server.sql(&format!(
        "SELECT count(*) FROM lockrun.waiters WHERE name = '{name}' \
         AND channel IS NOT NULL AND beat_until >= clock_timestamp()"
    ));
    live_with_channel == "1"
}

/// Guards the `listen=` fallbacks: an address that never answers, and one that leads to
/// PgBouncer again, are each reported once, and the waiter still gets its turn by looking.
#[test]
fn a_listen_address_that_cannot_serve_is_reported_and_the_waiter_looks() {
    let pooled = Pooled::start();
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("a listener that never accepts");
    let silent_port = silent.local_addr().unwrap().port();
    let cases = [
        (silent_port, "no connection within"),
        (pooled.bouncer.port(), "leads to a pooler too"),
    ];
    for (i, (port, why)) in cases.into_iter().enumerate() {
        let s = Scene::new(pooled.url());
        let name = format!("deaf/{i}");
        let url = listening_at(&pooled.url(), port);
        let mut holder = s.hold(&name, "h", &[]);
        let mut waiter = Proc::spawn(&mut s.cmd_via(
            &url,
            ["--name", &name, "--wait", "60s", "--", "touch", "ran"],
        ));
        let said = cannot_listen_at(&format!("127.0.0.1:{port}"));
        let reported = wait_until(SOON, || waiter.stderr_so_far().contains(&said));
        assert!(reported, "{why}: {}", waiter.stderr_so_far());
        holder.finish();
        let out = waiter.wait(SOON);
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
        assert!(s.path("ran").exists());
        let stderr = text(&out.stderr);
        assert_eq!(stderr.matches(&said).count(), 1, "{stderr}");
        let line = stderr.lines().find(|l| l.contains(&said)).unwrap();
        assert!(line.contains(why), "{line}");
    }
}
