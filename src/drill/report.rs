//! The drill's report: a timeline and one line per check, then `drill: PASS` or `drill: FAIL
//! (...)`, as text for people or as one JSON object for scripts. Both go to stdout: they are what
//! the drill produces.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{Value, json};

use super::timeline::{A_AFTER, A_BEFORE, A_DELAYED, B_WRITE, Timeline, ms};
use super::verdict::{Check, Outcome, failures};
use crate::exit::Error;

/// The report for people.
pub fn text(t: &Timeline, checks: &[Check]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "drill: {} on {}", t.name, t.backend);
    let granted = match t.granted_ttl {
        Some(g) if g > t.requested_ttl => format!("{} ms (raised by the backend)", ms(g)),
        Some(g) if g < t.requested_ttl => format!("{} ms (lowered by the backend)", ms(g)),
        Some(g) => format!("{} ms", ms(g)),
        None => "unknown (A never held the lease)".into(),
    };
    let _ = writeln!(out, "  requested ttl  {} ms", ms(t.requested_ttl));
    let _ = writeln!(out, "  granted ttl    {granted}");
    if let Some(rtt) = t.round_trip {
        let _ = writeln!(
            out,
            "  round trip     {} ms (median of 5 status reads)",
            ms(rtt)
        );
    }
    let skew = match t.skew_ms {
        Some(s) if s.abs() < 0.1 => "server clock within 0.1 ms of the local clock".into(),
        Some(s) if s > 0.0 => format!("server clock {s} ms ahead of the local clock"),
        Some(s) => format!("server clock {} ms behind the local clock", s.abs()),
        None => "no server clock".into(),
    };
    let _ = writeln!(out, "  clock skew     {skew}");
    if t.kernel_lock {
        let _ = writeln!(
            out,
            "  kernel lock: it lasts as long as its holder, so no takeover is expected"
        );
    }
    let _ = writeln!(out, "timeline (ms since the drill started)");
    for (at, what) in events(t) {
        let _ = writeln!(out, "  {:>9.1}  {what}", ms(at));
    }
    let _ = writeln!(out, "checks");
    for check in checks {
        let label = match check.outcome {
            Outcome::Pass => "pass",
            Outcome::Fail => "FAIL",
            Outcome::Skip => "skip",
        };
        let _ = writeln!(out, "  {label}  {:<21} {}", check.name, check.detail);
    }
    let failed = failures(checks);
    if failed.is_empty() {
        out.push_str("drill: PASS\n");
    } else {
        let _ = writeln!(out, "drill: FAIL ({})", failed.join(", "));
    }
    out
}

/// The report for scripts: one JSON object and a newline.
pub fn json(t: &Timeline, checks: &[Check]) -> Result<String, Error> {
    let at = |d: Option<Duration>| d.map(ms);
    let failed = failures(checks);
    let a_stopped_after = match (t.a.resumed, t.a.command_ended) {
        (Some(r), Some(e)) => Some(ms(e.saturating_sub(r))),
        _ => None,
    };
    let takeover_after = match (t.a.paused, t.b_started()) {
        (Some(p), Some(b)) => Some(ms(b.saturating_sub(p))),
        _ => None,
    };
    let value = json!({
        "name": t.name,
        "backend": t.backend,
        "kernel_lock": t.kernel_lock,
        "verdict": if failed.is_empty() { "pass" } else { "fail" },
        "failed": failed,
        "requested_ttl_ms": ms(t.requested_ttl),
        "granted_ttl_ms": at(t.granted_ttl),
        "kill_after_ms": ms(t.kill_after),
        "round_trip_ms": at(t.round_trip),
        "clock_skew_ms": t.skew_ms,
        "a": {
            "token": t.a.token,
            "spawned_ms": ms(t.a.spawned),
            "started_ms": at(t.a.started),
            "paused_ms": at(t.a.paused),
            "resumed_ms": at(t.a.resumed),
            "command_ended_ms": at(t.a.command_ended),
            "stopped_after_resume_ms": a_stopped_after,
            "exited_ms": at(t.a.exited),
            "exit_code": t.a.exit_code,
        },
        "b": {
            "token": t.b_token(),
            "spawned_ms": at(t.b.spawned),
            "wrote_ms": at(t.b_started()),
            "takeover_after_pause_ms": takeover_after,
            "exited_ms": at(t.b.exited),
            "exit_code": t.b.exit_code,
        },
        "writes": t.writes.iter().map(|w| json!({
            "at_ms": ms(w.at), "token": w.token, "value": w.value, "accepted": w.accepted,
        })).collect::<Vec<Value>>(),
        "stale_writes_rejected": t.writes.iter()
            .filter(|w| !w.accepted && Some(w.token) == t.a.token).count(),
        "checks": checks.iter().map(|c| json!({
            "name": c.name,
            "result": match c.outcome { Outcome::Pass => "pass", Outcome::Fail => "fail", Outcome::Skip => "skip" },
            "detail": c.detail,
        })).collect::<Vec<Value>>(),
    });
    let mut text = serde_json::to_string(&value).map_err(Error::internal)?;
    text.push('\n');
    Ok(text)
}

