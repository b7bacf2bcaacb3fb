//! The text of every statement lockrun sends, for one table prefix.
//!
//! Statements travel as text (one round trip each, no prepare). Every value is spliced in as a
//! hexadecimal literal — `X'…'` for names, owners and bells (stored as `VARBINARY`, compared byte
//! for byte), `_utf8mb4 X'…'` for holder records — or as a formatted integer: a literal made only
//! of hex digits cannot end early, whatever the value holds, and needs no escaping rules that
//! differ with `sql_mode`. The only text spliced in as is, is the validated table prefix.
//!
//! Every clock read is `UTC_TIMESTAMP(6)`: microseconds, and no session time zone to disagree on
//! (a whole-second `NOW()` would round a lease's end).

use std::fmt::Write as _;
use std::time::Duration;

use super::schema;

/// Longest lease or interval sent, so that `INTERVAL n MICROSECOND` stays in range (ten years).
const MAX_MICROS: u128 = 10 * 365 * 24 * 3600 * 1_000_000;

/// `X'…'`: bytes as a binary string literal.
pub fn binary(value: &str) -> String {
    let mut out = String::with_capacity(value.len() * 2 + 3);
    out.push_str("X'");
    for b in value.bytes() {
        let _ = write!(out, "{b:02x}");
    }
    out.push('\'');
    out
}

/// `_utf8mb4 X'…'`: text as a UTF-8 string literal.
pub fn text(value: &str) -> String {
    format!("_utf8mb4 {}", binary(value))
}

/// A duration in whole microseconds, capped (see [`MAX_MICROS`]).
pub fn micros(d: Duration) -> u64 {
    d.as_micros().min(MAX_MICROS) as u64
}

/// A duration in whole milliseconds, at least one, capped.
pub fn millis(d: Duration) -> u64 {
    (micros(d) / 1000).max(1)
}

/// What one try sends.
pub struct Try<'a> {
    pub name: &'a str,
    pub owner: &'a str,
    pub bell: &'a str,
    pub ttl: Duration,
    pub limit: u32,
    pub holder: &'a str,
    /// Zero: try once, never join the line.
    pub heartbeat: Duration,
    pub shared: bool,
    pub supersede: bool,
}

/// The statements of one table prefix.
#[derive(Clone, Debug)]
pub struct Statements {
    prefix: String,
}

impl Statements {
    /// `prefix` must be validated (see [`super::settings`]).
    pub fn new(prefix: &str) -> Self {
        Statements {
            prefix: prefix.to_owned(),
        }
    }

    fn table(&self, what: &str) -> String {
        format!("`{}{what}`", self.prefix)
    }

    fn call(&self, what: &str, args: &[String]) -> String {
        format!(
            "CALL `{}`({})",
            schema::procedure(&self.prefix, what),
            args.join(", ")
        )
    }

    /// One try (see the `acquire` procedure): one row `taken, token, slot, soonest_us,
    /// superseded, by, rung`.
    pub fn acquire(&self, t: &Try<'_>) -> String {
        self.call(
            "acquire",
            &[
                binary(t.name),
                binary(t.owner),
                binary(t.bell),
                millis(t.ttl).to_string(),
                t.limit.max(1).to_string(),
                text(t.holder),
                (micros(t.heartbeat) / 1000).to_string(),
                u8::from(t.shared).to_string(),
                u8::from(t.supersede).to_string(),
            ],
        )
    }

    /// The first try's fast path, without the procedure (which each new session must load and
    /// parse first): one transaction that takes slot 0 (or a shared hold) only when the name has
    /// no lease row and no waiter row at all, and otherwise changes nothing but `max_limit`. Its
    /// last result set is one row, `free, token`; when `free` is 0 the procedure decides. The
    /// names row is locked first, as everywhere. A statement of it that fails leaves the
    /// transaction open: the connection must then be dropped, not reused.
    pub fn fast_acquire(&self, t: &Try<'_>) -> String {
        let name = binary(t.name);
        format!(
            "START TRANSACTION; \
             INSERT INTO {names} (name, max_limit) VALUES ({name}, {limit}) \
             ON DUPLICATE KEY UPDATE max_limit = GREATEST(max_limit, {limit}); \
             SET @lockrun_free = NOT EXISTS (SELECT 1 FROM {leases} WHERE name = {name}) \
             AND NOT EXISTS (SELECT 1 FROM {waiters} WHERE name = {name}); \
             UPDATE {names} SET token = GREATEST(token + 1, \
             TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))) \
             WHERE name = {name} AND @lockrun_free; \
             INSERT INTO {leases} (name, owner, slot, token, holder, bell, expires_at) \
             SELECT name, {owner}, {slot}, token, {holder}, {bell}, \
             UTC_TIMESTAMP(6) + INTERVAL {ttl_us} MICROSECOND \
             FROM {names} WHERE name = {name} AND @lockrun_free; \
             COMMIT; \
             SELECT @lockrun_free, token FROM {names} WHERE name = {name}",
            names = self.table("names"),
            leases = self.table("leases"),
            waiters = self.table("waiters"),
            limit = t.limit.max(1),
            owner = binary(t.owner),
            slot = if t.shared { "NULL" } else { "0" },
            holder = text(t.holder),
            bell = binary(t.bell),
            ttl_us = millis(t.ttl) * 1000,
        )
    }

