//! One holder at a time (or N with `--limit`), and fencing tokens that strictly rise: under
//! contention, in what the child is given, and across restarts of the backend.

use std::collections::HashSet;
use std::time::Duration;

use crate::support::fixture::{Counter, Fixture};
use crate::support::scene::Scene;
use crate::support::wait::{SOON, code, numbers_in, text, wait_until};

/// Guards against lost updates: four workers run five read-modify-write sections each on one
/// name; every update lands, tokens rise in the order the sections ran, and the backend's own
/// counter agrees.
pub fn contention_loses_no_update<F: Fixture>() {
    let fx = F::start();
    let s = Scene::new(fx.url());
    std::fs::write(s.path("counter"), "0").unwrap();
    let section =
        "n=$(cat counter); sleep 0.01; echo $((n+1)) > counter; echo $FENCING_TOKEN >> tokens";
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for _ in 0..5 {
                    let out = s.run(["--name", "rmw", "--ttl", F::TTL, "--", "sh", "-c", section]);
                    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
                }
            });
        }
    });
    let counter = std::fs::read_to_string(s.path("counter")).unwrap();
    assert_eq!(counter.trim(), "20", "an update was lost");
    let tokens = numbers_in(&s.path("tokens"));
    assert_eq!(tokens.len(), 20);
    assert!(
        tokens.windows(2).all(|p| p[0] < p[1]),
        "tokens out of order: {tokens:?}"
    );
    let last = tokens[19];
    match fx.counter("rmw") {
        Counter::Exact(stored) => assert_eq!(stored, last, "the stored counter"),
        Counter::AtLeast(revision) => assert!(revision >= last, "revision {revision} < {last}"),
    }
}

