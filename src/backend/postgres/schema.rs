//! lockrun's tables and server-side functions (`sql/schema.sql`, version 2), and the SQL of every
//! operation, in one place.
//!
//! In the schema `S` (see [`super::settings`]):
//! - `S.names` — one row per lock name, never deleted: `token` (the last fencing token issued;
//!   durable, so tokens keep rising across restarts and forced releases), `max_limit` (the largest
//!   `--limit` seen), `arrivals` (the waiters' ticket counter), `epoch` (counts releases, for
//!   waiters that poll), the newest `--supersede` waiter and `last_run_us` (`--min-interval`).
//!   Every change to a name's holders or line locks its row first, so they are serial.
//! - `S.leases` — one row per hold: exclusive holders in slots `0..limit`, shared holders in
//!   negative slots; `owner` (random per run), `token`, `holder` (JSON for `status`), `shared`
//!   and `expires_at`, always by the server's clock. A row past its expiry is dead.
//! - `S.waiters` — the line: `ticket` (arrival order), `beat_until` (the server-clock deadline of
//!   the waiter's heartbeat), its mode, `--supersede`, its record and the channel it listens on.
//!
//! Every operation is one statement, so one round trip and one transaction; those that change a
//! name's state are functions (`acquire_v2`, `release_v2`, …, see the SQL file's comments). Values
//! always travel as bound parameters; the only text spliced into SQL is the validated schema name.
//! A schema made by version 1 is migrated in place the first time a statement finds something
//! missing (see [`super::link`]).

use crate::backend::sql_names::fnv1a;

/// The schema's DDL and functions, with `@S@` for the quoted schema.
const SCHEMA_SQL: &str = include_str!("sql/schema.sql");

/// A function that exists once the schema is at this version (the DDL is one transaction).
const VERSION_MARK: &str = "acquire_v2";

/// The SQL of each operation, for one schema.
#[derive(Clone, Debug)]
pub struct Statements {
    /// Opens the transaction that creates or migrates the schema, under an advisory lock that
    /// serialises every lockrun doing so.
    pub lock_schema: String,
    /// → `t` when the schema is already at this version (then nothing is to be done).
    pub schema_current: String,
    /// Creates or migrates everything (inside that transaction, only when not current).
    pub create: String,
    /// `(name, owner, ttl_ms, limit, holder, heartbeat_ms, shared, supersede, cookie)` →
    /// `(taken, token, row slot, soonest_ms, next_up, ahead, distance, epoch, handoff_ms,
    /// since_release_ms, superseded_by, direct)`.
    pub acquire: String,
    /// `(name, slot, owner, ttl_ms)` → a row when extended (durably).
    pub renew: String,
    /// `(name, slot, owner, legacy channel)` → whether it was released.
    pub release: String,
    /// `(name, owner, legacy channel)`: leave the line, and drop a hold a lost answer may have
    /// given.
    pub leave: String,
    /// `(name, legacy channel)` → the number of live holders dropped.
    pub force_release: String,
    /// `(name, owner, cap)` → `(epoch, in_line, ahead, writer_ahead, distance, superseded,
    /// handoff_ms, since_release_ms)`.
    pub peek: String,
    /// `(cookie, channel, name, slot, owner)` → `(listening, holds)`.
    pub subscribe: String,
    /// `(channel, name, owner)` → a row when that waiter is in line: from then on, a release
    /// whose turn it may be `NOTIFY`s it on that channel (for a waiter behind a pooler that
    /// listens on a connection of its own to the server).
    pub set_channel: String,
    /// `(name, slot, owner)` → a row while that hold exists.
    pub holds: String,
    /// `(name, interval_us)` → `(claimed, ago_us)`.
    pub claim_interval: String,
    /// `(name)` → a row `(ago_us)` when a run was claimed, by the server's clock; records nothing.
    pub ran_ago: String,
    /// `(name)` → rows `(kind, number, record, ms left, shared, token)`: kind 0 the name
    /// (`number` = its limit), 1 a live holder (`number` = its slot), 2 a live waiter (`number` =
    /// its ticket). One statement, so one consistent view.
    pub status: String,
    /// `(prefix)` → names with a live holder.
    pub held_names: String,
}

