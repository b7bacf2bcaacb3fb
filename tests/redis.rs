//! What only the `redis://` backend has, or what takes its wire to test: `rediss://` with
//! certificate checks, and the `--min-interval` look and claim meeting a silent server or a
//! signal (the fault proxy knows the script by its SHA). Everything it shares with the other
//! backends is in the conformance suite.

use std::time::Duration;

use nix::sys::signal::Signal;

use crate::support::asserts::{assert_ended_without_running, assert_said};
use crate::support::certs::Certificates;
use crate::support::fixture::{Fixture, Reachable};
use crate::support::holder::Holder;
use crate::support::lockrun::{Proc, lockrun, output};
use crate::support::proxy::{Proxy, Trigger};
use crate::support::redis_server::RedisServer;
use crate::support::scene::Scene;
use crate::support::single_server::SingleServer;
use crate::support::wait::{SOON, code, text, wait_until};

#[test]
fn rediss_connects_with_a_trusted_certificate_and_refuses_an_unknown_one() {
    let Some(certs) = Certificates::if_openssl() else {
        return;
    };
    let server = RedisServer::with_tls(certs.dir());
    let url = format!("rediss://localhost:{}", server.port());
    let trusted = output(
        lockrun()
            .env("SSL_CERT_FILE", certs.file("ca.crt"))
            .args(["--backend", &url, "--name", "tls", "--", "sh", "-c"])
            .arg("test -n \"$FENCING_TOKEN\""),
    );
    assert_eq!(code(&trusted), 0, "{}", text(&trusted.stderr));
    let untrusted = output(
        lockrun()
            .env_remove("SSL_CERT_FILE")
            .env_remove("SSL_CERT_DIR")
            .args([
                "--backend",
                &url,
                "--name",
                "tls",
                "--",
                "touch",
                "/nonexistent/ran",
            ]),
    );
    assert_eq!(code(&untrusted), 69, "{}", text(&untrusted.stderr));
    assert_said(&untrusted, &format!("localhost:{}", server.port()));
}

/// The scheme and the port disagree: `rediss://` to a plain Redis (which reads the TLS handshake
/// as the start of a command and waits for the rest) says the server does not speak TLS, rather
/// than only that it timed out; `redis://` to a TLS port (which hangs up on plain bytes) is
/// unreachable, with a word on TLS.
#[test]
fn tls_asked_of_a_plain_server_or_refused_by_a_tls_one_is_told() {
    let refused = |url: String| {
        let out = output(
            lockrun()
                .args(["--backend", &url, "--name", "tls", "--"])
                .args(["touch", "/nonexistent/ran"]),
        );
        assert_eq!(code(&out), 69, "{}", text(&out.stderr));
        out
    };
    let plain = RedisServer::start();
    let out = refused(format!("rediss://127.0.0.1:{}", plain.port()));
    assert_said(&out, "does not speak TLS on this port (use redis://)");
    let Some(certs) = Certificates::if_openssl() else {
        return;
    };
    let secure = RedisServer::with_tls(certs.dir());
    let out = refused(format!("redis://127.0.0.1:{}", secure.port()));
    assert_said(&out, &format!("127.0.0.1:{}", secure.port()));
    assert_said(&out, "if the server expects TLS, use rediss://");
}

/// A Redis user whose ACL forbids PUBLISH on lockrun's channels: `release --force` (which
/// tells each holder on its channel) is refused before it drops anything, rather than dropping
/// the holder and then failing (Redis keeps a failed script's writes), so the exit status tells
/// the truth. A user that may not SUBSCRIBE holds the lease, and says that a forced release
/// will be noticed only at its next renewal.
#[test]
fn a_redis_user_without_pub_sub_rights_is_told_before_anything_changes() {
    let server = RedisServer::start();
    for rules in [["-publish"].as_slice(), &["-subscribe"]] {
        let user = rules[0].trim_start_matches('-');
        let mut acl = vec!["ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all"];
        acl.extend_from_slice(rules);
        assert_eq!(server.ask(&acl), "OK");
    }
    let as_user = |user: &str| format!("redis://{user}:pw@127.0.0.1:{}", server.port());
    let scene = Scene::new(server.url());
    let mut holder = scene.hold("acl", "h", &["--ttl", "20s"]);
    let refused = output(lockrun().args([
        "release",
        "acl",
        "--force",
        "--backend",
        &as_user("publish"),
    ]));
    assert_eq!(code(&refused), 69, "{}", text(&refused.stderr));
    assert_said(&refused, "may not PUBLISH");
    assert!(
        holder.running(),
        "the holder was stopped by a refused release"
    );
    let status = output(lockrun().args(["status", "acl", "--backend", &server.url()]));
    assert!(
        text(&status.stdout).contains("held"),
        "{}",
        text(&status.stdout)
    );
    assert_eq!(code(&holder.finish()), 0);

    let out = output(&mut scene.cmd_via(
        &as_user("subscribe"),
        ["--name", "deaf", "--", "sleep", "1"],
    ));
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_said(&out, "cannot listen for a forced release");
    assert_said(&out, "may not subscribe");
}

