//! What only the `etcd://` backend has: a minimum lease it raises short TTLs to, a cluster that
//! must ride through the loss of one member but not of its quorum, and TLS with optional client
//! certificates. Member 0 sits behind a fault proxy, first in the URL, so each drill can show that
//! lockrun's renewals really went through the member it breaks. Everything the backend shares
//! with the others is in the conformance suite.

use std::time::{Duration, Instant};

use crate::support::asserts::{
    assert_rode_through, assert_said, assert_stopped_after_its_last_renewal,
};
use crate::support::certs::Certificates;
use crate::support::cluster::Members;
use crate::support::etcd_cluster::{Etcd, EtcdCluster, lease_message};
use crate::support::fixture::{Fixture, Reachable};
use crate::support::holder::Holder;
use crate::support::lockrun::{lockrun, output};
use crate::support::proxy::Proxy;
use crate::support::scene::Scene;
use crate::support::timing::LeaseTiming;
use crate::support::wait::{SOON, code, numbers_in, text, wait_until};

#[test]
fn granted_ttl_is_raised_to_the_server_minimum() {
    let etcd = Etcd::<1>::start();
    let s = Scene::new(etcd.url());
    let out = s.run([
        "--name",
        "short",
        "--ttl",
        "500ms",
        "--",
        "sh",
        "-c",
        "echo $LOCKRUN_TTL_MS > ttl",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    // etcd's minimum lease at its default timing is 2 s (1.5 election timeouts, rounded up).
    assert_eq!(numbers_in(&s.path("ttl")), [2000]);
}

/// A three-member cluster, and a scene whose URL reaches member 0 through a proxy, then the
/// others directly.
fn cluster_behind_a_proxy() -> (Etcd<3>, Proxy, Scene) {
    let cluster = Etcd::<3>::start();
    let proxy = Proxy::start(cluster.client_port(0));
    let url = format!(
        "etcd://127.0.0.1:{},{},{}",
        proxy.port(),
        cluster.endpoint(1),
        cluster.endpoint(2)
    );
    (cluster, proxy, Scene::new(url))
}

/// Starts a holder and waits until one of its renewals was answered through the proxy (member 0).
/// Its 6 s lease leaves the cluster about 2 s to elect a leader (should member 0 have led) before
/// the stop point, on a loaded machine too.
fn holder_renewing_through(s: &Scene, proxy: &Proxy, name: &str) -> (Holder, LeaseTiming) {
    let holder = s.hold(name, "h", &["--ttl", "6s"]);
    let timing = LeaseTiming::defaults(holder.ttl());
    let renewed = proxy.wait_confirmed_after(Instant::now(), timing.ttl);
    assert!(renewed.is_some(), "no renewal went through member 0");
    (holder, timing)
}

/// The holder's command must still run well past the lease that the fault at `fault_at` would
/// have ended had lockrun not carried on through the other members; then it ends normally.
fn rides_through(holder: &mut Holder, timing: LeaseTiming, fault_at: Instant) {
    assert_rode_through(holder, fault_at + timing.ttl + timing.renew);
}

/// Guards against a lease grant that one member took but answered too late being refused by
/// the next member ("lease already exists", exit 69): the lease id is the run's own, so the lease
/// that exists is the one it asked for. Member 0 lets the grant through and loses every answer.
#[test]
fn a_grant_answered_too_late_is_not_refused_by_the_next_member() {
    let (_cluster, proxy, s) = cluster_behind_a_proxy();
    // `LeaseGrantRequest`: field 1 the TTL (7 s, as asked below), then field 2 the id.
    let lost = proxy.lose_reply_to(b"\x08\x07\x10");
    let out = s.run(["--name", "regrant", "--ttl", "7s", "--", "true"]);
    assert!(
        lost.fired().is_some(),
        "the grant never went through member 0"
    );
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
}

/// Guards against a `--min-interval` claim whose answer was lost being taken, once sent again
/// to the next member, for another run's: it found the key on its own lease, called the run too
/// soon (75) and revoked its own record. Member 0 runs the claim and loses every answer.
#[test]
fn a_min_interval_claim_answered_too_late_is_still_a_claim() {
    let (_cluster, proxy, s) = cluster_behind_a_proxy();
    let lost = proxy.lose_reply_to(b"lockrun/daily/#interval");
    let run = ["--name", "daily", "--min-interval", "1h", "--", "true"];
    let out = s.run(run);
    assert!(
        lost.fired().is_some(),
        "the claim never went through member 0"
    );
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let again = s.run(run);
    assert_eq!(
        code(&again),
        75,
        "the claim was not kept: {}",
        text(&again.stderr)
    );
}

/// Guards against `release --force` saying that nobody held the name when the revoke it sent
/// was applied by member 0 but answered too late: sent again to member 1, the lease is gone
/// there, and that holder counts as released all the same.
#[test]
fn a_forced_release_answered_too_late_still_counts_its_holder() {
    let (cluster, proxy, s) = cluster_behind_a_proxy();
    // The holder talks to the members directly; only the release goes through the proxy.
    let mut holder = s.hold_via(&cluster.url(), "forced", "h", &["--ttl", "30s"]);
    let lease = cluster.holder_lease("forced", holder.token());
    let lost = proxy.lose_reply_to(&lease_message(lease));
    let out = s.run(["release", "forced", "--force"]);
    assert!(
        lost.fired().is_some(),
        "the revoke never went through member 0"
    );
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("released 1 holder(s) of forced"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(code(&holder.exit()), 76);
}

#[test]
fn cluster_member_killed_under_a_holder_is_ridden_through() {
    let (mut cluster, proxy, s) = cluster_behind_a_proxy();
    let (mut holder, timing) = holder_renewing_through(&s, &proxy, "failover");
    cluster.kill_member(0);
    rides_through(&mut holder, timing, Instant::now());
}

#[test]
fn cluster_member_restarted_briefly_is_ridden_through() {
    let (mut cluster, proxy, s) = cluster_behind_a_proxy();
    let (mut holder, timing) = holder_renewing_through(&s, &proxy, "bounce");
    let restarted = Instant::now();
    cluster.restart_member(0, true);
    rides_through(&mut holder, timing, restarted);
}

#[test]
fn cluster_member_gone_silent_is_ridden_through() {
    let (_cluster, proxy, s) = cluster_behind_a_proxy();
    let (mut holder, timing) = holder_renewing_through(&s, &proxy, "silent");
    proxy.blackhole();
    rides_through(&mut holder, timing, Instant::now());
}

#[test]
fn cluster_without_quorum_stops_the_command_before_expiry() {
    let mut cluster = Etcd::<3>::start();
    // Member 0 alone keeps answering, with errors: the renewals it confirmed are the ones lockrun
    // reports at -vv.
    let s = Scene::new(format!("etcd://{}", cluster.endpoint(0)));
    let mut holder = s.hold("quorum", "h", &["-vv", "--ttl", "3s"]);
    let renewed = wait_until(SOON, || !holder.renewals().is_empty());
    assert!(renewed, "no renewal before the quorum was lost");
    cluster.kill_member(1);
    cluster.kill_member(2);
    assert_stopped_after_its_last_renewal(&mut holder);
}

#[test]
fn tls_with_the_clusters_ca_works_and_without_it_fails_before_running() {
    let Some(certs) = Certificates::if_openssl() else {
        return;
    };
    let other = Certificates::make();
    let cluster = EtcdCluster::single_tls(certs.dir(), false);
    let endpoint = cluster.endpoint(0);
    let with_ca_on = |url: &str, certs: &Certificates| {
        format!("{url}?cacert={}", certs.file("ca.crt").display())
    };
    let with_ca = |certs: &Certificates| with_ca_on(&format!("etcd://{endpoint}"), certs);
    let out = output(
        lockrun()
            .args(["--backend", &with_ca(&certs), "--name", "tls", "--"])
            .args(["sh", "-c", "test -n \"$FENCING_TOKEN\""]),
    );
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    for url in [with_ca(&other), format!("etcd://{endpoint}")] {
        let started = Instant::now();
        let out = output(
            lockrun()
                .args(["--backend", &url, "--name", "tls", "--"])
                .args(["touch", "/nonexistent/ran"]),
        );
        assert_eq!(code(&out), 69, "{url}: {}", text(&out.stderr));
        assert_said(&out, &endpoint);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{url}: took {:?}",
            started.elapsed()
        );
    }
    // A TLS member hangs up on a plain client: the message says how to ask for TLS.
    let plain_url = output(
        lockrun()
            .args(["--backend", &format!("etcd://{endpoint}"), "--name", "tls"])
            .args(["--", "touch", "/nonexistent/ran"]),
    );
    assert_said(&plain_url, "if the server expects TLS, add ?cacert=FILE");
    // And a plain member closes on a TLS handshake.
    let plain = Etcd::<1>::start();
    let tls_url = output(
        lockrun()
            .args(["--backend", &with_ca_on(&plain.url(), &certs)])
            .args(["--name", "tls", "--", "touch", "/nonexistent/ran"]),
    );
    assert_eq!(code(&tls_url), 69, "{}", text(&tls_url.stderr));
    assert_said(&tls_url, "the server may not speak TLS");
}

/// A cluster with authentication on, reached without credentials, answers "user name is empty":
/// the message says what that means and how to give them.
#[test]
fn a_cluster_that_wants_credentials_says_so_to_a_url_without_them() {
    let etcd = Etcd::<1>::with_password("pw").expect("etcd has passwords");
    let bare = etcd.url().replace("root:pw@", "");
    assert_ne!(bare, etcd.url());
    let out = output(lockrun().args(["--backend", &bare, "--name", "auth", "--", "true"]));
    assert_eq!(code(&out), 69, "{}", text(&out.stderr));
    assert_said(&out, "the cluster requires authentication");
}

#[test]
fn tls_with_a_client_certificate_when_the_cluster_asks_for_one() {
    let Some(certs) = Certificates::if_openssl() else {
        return;
    };
    let cluster = EtcdCluster::single_tls(certs.dir(), true);
    let file = |name: &str| certs.file(name).display().to_string();
    let base = format!("etcd://{}?cacert={}", cluster.endpoint(0), file("ca.crt"));
    let with_identity = format!(
        "{base}&cert={}&key={}",
        file("server.crt"),
        file("server.key")
    );
    let out = output(lockrun().args(["--backend", &with_identity, "--name", "mtls", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let out = output(lockrun().args([
        "--backend",
        &base,
        "--name",
        "mtls",
        "--",
        "touch",
        "/nonexistent/ran",
    ]));
    assert_eq!(code(&out), 69, "{}", text(&out.stderr));
}

/// Guards against a waiter that watches only what stands ahead of it losing its turn when the
/// member it watches through dies: it must watch again through another member and run.
#[test]
fn a_waiter_whose_member_dies_watches_again_and_gets_its_turn() {
    let mut etcd = Etcd::<3>::start();
    let s = Scene::new(etcd.url());
    let mut holder = s.hold("failover", "h", &["--ttl", "3s"]);
    let mut waiter = s.waiter("failover", &["--ttl", "3s"], "touch ran");
    s.wait_waiters("failover", 1);
    // Member 0 is the first endpoint: the one both talk to.
    etcd.kill_member(0);
    assert_eq!(code(&holder.finish()), 0);
    let out = waiter.wait(Duration::from_secs(20));
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(s.path("ran").exists());
}