impl Statements {
    /// `schema` must be validated (see [`super::settings`]).
    pub fn new(schema: &str) -> Self {
        let s = format!("\"{schema}\"");
        Statements {
            // The session's short lock and statement limits would cut off a wait for another
            // lockrun creating the schema; within this transaction they are longer.
            lock_schema: format!(
                "BEGIN; SET LOCAL lock_timeout = '20s'; SET LOCAL statement_timeout = '25s'; \
                 SELECT pg_advisory_xact_lock({})",
                advisory_key(schema)
            ),
            // A query of the catalog, read with the statement's own snapshot: to_regprocedure()
            // would answer from this connection's catalog cache, which is not refreshed after
            // waiting for the advisory lock, and so could miss a schema made meanwhile.
            schema_current: format!(
                "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_proc p \
                 JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace \
                 WHERE n.nspname = '{schema}' AND p.proname = '{VERSION_MARK}')"
            ),
            create: SCHEMA_SQL.replace("@S@", &s),
            acquire: format!(
                "SELECT taken, fence, row_slot, soonest_ms, next_up, ahead, distance, \
                 seen_epoch, handoff_ms, since_release_ms, superseded_by, direct \
                 FROM {s}.acquire_v2($1, $2, $3, $4, $5, $6, $7, $8, $9)"
            ),
            // set_config(..., true) lasts until the commit that follows the statement; a SET clause
            // on a function would be undone before it.
            renew: format!(
                "UPDATE {s}.leases \
                 SET expires_at = clock_timestamp() + $4 * interval '1 millisecond' \
                 WHERE name = $1 AND slot = $2 AND owner = $3 AND expires_at > clock_timestamp() \
                 RETURNING token, set_config('synchronous_commit', 'on', true)"
            ),
            release: format!("SELECT released FROM {s}.release_v2($1, $2, $3, $4)"),
            leave: format!("SELECT removed FROM {s}.leave_v2($1, $2, $3)"),
            force_release: format!("SELECT dropped FROM {s}.force_release_v2($1, $2)"),
            peek: format!(
                "SELECT seen_epoch, in_line, ahead, writer_ahead, distance, superseded, \
                 handoff_ms, since_release_ms FROM {s}.peek_v2($1, $2, $3)"
            ),
            subscribe: format!("SELECT listening, holds FROM {s}.subscribe_v2($1, $2, $3, $4, $5)"),
            set_channel: format!(
                "UPDATE {s}.waiters SET channel = $1 WHERE name = $2 AND owner = $3 RETURNING 1"
            ),
            holds: format!("SELECT 1 FROM {s}.leases WHERE name = $1 AND slot = $2 AND owner = $3"),
            claim_interval: format!("SELECT claimed, ago_us FROM {s}.claim_interval_v2($1, $2)"),
            ran_ago: format!(
                "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint - n.last_run_us \
                 FROM {s}.names n WHERE n.name = $1 AND n.last_run_us IS NOT NULL"
            ),
            status: format!(
                "SELECT 0, n.max_limit::bigint, NULL::text, 0::bigint, false, 0::bigint \
                 FROM {s}.names n WHERE n.name = $1 \
                 UNION ALL \
                 SELECT 1, l.slot::bigint, l.holder, \
                 greatest(0, ceil(extract(epoch FROM l.expires_at - clock_timestamp()) * 1000))::bigint, \
                 l.shared, l.token \
                 FROM {s}.leases l WHERE l.name = $1 AND l.expires_at > clock_timestamp() \
                 UNION ALL \
                 SELECT 2, w.ticket, w.holder, 0::bigint, w.shared, 0::bigint \
                 FROM {s}.waiters w WHERE w.name = $1 AND w.beat_until >= clock_timestamp() \
                 AND w.ticket >= coalesce((SELECT line_floor FROM {s}.names WHERE name = $1), 0)"
            ),
            held_names: format!(
                "SELECT DISTINCT name FROM {s}.leases \
                 WHERE expires_at > clock_timestamp() AND left(name, length($1)) = $1"
            ),
        }
    }
}

/// The channel a run listens on, as a waiter (its turn may have come) and as a holder (a forced
/// release): `lockrun_<owner>`, unique per run.
pub fn owner_channel(owner: &str) -> String {
    format!("lockrun_{owner}")
}

/// Version 1's notification channel for a lock name: version 1 waiters still running during an
/// upgrade listen there, so version 2 wakes them on it.
pub fn legacy_channel(schema: &str, name: &str) -> String {
    format!("{schema}_{:016x}", fnv1a(name.as_bytes()))
}

/// The advisory lock that serialises schema creation.
fn advisory_key(schema: &str) -> i64 {
    i64::from_ne_bytes(fnv1a(format!("lockrun schema {schema}").as_bytes()).to_ne_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_are_short_stable_identifiers() {
        let long = "x".repeat(200);
        let c = legacy_channel("lockrun", &long);
        assert!(c.len() < 63);
        assert_eq!(c, legacy_channel("lockrun", &long));
        assert_ne!(
            legacy_channel("lockrun", "a"),
            legacy_channel("lockrun", "b")
        );
        assert!(c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
        let owner = owner_channel(&"f".repeat(32));
        assert!(owner.len() <= 63, "{owner}");
    }

    #[test]
    fn only_the_validated_schema_is_spliced() {
        let sql = Statements::new("locks");
        assert!(sql.renew.contains("\"locks\".leases"));
        assert!(sql.create.contains("CREATE SCHEMA IF NOT EXISTS \"locks\""));
        assert!(!sql.create.contains("@S@"));
        assert!(sql.schema_current.contains("nspname = 'locks'"));
    }

    #[test]
    fn whatever_issues_a_token_or_keeps_a_lease_commits_durably() {
        let sql = Statements::new("lockrun");
        assert!(
            sql.renew
                .contains("set_config('synchronous_commit', 'on', true)")
        );
        let durable = sql
            .create
            .matches("set_config('synchronous_commit', 'on', true)")
            .count();
        assert_eq!(durable, 2, "acquire_v2 and claim_interval_v2");
    }
}