/// A `--min-interval` look that gets no answer decides nothing: the late run, finding the name
/// held, waits in line as it would without the look, and the claim it makes once it holds the
/// name decides (here: too soon, exit 75, its command never run).
#[test]
fn an_unanswered_min_interval_look_leaves_the_decision_to_the_claim() {
    let (_server, scene, mut holder, mut late, _proxy) = late_run_whose_look_gets_no_answer();
    let gave_up = wait_until(Duration::from_secs(20), || {
        let said = late.stderr_so_far();
        said.contains("cannot see when cron last ran") || said.contains("took too long")
    });
    assert!(gave_up, "the look never gave up: {}", late.stderr_so_far());
    assert!(
        !late.exited(),
        "the unanswered look ended the run: {}",
        late.stderr_so_far()
    );
    assert_eq!(code(&holder.finish()), 0);
    let out = late.wait(Duration::from_secs(30));
    assert_ended_without_running(&scene, &out, 75, "less than --min-interval");
}

/// A signal during the look ends the run at once, as during a wait: it is not left queued until
/// the look gives up.
#[test]
fn a_signal_during_a_min_interval_look_ends_the_run_at_once() {
    let (_server, scene, mut holder, mut late, _proxy) = late_run_whose_look_gets_no_answer();
    late.signal(Signal::SIGTERM);
    let out = late.wait(SOON);
    assert_ended_without_running(&scene, &out, 128 + 15, "interrupted by SIGTERM");
    assert!(
        !text(&out.stderr).contains("cannot see when"),
        "the signal waited for the look to give up: {}",
        text(&out.stderr)
    );
    assert_eq!(code(&holder.finish()), 0);
}

/// A signal that comes once the lease is held but before the command starts (here, during a
/// slow `--min-interval` claim) ends the run without starting the command, and gives the lease
/// back.
#[test]
fn a_signal_before_the_command_starts_keeps_it_from_starting() {
    let (_server, scene, _proxy, mut run) =
        claiming_run(|proxy, claim| proxy.hold_request(claim, Duration::from_millis(1500)));
    run.signal(Signal::SIGTERM);
    let out = run.wait(SOON);
    assert_ended_without_running(&scene, &out, 128 + 15, "interrupted by SIGTERM");
    assert_eq!(
        code(&scene.run(["--name", "cron", "--no-wait", "--", "true"])),
        0
    );
}

/// A signal during a claim that gets no answer ends the run at once with the signal's status,
/// not with "no answer" once the claim gives up.
#[test]
fn a_signal_during_an_unanswered_claim_ends_the_run_at_once() {
    let (_server, scene, _proxy, mut run) = claiming_run(|proxy, claim| proxy.lose_reply_to(claim));
    run.signal(Signal::SIGTERM);
    let out = run.wait(SOON);
    assert_ended_without_running(&scene, &out, 128 + 15, "interrupted by SIGTERM");
}

/// A run of `cron` with `--min-interval`, through a proxy armed by `fault` on the claim's
/// request, once that request was sent. Its command would ignore SIGTERM and make the file `ran`.
fn claiming_run(fault: impl FnOnce(&Proxy, &[u8]) -> Trigger) -> (RedisServer, Scene, Proxy, Proc) {
    let server = RedisServer::start();
    let scene = Scene::new(server.url());
    let (proxy, via) = server.proxied().expect("a proxy");
    let claim = fault(&proxy, claim_script(&server).as_bytes());
    let run = Proc::spawn(&mut scene.cmd_via(
        &via,
        [
            "--name",
            "cron",
            "--min-interval",
            "1h",
            "--",
            "sh",
            "-c",
            "trap '' TERM; touch ran",
        ],
    ));
    claim.wait(SOON).expect("the run never claimed");
    (server, scene, proxy, run)
}

/// The `--min-interval` script's SHA, as `EVALSHA` sends it.
fn claim_script(server: &RedisServer) -> String {
    server.ask(&[
        "SCRIPT",
        "LOAD",
        include_str!("../src/backend/redis/lua/claim_interval.lua"),
    ])
}

/// A holder of `cron` that recorded its run for `--min-interval`, and a late run of the name
/// (`-vv`, `--wait 60s`) whose look at when it last ran has just been sent, through a proxy that
/// swallows the answer.
fn late_run_whose_look_gets_no_answer() -> (RedisServer, Scene, Holder, Proc, Proxy) {
    let server = RedisServer::start();
    let scene = Scene::new(server.url());
    let (proxy, via) = server.proxied().expect("a proxy");
    let holder = scene.hold("cron", "h", &["--min-interval", "1h"]);
    let look = proxy.lose_reply_to(claim_script(&server).as_bytes());
    let late = Proc::spawn(&mut scene.cmd_via(
        &via,
        [
            "-vv",
            "--name",
            "cron",
            "--min-interval",
            "1h",
            "--wait",
            "60s",
            "--",
            "touch",
            "ran",
        ],
    ));
    look.wait(SOON).expect("the late run never looked");
    (server, scene, holder, late, proxy)
}