/// The timeline's events, in time order.
fn events(t: &Timeline) -> Vec<(Duration, String)> {
    let mut events = vec![(t.a.spawned, "A started lockrun".to_owned())];
    if let (Some(at), Some(token)) = (t.a.started, t.a.token) {
        events.push((at, format!("A holds the lease with token {token}")));
    }
    if let Some(at) = t.a.paused {
        events.push((
            at,
            "A paused: SIGSTOP to its lockrun and its command".into(),
        ));
    }
    if let Some(at) = t.b.spawned {
        events.push((at, "B started lockrun, waiting for the lease".into()));
    }
    if let (Some(at), Some(code)) = (t.b.exited, t.b.exit_code) {
        events.push((at, format!("B exited {code}{}", why(code))));
    }
    if let Some(at) = t.a.resumed {
        events.push((
            at,
            "A resumed: SIGCONT to its lockrun and its command".into(),
        ));
    }
    if let (Some(resumed), Some(ended)) = (t.a.resumed, t.a.command_ended) {
        let after = ms(ended.saturating_sub(resumed));
        events.push((
            ended,
            format!("A's command gone, {after} ms after A resumed"),
        ));
    }
    if let (Some(at), Some(code)) = (t.a.exited, t.a.exit_code) {
        events.push((at, format!("A exited {code}{}", why(code))));
    }
    for w in &t.writes {
        let who = match w.value.as_str() {
            A_BEFORE => "A wrote".to_owned(),
            A_AFTER => "A wrote after resuming".to_owned(),
            B_WRITE => match t.a.paused {
                Some(paused) => format!(
                    "B took over ({} ms after A was paused) and wrote",
                    ms(w.at.saturating_sub(paused))
                ),
                None => "B wrote".to_owned(),
            },
            A_DELAYED => "a delayed write of A's arrived".to_owned(),
            other => format!("{other} wrote"),
        };
        let verb = if w.accepted { "accepted" } else { "REJECTED" };
        events.push((w.at, format!("{who} with token {}: {verb}", w.token)));
    }
    events.sort_by_key(|(at, _)| *at);
    events
}

fn why(code: u8) -> &'static str {
    match code {
        crate::exit::LEASE_LOST => " (lease lost)",
        crate::exit::BUSY => " (lock busy)",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drill::verdict::judge;

    #[test]
    fn the_text_ends_with_the_verdict_and_names_failed_checks() {
        let good = Timeline::example();
        let report = text(&good, &judge(&good));
        assert!(report.ends_with("drill: PASS\n"), "{report}");
        assert!(report.contains("REJECTED"), "{report}");
        let mut bad = Timeline::example();
        bad.writes[2].accepted = true;
        let report = text(&bad, &judge(&bad));
        assert!(
            report.ends_with("drill: FAIL (stale-write-rejected)\n"),
            "{report}"
        );
        assert!(report.contains("  FAIL  stale-write-rejected"), "{report}");
    }

    #[test]
    fn a_granted_ttl_is_said_to_be_raised_or_lowered_as_it_was() {
        let mut t = Timeline::example();
        let said = |t: &Timeline| {
            text(t, &judge(t))
                .lines()
                .find(|l| l.contains("granted ttl"))
                .unwrap()
                .to_owned()
        };
        t.granted_ttl = Some(t.requested_ttl * 2);
        assert!(
            said(&t).ends_with("(raised by the backend)"),
            "{}",
            said(&t)
        );
        t.granted_ttl = Some(t.requested_ttl / 2);
        assert!(
            said(&t).ends_with("(lowered by the backend)"),
            "{}",
            said(&t)
        );
        t.granted_ttl = Some(t.requested_ttl);
        assert!(said(&t).ends_with(" ms"), "{}", said(&t));
    }

    #[test]
    fn the_json_is_one_object_with_the_verdict() {
        let mut t = Timeline::example();
        t.a.exit_code = Some(0);
        let text = json(&t, &judge(&t)).unwrap();
        assert_eq!(text.lines().count(), 1);
        let value: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["verdict"], "fail");
        assert_eq!(value["failed"], json!(["a-stopped"]));
        assert_eq!(value["b"]["token"], 34);
        assert_eq!(value["b"]["takeover_after_pause_ms"], 1075.0);
        assert_eq!(value["a"]["stopped_after_resume_ms"], 5.0);
        assert_eq!(value["stale_writes_rejected"], 2);
    }
}
