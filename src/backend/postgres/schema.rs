//! lockrun's tables and server-side function, and the SQL of every operation, in one place.
//!
//! In the schema `S` (see [`super::settings`]):
//! - `S.names` — one row per lock name, never deleted: `token` (the last fencing token issued;
//!   durable, so tokens keep rising across restarts and forced releases), `max_limit` (the largest
//!   `--limit` seen, so `status` knows the semaphore's size) and `arrivals` (the waiters' ticket
//!   counter). Every try to acquire a name locks its row first, so tries on one name are serial.
//! - `S.leases` — one row per held slot: `owner` (random per run), `token`, `holder` (JSON for
//!   `status`) and `expires_at`, always computed by the server's clock. A row past its expiry is
//!   dead: renewals refuse it and the next try deletes it.
//! - `S.waiters` — the line: `ticket` (arrival order) and `beat_until`, the server-clock deadline
//!   of the waiter's heartbeat; a waiter whose heartbeat lapsed has left.
//! - `S.acquire_v1(...)` — one try: clears dead leases and lapsed waiters, then takes the lowest
//!   free slot when this caller is among the first (number of free slots) in line, or puts it in
//!   line. One statement, so one round trip and one transaction.
//!
//! Releases (and waiters leaving the line) `NOTIFY` a channel derived from the name, so waiters
//! wake at once. The schema is created on first use, under a transaction-scoped advisory lock so
//! concurrent first uses do not trip over each other's `CREATE`s. Values always travel as bound
//! parameters; the only text spliced into SQL is the validated schema name.

/// Bumped when a table or the function changes incompatibly: the function's name carries it.
const VERSION: &str = "v1";

/// The SQL of each operation, for one schema.
#[derive(Clone, Debug)]
pub struct Statements {
    /// Creates everything, idempotently, serialised by an advisory lock.
    pub create: String,
    /// `(name, owner, ttl_ms, limit, holder)` → the token, when slot 0 was taken. The first try's
    /// fast path, without the function: it takes slot 0 only when the name has no lease row and
    /// no waiter at all, and otherwise returns nothing (then the function decides). Slot 0's
    /// primary key keeps it safe against a concurrent taker; a token it burns on that conflict is
    /// a gap, never a repeat.
    pub fast_acquire: String,
    /// `(name, owner, ttl_ms, limit, holder, heartbeat_ms)` → `(taken, token, slot, place,
    /// soonest_ms)`.
    pub acquire: String,
    /// `(name, slot, owner, ttl_ms)` → a row when extended.
    pub renew: String,
    /// `(name, slot, owner, channel)` → a row when released.
    pub release: String,
    /// `(name, owner, channel)`: leave the line, and drop a slot a lost answer may have given.
    pub leave: String,
    /// `(name, channel)` → the number of live holders dropped.
    pub force_release: String,
    /// `(name)` → `(max_limit, waiters)`, at most one row.
    pub summary: String,
    /// `(name)` → `(slot, token, holder, ms left)` per live holder.
    pub holders: String,
    /// `(prefix)` → names with a live holder.
    pub held_names: String,
}