/// Guards against a token that repeats or falls between runs, a child that misses its variables,
/// and lockrun writing to the command's stdout.
pub fn tokens_strictly_rise_and_reach_the_child<F: Fixture>() {
    let fx = F::start();
    let s = Scene::new(fx.url());
    let record =
        "echo $FENCING_TOKEN >> tokens; echo $LOCKRUN_NAME $LOCKRUN_TTL_MS $LOCKRUN_SLOT > env";
    for _ in 0..3 {
        let out = s.run(["--name", "tok", "--ttl", F::TTL, "--", "sh", "-c", record]);
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
        assert!(out.stdout.is_empty(), "lockrun wrote to stdout");
    }
    let tokens = numbers_in(&s.path("tokens"));
    assert_eq!(tokens.len(), 3);
    assert!(tokens.windows(2).all(|p| p[0] < p[1]), "{tokens:?}");
    let env = std::fs::read_to_string(s.path("env")).unwrap();
    assert_eq!(env.trim(), format!("tok {} 0", F::ttl().as_millis()));

    let renamed = "echo ${FENCE}-${FENCING_TOKEN:-unset} > renamed";
    let out = s.run([
        "--name",
        "tok",
        "--token-env",
        "FENCE",
        "--",
        "sh",
        "-c",
        renamed,
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let renamed = std::fs::read_to_string(s.path("renamed")).unwrap();
    let (token, old) = renamed.trim().split_once('-').unwrap();
    assert_eq!(old, "unset", "--token-env must replace FENCING_TOKEN");
    assert!(token.parse::<u64>().unwrap() > tokens[2], "{renamed}");
}

/// Guards against a semaphore that admits more or fewer than its limit, gives one slot to two
/// holders or one token twice, or reports anything else in `status`.
pub fn limit_three_admits_exactly_three<F: Fixture>() {
    let fx = F::start();
    let s = Scene::new(fx.url());
    let script = "echo \"+ $LOCKRUN_SLOT $FENCING_TOKEN\" >> log; \
                  while [ ! -e go ]; do sleep 0.02; done; echo \"- $LOCKRUN_SLOT\" >> log";
    let mut runners: Vec<_> = (0..7)
        .map(|_| s.waiter("sem", &["--limit", "3", "--ttl", F::TTL], script))
        .collect();
    let started = |s: &Scene| {
        let log = std::fs::read_to_string(s.path("log")).unwrap_or_default();
        log.lines().filter(|l| l.starts_with('+')).count()
    };
    assert!(wait_until(SOON, || started(&s) == 3), "three never ran");
    // Each of the three claimed its slot before its command started.
    let status = s.wait_status("sem", "had 3 holders and 4 waiters", |st| {
        st["holders"].as_array().map_or(0, Vec::len) == 3 && st["waiters"] == 4
    });
    assert_eq!(status["limit"], 3, "{status}");
    let mut slots: Vec<u64> = status["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["slot"].as_u64().unwrap())
        .collect();
    slots.sort();
    assert_eq!(slots, [0, 1, 2], "{status}");
    assert_eq!(started(&s), 3, "a fourth command ran");

    std::fs::write(s.path("go"), "").unwrap();
    for runner in &mut runners {
        let out = runner.wait(Duration::from_secs(60));
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    }
    let log = std::fs::read_to_string(s.path("log")).unwrap();
    let (mut running, mut peak, mut tokens) = (HashSet::new(), 0, HashSet::new());
    for line in log.lines() {
        let mut fields = line.split(' ');
        let sign = fields.next().unwrap();
        let slot: u32 = fields.next().unwrap().parse().unwrap();
        assert!(slot < 3, "slot {slot}:\n{log}");
        if sign == "+" {
            let token: u64 = fields.next().unwrap().parse().unwrap();
            assert!(tokens.insert(token), "token {token} given twice:\n{log}");
            assert!(running.insert(slot), "slot {slot} given twice:\n{log}");
        } else {
            running.remove(&slot);
        }
        peak = peak.max(running.len());
    }
    assert_eq!(tokens.len(), 7, "{log}");
    assert_eq!(peak, 3, "{log}");
}

/// Guards against a token counter that starts over when the backend restarts, after a crash or
/// having lost what its contract allows it to lose (for Redis, every key).
pub fn tokens_rise_across_restarts<F: Fixture>() {
    let mut fx = F::start();
    let s = Scene::new(fx.url());
    let run = || {
        let record = "echo $FENCING_TOKEN >> tokens";
        let out = s.run(["--name", "boot", "--ttl", F::TTL, "--", "sh", "-c", record]);
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    };
    run();
    run();
    fx.restart(false);
    run();
    fx.restart(true);
    run();
    let tokens = numbers_in(&s.path("tokens"));
    assert_eq!(tokens.len(), 4);
    assert!(tokens.windows(2).all(|p| p[0] < p[1]), "{tokens:?}");
}

/// Guards against a semaphore that admits more than its limit, or hands one slot to two runs,
/// when many wait: three holders and ten waiters on `--limit 3`.
pub fn limit_three_with_ten_waiters_keeps_exactly_three<F: Fixture>() {
    let fx = F::start();
    let s = Scene::new(fx.url());
    let options = ["--limit", "3", "--ttl", F::TTL];
    let holders: Vec<_> = ["h0", "h1", "h2"]
        .iter()
        .map(|tag| s.hold("pool", tag, &options))
        .collect();
    // Each section waits (bounded) until three run, so the peak is reached if allowed.
    let script = "echo \"+ $LOCKRUN_SLOT\" >> log; i=0; \
                  while [ $(( $(grep -c + log) - $(grep -c - log) )) -lt 3 ] && [ $i -lt 25 ]; do \
                  sleep 0.02; i=$((i+1)); done; echo \"- $LOCKRUN_SLOT\" >> log";
    let mut waiters: Vec<_> = (0..10)
        .map(|_| s.waiter("pool", &options, script))
        .collect();
    let status = s.wait_waiters("pool", 10);
    assert_eq!(status["holders"].as_array().unwrap().len(), 3, "{status}");
    for mut holder in holders {
        let out = holder.finish();
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    }
    for waiter in &mut waiters {
        let out = waiter.wait(Duration::from_secs(30));
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    }
    let log = std::fs::read_to_string(s.path("log")).unwrap();
    let (mut running, mut peak) = (HashSet::new(), 0);
    for line in log.lines() {
        let (sign, slot) = line.split_once(' ').unwrap();
        let slot: u32 = slot.parse().unwrap();
        assert!(slot < 3, "slot {slot}");
        if sign == "+" {
            assert!(
                running.insert(slot),
                "slot {slot} given twice at once:\n{log}"
            );
        } else {
            running.remove(&slot);
        }
        peak = peak.max(running.len());
    }
    assert_eq!(peak, 3, "{log}");
    assert_eq!(log.lines().count(), 20, "{log}");
}