    /// Extends `owner`'s hold by `ttl` from now, only while it has not expired; one row is
    /// affected when it was extended.
    pub fn renew(&self, name: &str, owner: &str, ttl: Duration) -> String {
        format!(
            "UPDATE {leases} SET expires_at = UTC_TIMESTAMP(6) + INTERVAL {us} MICROSECOND \
             WHERE name = {name} AND owner = {owner} AND expires_at > UTC_TIMESTAMP(6)",
            leases = self.table("leases"),
            us = micros(ttl).max(1),
            name = binary(name),
            owner = binary(owner),
        )
    }

    /// Drops `owner`'s hold and wakes whoever is next: one row, how many were dropped.
    pub fn release(&self, name: &str, owner: &str) -> String {
        self.call("release", &[binary(name), binary(owner)])
    }

    /// Leaves the line (and drops a hold a lost answer gave): one row, how many entries went.
    pub fn leave(&self, name: &str, owner: &str) -> String {
        self.call("leave", &[binary(name), binary(owner)])
    }

    /// Drops every holder: one row, how many live ones there were.
    pub fn force(&self, name: &str) -> String {
        self.call("force", &[binary(name)])
    }

    /// `--min-interval`: one row, `claimed, microseconds since the last run`.
    pub fn claim(&self, name: &str, interval: Duration) -> String {
        self.call("claim", &[binary(name), micros(interval).to_string()])
    }

    /// `--min-interval`, recording nothing: a row, microseconds since the last run, when there
    /// was one.
    pub fn ran_ago(&self, name: &str) -> String {
        format!(
            "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) \
             - last_run_us FROM {names} WHERE name = {name} AND last_run_us IS NOT NULL",
            names = self.table("names"),
            name = binary(name),
        )
    }

    /// A waiter's sleep: up to `sleep`, only while it is still in line with wake-up count `rung`
    /// (a wake-up that came since its last try ends it at once); `KILL QUERY` ends it early.
    /// Returns one row: 0 when it slept the whole time, anything else when it did not.
    pub fn wait(&self, name: &str, owner: &str, rung: u64, sleep: Duration) -> String {
        format!(
            "SELECT /* lockrun wait */ IF(EXISTS(SELECT 1 FROM {waiters} WHERE name = {name} \
             AND owner = {owner} AND rung = {rung} AND beat_until >= UTC_TIMESTAMP(6)), \
             SLEEP({secs}), 2)",
            waiters = self.table("waiters"),
            name = binary(name),
            owner = binary(owner),
            secs = seconds(sleep),
        )
    }

    /// A holder's listening statement: sleeps up to `sleep` while `owner` still holds; returns
    /// one row, 0 after a full sleep, 1 at once when the hold is gone. `release --force`
    /// interrupts it with `KILL QUERY`.
    pub fn listen(&self, name: &str, owner: &str, sleep: Duration) -> String {
        format!(
            "SELECT /* lockrun listen */ IF(EXISTS(SELECT 1 FROM {leases} WHERE name = {name} \
             AND owner = {owner} AND expires_at > UTC_TIMESTAMP(6)), SLEEP({secs}), 1)",
            leases = self.table("leases"),
            name = binary(name),
            owner = binary(owner),
            secs = seconds(sleep),
        )
    }