impl Statements {
    /// `schema` must be validated (see [`super::settings`]).
    pub fn new(schema: &str) -> Self {
        let s = format!("\"{schema}\"");
        let lock_key = advisory_key(schema);
        Statements {
            create: create_sql(&s, lock_key),
            fast_acquire: format!(
                "WITH n AS (INSERT INTO {s}.names AS n (name, max_limit, token) VALUES ($1, $4, 1) \
                 ON CONFLICT (name) DO UPDATE \
                 SET token = n.token + 1, max_limit = greatest(n.max_limit, excluded.max_limit) \
                 WHERE NOT EXISTS (SELECT 1 FROM {s}.leases l WHERE l.name = n.name) \
                 AND NOT EXISTS (SELECT 1 FROM {s}.waiters w WHERE w.name = n.name) \
                 RETURNING n.name, n.token) \
                 INSERT INTO {s}.leases (name, slot, owner, token, holder, expires_at) \
                 SELECT n.name, 0, $2, n.token, $5, clock_timestamp() + $3 * interval '1 millisecond' \
                 FROM n ON CONFLICT (name, slot) DO NOTHING RETURNING token"
            ),
            acquire: format!(
                "SELECT taken, token, slot, place, soonest_ms \
                 FROM {s}.acquire_{VERSION}($1, $2, $3, $4, $5, $6)"
            ),
            renew: format!(
                "UPDATE {s}.leases SET expires_at = clock_timestamp() + $4 * interval '1 millisecond' \
                 WHERE name = $1 AND slot = $2 AND owner = $3 AND expires_at > clock_timestamp() \
                 RETURNING token"
            ),
            release: format!(
                "WITH gone AS (DELETE FROM {s}.leases \
                 WHERE name = $1 AND slot = $2 AND owner = $3 RETURNING name) \
                 SELECT pg_notify($4, name) FROM gone"
            ),
            leave: format!(
                "WITH w AS (DELETE FROM {s}.waiters WHERE name = $1 AND owner = $2 RETURNING name), \
                 l AS (DELETE FROM {s}.leases WHERE name = $1 AND owner = $2 RETURNING name) \
                 SELECT pg_notify($3, $1) \
                 WHERE EXISTS (SELECT 1 FROM w) OR EXISTS (SELECT 1 FROM l)"
            ),
            force_release: format!(
                "WITH gone AS (DELETE FROM {s}.leases WHERE name = $1 RETURNING expires_at) \
                 SELECT (SELECT count(*) FROM gone WHERE expires_at > clock_timestamp()), \
                 pg_notify($2, $1)"
            ),
            summary: format!(
                "SELECT n.max_limit, (SELECT count(*) FROM {s}.waiters w \
                 WHERE w.name = n.name AND w.beat_until >= clock_timestamp()) \
                 FROM {s}.names n WHERE n.name = $1"
            ),
            holders: format!(
                "SELECT slot, token, holder, \
                 greatest(0, ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000))::bigint \
                 FROM {s}.leases WHERE name = $1 AND expires_at > clock_timestamp() ORDER BY slot"
            ),
            held_names: format!(
                "SELECT DISTINCT name FROM {s}.leases \
                 WHERE expires_at > clock_timestamp() AND left(name, length($1)) = $1"
            ),
        }
    }
}

/// The notification channel for a lock name: short (identifiers stop at 63 bytes, names may be
/// 200), stable, and shared by every lockrun using the same schema. Two names that hash alike
/// only wake each other's waiters for nothing.
pub fn channel(schema: &str, name: &str) -> String {
    format!("{schema}_{:016x}", fnv1a(name.as_bytes()))
}

/// The advisory lock that serialises schema creation.
fn advisory_key(schema: &str) -> i64 {
    i64::from_ne_bytes(fnv1a(format!("lockrun schema {schema}").as_bytes()).to_ne_bytes())
}

/// FNV-1a, 64 bits: stable across builds and platforms.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The DDL, as one transaction of simple statements.
fn create_sql(s: &str, lock_key: i64) -> String {
    format!(
        r#"BEGIN;
SELECT pg_advisory_xact_lock({lock_key});
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.names (
    name text PRIMARY KEY,
    token bigint NOT NULL DEFAULT 0,
    max_limit integer NOT NULL DEFAULT 1,
    arrivals bigint NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS {s}.leases (
    name text NOT NULL,
    slot integer NOT NULL,
    owner text NOT NULL,
    token bigint NOT NULL,
    holder text NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (name, slot)
);
CREATE TABLE IF NOT EXISTS {s}.waiters (
    name text NOT NULL,
    owner text NOT NULL,
    ticket bigint NOT NULL,
    beat_until timestamptz NOT NULL,
    PRIMARY KEY (name, owner)
);
CREATE OR REPLACE FUNCTION {s}.acquire_{VERSION}(
    p_name text, p_owner text, p_ttl_ms bigint, p_limit integer, p_holder text,
    p_heartbeat_ms bigint,
    OUT taken boolean, OUT token bigint, OUT slot integer, OUT place bigint,
    OUT soonest_ms bigint)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
    v_last bigint;
    v_free integer[];
    v_ticket bigint;
BEGIN
    -- Locks the name's row: tries on one name run one at a time.
    INSERT INTO {s}.names AS n (name, max_limit) VALUES (p_name, p_limit)
        ON CONFLICT (name) DO UPDATE SET max_limit = greatest(n.max_limit, excluded.max_limit)
        RETURNING n.token INTO v_last;
    DELETE FROM {s}.leases l WHERE l.name = p_name AND l.expires_at <= clock_timestamp();
    DELETE FROM {s}.waiters w WHERE w.name = p_name AND w.beat_until < clock_timestamp();
    SELECT array_agg(k ORDER BY k) INTO v_free FROM generate_series(0, p_limit - 1) AS k
        WHERE NOT EXISTS (SELECT 1 FROM {s}.leases l WHERE l.name = p_name AND l.slot = k);
    SELECT w.ticket INTO v_ticket FROM {s}.waiters w
        WHERE w.name = p_name AND w.owner = p_owner;
    -- First come, first served: only the first (free slots) in line may take one.
    SELECT count(*) INTO place FROM {s}.waiters w
        WHERE w.name = p_name AND (v_ticket IS NULL OR w.ticket < v_ticket);
    IF place < coalesce(array_length(v_free, 1), 0) THEN
        taken := true;
        slot := v_free[1];
        token := v_last + 1;
        UPDATE {s}.names n SET token = v_last + 1 WHERE n.name = p_name;
        INSERT INTO {s}.leases (name, slot, owner, token, holder, expires_at)
            VALUES (p_name, v_free[1], p_owner, v_last + 1, p_holder,
                    clock_timestamp() + p_ttl_ms * interval '1 millisecond');
        DELETE FROM {s}.waiters w WHERE w.name = p_name AND w.owner = p_owner;
        RETURN;
    END IF;
    taken := false;
    IF p_heartbeat_ms > 0 THEN
        IF v_ticket IS NULL THEN
            UPDATE {s}.names n SET arrivals = n.arrivals + 1 WHERE n.name = p_name
                RETURNING n.arrivals INTO v_ticket;
            INSERT INTO {s}.waiters (name, owner, ticket, beat_until)
                VALUES (p_name, p_owner, v_ticket,
                        clock_timestamp() + p_heartbeat_ms * interval '1 millisecond');
        ELSE
            UPDATE {s}.waiters w
                SET beat_until = clock_timestamp() + p_heartbeat_ms * interval '1 millisecond'
                WHERE w.name = p_name AND w.owner = p_owner;
        END IF;
    ELSE
        place := -1;
    END IF;
    SELECT ceil(extract(epoch FROM min(l.expires_at) - clock_timestamp()) * 1000)::bigint
        INTO soonest_ms FROM {s}.leases l WHERE l.name = p_name;
END
$fn$;
COMMIT;"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_are_short_stable_identifiers() {
        let long = "x".repeat(200);
        let c = channel("lockrun", &long);
        assert!(c.len() < 63);
        assert_eq!(c, channel("lockrun", &long));
        assert_ne!(channel("lockrun", "a"), channel("lockrun", "b"));
        assert!(c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
    }

    #[test]
    fn only_the_validated_schema_is_spliced() {
        let sql = Statements::new("locks");
        assert!(sql.renew.contains("\"locks\".leases"));
        assert!(sql.create.contains("CREATE SCHEMA IF NOT EXISTS \"locks\""));
    }
}