    /// Three result sets: `max_limit` (no row for an unknown name); the live holders `slot,
    /// token, holder, ms left`; the live waiters' records in line order.
    pub fn status(&self, name: &str) -> String {
        let name = binary(name);
        format!(
            "SELECT max_limit FROM {names} WHERE name = {name}; \
             SELECT COALESCE(slot, 0), token, holder, \
             CEIL(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) / 1000) \
             FROM {leases} WHERE name = {name} AND expires_at > UTC_TIMESTAMP(6) \
             ORDER BY slot IS NULL, slot, token; \
             SELECT holder FROM {waiters} WHERE name = {name} \
             AND beat_until >= UTC_TIMESTAMP(6) ORDER BY ticket",
            names = self.table("names"),
            leases = self.table("leases"),
            waiters = self.table("waiters"),
        )
    }

    /// The held names that start with `prefix` (compared byte for byte, no pattern), sorted.
    pub fn held_names(&self, prefix: &str) -> String {
        format!(
            "SELECT DISTINCT name FROM {leases} WHERE expires_at > UTC_TIMESTAMP(6) \
             AND LEFT(name, {len}) = {prefix} ORDER BY name",
            leases = self.table("leases"),
            len = prefix.len(),
            prefix = binary(prefix),
        )
    }
}

/// The server's wall clock, microseconds since the epoch.
pub const SERVER_TIME: &str =
    "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))";

/// Seconds with microsecond digits, as `SLEEP` takes them.
fn seconds(d: Duration) -> String {
    let us = micros(d);
    format!("{}.{:06}", us / 1_000_000, us % 1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_hex_digits_whatever_the_value_holds() {
        assert_eq!(binary("ab"), "X'6162'");
        assert_eq!(binary(""), "X''");
        let hostile = "x'); DROP TABLE t; -- \\' \" é";
        let lit = text(hostile);
        let body = lit
            .strip_prefix("_utf8mb4 X'")
            .and_then(|s| s.strip_suffix('\''))
            .unwrap();
        assert!(body.bytes().all(|b| b.is_ascii_hexdigit()), "{lit}");
        assert_eq!(body.len(), hostile.len() * 2);
    }

    #[test]
    fn durations_are_exact_and_bounded() {
        assert_eq!(seconds(Duration::from_millis(950)), "0.950000");
        assert_eq!(seconds(Duration::from_micros(1_000_001)), "1.000001");
        assert_eq!(millis(Duration::from_micros(10)), 1);
        assert_eq!(micros(Duration::from_secs(u64::MAX)), MAX_MICROS as u64);
    }

    #[test]
    fn statements_use_the_prefix_and_microsecond_clocks() {
        let sql = Statements::new("jobs_");
        let t = Try {
            name: "a/b",
            owner: "00ff",
            bell: "11ee",
            ttl: Duration::from_millis(1500),
            limit: 0,
            holder: "{\"pid\":1}",
            heartbeat: Duration::from_secs(3),
            shared: true,
            supersede: false,
        };
        assert_eq!(
            sql.acquire(&t),
            "CALL `jobs_acquire_v1`(X'612f62', X'30306666', X'31316565', 1500, 1, \
             _utf8mb4 X'7b22706964223a317d', 3000, 1, 0)"
        );
        let fast = sql.fast_acquire(&t);
        assert!(
            fast.starts_with("START TRANSACTION; INSERT INTO `jobs_names`"),
            "{fast}"
        );
        // A shared hold has no slot; the lease lasts exactly what the procedure would grant.
        assert!(fast.contains("X'30306666', NULL, token"), "{fast}");
        assert!(fast.contains("INTERVAL 1500000 MICROSECOND"), "{fast}");
        let all = [
            fast,
            sql.renew("n", "o", Duration::from_secs(2)),
            sql.wait("n", "o", 3, Duration::from_millis(900)),
            sql.listen("n", "o", Duration::from_secs(3)),
            sql.status("n"),
            sql.held_names("c_"),
        ];
        for s in &all {
            assert!(s.contains("`jobs_"), "{s}");
            assert!(
                !s.contains("NOW()") && !s.contains("UTC_TIMESTAMP()"),
                "{s}"
            );
            assert!(!s.contains('"'), "{s}");
        }
        assert!(
            all[1].contains("INTERVAL 2000000 MICROSECOND"),
            "{}",
            all[1]
        );
        assert!(all[2].contains("rung = 3") && all[2].contains("SLEEP(0.900000)"));
        // A prefix is compared as bytes: `_` and `%` are plain characters.
        assert!(all[5].contains("LEFT(name, 2) = X'635f'"), "{}", all[5]);
    }
}
