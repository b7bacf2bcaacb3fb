//! lockrun's tables and stored procedures in the URL's database, created on first use.
//!
//! With the table prefix `P` (default `lockrun_`):
//! - `Pnames` — one row per lock name, never deleted: `token` (the last fencing token issued: the
//!   larger of the last one plus one and the server's clock in microseconds, so tokens keep
//!   rising across restarts, forced releases and even a restore that lost the row), `max_limit`
//!   (the largest `--limit` seen, for `status`), `arrivals` (the waiters' ticket counter),
//!   `sup_ticket` (the newest `--supersede` waiter's ticket) and `last_run_us` (`--min-interval`).
//!   Every operation that changes a name's holders or line locks this row first, so they run one
//!   at a time per name, always taking row locks in the order names → leases → waiters.
//! - `Pleases` — one row per holder: `slot` (NULL for a shared holder), `owner` (random per
//!   run), `token`, `holder` (JSON for `status`), `bell` (see below) and `expires_at`, always
//!   computed by the server's clock (`UTC_TIMESTAMP(6)`: microseconds, no time zone). A row past
//!   its expiry is dead: renewals refuse it and the next try deletes it.
//! - `Pwaiters` — the line: `ticket` (arrival order), mode, `--supersede`, the waiter's record,
//!   `rung` (bumped whenever the waiter is woken) and `beat_until`, the server-clock deadline of
//!   its heartbeat; a waiter whose heartbeat lapsed has left.
//!
//! **Wake-ups.** MySQL has no LISTEN/NOTIFY. Each lockrun's connection holds the user-level lock
//! `lockrun:BELL` (`GET_LOCK`, BELL random per run; its listening connection holds
//! `lockrun:BELL:r`), so `IS_USED_LOCK` finds that run's session in O(1) — and never another
//! program's, even after a server restart recycled connection ids. A waiter sleeps in a statement
//! (`SLEEP`) on its own connection; whoever frees a place bumps `rung` of exactly the waiters
//! whose turn it may be (the first free-slot count, or the run of shared waiters at the head),
//! commits, and interrupts their sleep with `KILL QUERY`. A waiter sleeps only while its `rung` is
//! what its last try saw, so a wake-up that lands between two statements is not lost. Correctness
//! never rests on any of this: it stays with the rows, and waiters look again at least once a
//! second. `KILL QUERY` of another session needs the same database user (or the
//! `CONNECTION ADMIN` privilege); without it a wake-up is simply not delivered.
//!
//! Values reach SQL only as hex literals (see [`super::sql`]); the only text spliced in as is, is
//! the validated table prefix. The procedures run with the caller's privileges (`SQL SECURITY
//! INVOKER`) and carry a version in their names, so a changed procedure never replaces one that
//! older lockruns still call.

/// The version in the procedures' names.
const VERSION: &str = "v1";

/// The DDL, one statement per entry: tables first, then the procedures.
pub fn ddl(prefix: &str) -> Vec<(String, String)> {
    let t = Tables::new(prefix);
    let mut out = vec![
        (format!("{prefix}names"), table(&t.names, NAMES_COLUMNS)),
        (format!("{prefix}leases"), table(&t.leases, LEASES_COLUMNS)),
        (
            format!("{prefix}waiters"),
            table(&t.waiters, WAITERS_COLUMNS),
        ),
    ];
    for (name, body) in [
        ("ring", ring_body(&t)),
        ("wake", wake_body(&t)),
        ("acquire", acquire_body(&t)),
        ("release", release_body(&t)),
        ("leave", leave_body(&t)),
        ("force", force_body(&t)),
        ("claim", claim_body(&t)),
    ] {
        out.push((procedure(prefix, name), body));
    }
    out
}

/// The name of procedure `what` for `prefix`, e.g. `lockrun_acquire_v1`.
pub fn procedure(prefix: &str, what: &str) -> String {
    format!("{prefix}{what}_{VERSION}")
}

/// The names of every procedure, to find the ones missing.
pub fn procedures(prefix: &str) -> Vec<String> {
    [
        "ring", "wake", "acquire", "release", "leave", "force", "claim",
    ]
    .iter()
    .map(|what| procedure(prefix, what))
    .collect()
}

/// Table and procedure identifiers, quoted.
struct Tables {
    prefix: String,
    names: String,
    leases: String,
    waiters: String,
    ring: String,
    wake: String,
}

impl Tables {
    fn new(prefix: &str) -> Self {
        Tables {
            prefix: prefix.to_owned(),
            names: format!("`{prefix}names`"),
            leases: format!("`{prefix}leases`"),
            waiters: format!("`{prefix}waiters`"),
            ring: format!("`{}`", procedure(prefix, "ring")),
            wake: format!("`{}`", procedure(prefix, "wake")),
        }
    }

    /// Procedure `what`, unquoted.
    fn procedure(&self, what: &str) -> String {
        procedure(&self.prefix, what)
    }
}

/// `CREATE TABLE` for `table` (quoted) with `columns`, one a line.
fn table(table: &str, columns: &str) -> String {
    format!("CREATE TABLE IF NOT EXISTS {table} (\n{columns}\n) ENGINE=InnoDB")
}

/// The columns of `Pnames`: one row per lock name.
const NAMES_COLUMNS: &str = "  name VARBINARY(200) NOT NULL PRIMARY KEY,
  token BIGINT UNSIGNED NOT NULL DEFAULT 0,
  max_limit INT NOT NULL DEFAULT 1,
  arrivals BIGINT UNSIGNED NOT NULL DEFAULT 0,
  sup_ticket BIGINT UNSIGNED NOT NULL DEFAULT 0,
  last_run_us BIGINT NULL";

/// The columns of `Pleases`: one row per holder.
const LEASES_COLUMNS: &str = "  name VARBINARY(200) NOT NULL,
  owner VARBINARY(32) NOT NULL,
  slot INT NULL,
  token BIGINT UNSIGNED NOT NULL,
  holder TEXT CHARACTER SET utf8mb4 NOT NULL,
  bell VARBINARY(32) NOT NULL,
  expires_at DATETIME(6) NOT NULL,
  PRIMARY KEY (name, owner),
  UNIQUE KEY by_slot (name, slot)";

/// The columns of `Pwaiters`: the line.
const WAITERS_COLUMNS: &str = "  name VARBINARY(200) NOT NULL,
  owner VARBINARY(32) NOT NULL,
  ticket BIGINT UNSIGNED NOT NULL,
  shared TINYINT NOT NULL,
  supersede TINYINT NOT NULL,
  holder TEXT CHARACTER SET utf8mb4 NOT NULL,
  bell VARBINARY(32) NOT NULL,
  rung BIGINT UNSIGNED NOT NULL DEFAULT 0,
  beat_until DATETIME(6) NOT NULL,
  PRIMARY KEY (name, owner),
  KEY by_ticket (name, ticket),
  KEY by_mode (name, shared, ticket),
  KEY by_supersede (name, supersede, ticket),
  KEY by_beat (name, beat_until)";

/// `ring(bells, suffix)`: interrupts the statement of each session holding `lockrun:BELL` +
/// suffix, for a comma-terminated list of bells. Called after the commit that woke them; a
/// session that is gone, or that this user may not interrupt, is skipped.
fn ring_body(t: &Tables) -> String {
    format!(
        "CREATE PROCEDURE {ring}(IN p_bells TEXT, IN p_suffix VARCHAR(8))
SQL SECURITY INVOKER
BEGIN
  DECLARE v_rest TEXT DEFAULT p_bells;
  DECLARE v_bell VARCHAR(64);
  DECLARE v_id BIGINT UNSIGNED;
  DECLARE CONTINUE HANDLER FOR SQLEXCEPTION BEGIN END;
  WHILE LOCATE(',', v_rest) > 0 DO
    SET v_bell = SUBSTRING_INDEX(v_rest, ',', 1);
    SET v_rest = SUBSTRING(v_rest, LOCATE(',', v_rest) + 1);
    SET v_id = IS_USED_LOCK(CONCAT('lockrun:', v_bell, p_suffix));
    IF v_id IS NOT NULL AND v_id <> CONNECTION_ID() THEN
      KILL QUERY v_id;
    END IF;
  END WHILE;
END",
        ring = t.ring
    )
}

/// `wake(name, OUT bells)`: inside the caller's transaction, with the name's row locked, marks
/// the waiters whose turn it may now be as woken (`rung + 1`) and returns their bells — the first
/// `free slots` waiters (at least one) when the head of the line is exclusive and no shared holder
/// remains, or the run of shared waiters at the head when no exclusive holder remains. Never the
/// whole line.
fn wake_body(t: &Tables) -> String {
    format!(
        "CREATE PROCEDURE {wake}(IN p_name VARBINARY(200), OUT p_bells TEXT)
SQL SECURITY INVOKER MODIFIES SQL DATA
BEGIN
  DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
  DECLARE v_limit INT DEFAULT 1;
  DECLARE v_used INT DEFAULT 0;
  DECLARE v_readers INT DEFAULT 0;
  DECLARE v_n INT DEFAULT 1;
  DECLARE v_head TINYINT DEFAULT NULL;
  DECLARE v_stop BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_owner VARBINARY(32);
  DECLARE v_bell VARBINARY(32);
  DECLARE v_done INT DEFAULT 0;
  DECLARE heads CURSOR FOR SELECT owner, bell FROM {waiters}
    WHERE name = p_name AND beat_until >= v_now ORDER BY ticket LIMIT v_n;
  DECLARE readers CURSOR FOR SELECT owner, bell FROM {waiters}
    WHERE name = p_name AND shared = 1 AND ticket < v_stop AND beat_until >= v_now ORDER BY ticket;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
  SET p_bells = '';
  SELECT max_limit INTO v_limit FROM {names} WHERE name = p_name;
  SELECT COUNT(*) INTO v_used FROM {leases}
    WHERE name = p_name AND slot IS NOT NULL AND expires_at > v_now;
  SELECT COUNT(*) INTO v_readers FROM {leases}
    WHERE name = p_name AND slot IS NULL AND expires_at > v_now;
  SELECT shared INTO v_head FROM {waiters}
    WHERE name = p_name AND beat_until >= v_now ORDER BY ticket LIMIT 1;
  IF v_head = 0 AND v_readers = 0 AND v_used < v_limit THEN
    SET v_n = v_limit - v_used;
{wake_heads}  ELSEIF v_head = 1 AND v_used = 0 THEN
    SELECT MIN(ticket) INTO v_stop FROM {waiters}
      WHERE name = p_name AND shared = 0 AND beat_until >= v_now;
    SET v_stop = COALESCE(v_stop, 18446744073709551615);
{wake_readers}  END IF;
END",
        wake = t.wake,
        names = t.names,
        leases = t.leases,
        waiters = t.waiters,
        wake_heads = wake_each(t, "heads"),
        wake_readers = wake_each(t, "readers"),
    )
}

/// Inside `wake`: marks each waiter that `cursor` yields as woken and adds its bell to `p_bells`.
fn wake_each(t: &Tables, cursor: &str) -> String {
    format!(
        "    SET v_done = 0;
    OPEN {cursor};
    wake_{cursor}: LOOP
      FETCH {cursor} INTO v_owner, v_bell;
      IF v_done = 1 THEN LEAVE wake_{cursor}; END IF;
      UPDATE {waiters} SET rung = rung + 1 WHERE name = p_name AND owner = v_owner;
      SET p_bells = CONCAT(p_bells, v_bell, ',');
    END LOOP;
    CLOSE {cursor};
",
        waiters = t.waiters
    )
}

/// `acquire(name, owner, bell, ttl_ms, limit, holder, heartbeat_ms, shared, supersede)`: one try,
/// in one transaction. Clears dead leases and lapsed waiters; if this owner already holds (a try
/// whose answer was lost), extends and returns that hold; if a newer `--supersede` waiter joined
/// after this one, says so; otherwise takes a slot (or a shared hold) when it is this caller's
/// turn — an exclusive contender when no shared holder remains and fewer waiters are ahead of it
/// than slots are free, a shared one when no exclusive holder holds and no exclusive waiter is
/// ahead of it — or, with a heartbeat, joins the line (or renews its place).
///
/// Returns one row: `taken, token, slot, soonest_us, superseded, by, rung` — `soonest_us` the
/// shortest lease left (NULL when none), `by` the newer `--supersede` waiter's record, `rung` the
/// waiter's wake-up count (its sleep is valid only while that is unchanged).
fn acquire_body(t: &Tables) -> String {
    format!(
        "CREATE PROCEDURE `{acquire}`(IN p_name VARBINARY(200), IN p_owner VARBINARY(32),
  IN p_bell VARBINARY(32), IN p_ttl_ms BIGINT, IN p_limit INT,
  IN p_holder TEXT CHARACTER SET utf8mb4, IN p_heartbeat_ms BIGINT, IN p_shared TINYINT,
  IN p_supersede TINYINT)
SQL SECURITY INVOKER MODIFIES SQL DATA
BEGIN
  DECLARE v_now DATETIME(6);
  DECLARE v_token BIGINT UNSIGNED DEFAULT 0;
  DECLARE v_sup BIGINT UNSIGNED DEFAULT 0;
  DECLARE v_ticket BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_rung BIGINT UNSIGNED DEFAULT 0;
  DECLARE v_held_token BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_held_slot INT DEFAULT NULL;
  DECLARE v_slot INT DEFAULT NULL;
  DECLARE v_readers INT DEFAULT 0;
  DECLARE v_writers INT DEFAULT 0;
  DECLARE v_free INT DEFAULT 0;
  DECLARE v_ahead INT DEFAULT 0;
  DECLARE v_can TINYINT DEFAULT 0;
  DECLARE v_soonest BIGINT DEFAULT NULL;
  DECLARE v_taken TINYINT DEFAULT 0;
  DECLARE v_superseded TINYINT DEFAULT 0;
  DECLARE v_by TEXT CHARACTER SET utf8mb4 DEFAULT NULL;
  DECLARE v_bells TEXT DEFAULT '';
  DECLARE v_lock VARCHAR(64) DEFAULT CONCAT('lockrun:', p_bell);
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  IF COALESCE(IS_USED_LOCK(v_lock), 0) <> CONNECTION_ID() THEN
    DO GET_LOCK(v_lock, 0);
  END IF;
  START TRANSACTION;
  INSERT INTO {names} (name, max_limit) VALUES (p_name, p_limit)
    ON DUPLICATE KEY UPDATE max_limit = GREATEST(max_limit, p_limit);
  SELECT token, sup_ticket INTO v_token, v_sup FROM {names} WHERE name = p_name FOR UPDATE;
  SET v_now = UTC_TIMESTAMP(6);
  try: BEGIN
    SELECT token, slot INTO v_held_token, v_held_slot FROM {leases}
      WHERE name = p_name AND owner = p_owner AND expires_at > v_now FOR UPDATE;
    IF v_held_token IS NOT NULL THEN
      UPDATE {leases} SET expires_at = v_now + INTERVAL p_ttl_ms * 1000 MICROSECOND, bell = p_bell
        WHERE name = p_name AND owner = p_owner;
      DELETE FROM {waiters} WHERE name = p_name AND owner = p_owner;
      SET v_taken = 1, v_token = v_held_token, v_slot = v_held_slot;
      LEAVE try;
    END IF;
    DELETE FROM {leases} WHERE name = p_name AND expires_at <= v_now;
    DELETE FROM {waiters} WHERE name = p_name AND beat_until < v_now;
    SELECT COUNT(*) INTO v_readers FROM {leases} WHERE name = p_name AND slot IS NULL;
    SELECT COUNT(*) INTO v_writers FROM {leases} WHERE name = p_name AND slot IS NOT NULL;
    SELECT COUNT(*) INTO v_free FROM {leases}
      WHERE name = p_name AND slot IS NOT NULL AND slot < p_limit;
    SET v_free = p_limit - v_free;
    SELECT TIMESTAMPDIFF(MICROSECOND, v_now, MIN(expires_at)) INTO v_soonest FROM {leases}
      WHERE name = p_name;
    SELECT ticket, rung INTO v_ticket, v_rung FROM {waiters}
      WHERE name = p_name AND owner = p_owner FOR UPDATE;
    IF v_ticket IS NOT NULL AND p_supersede = 1 AND v_sup > v_ticket THEN
      SELECT holder INTO v_by FROM {waiters} WHERE name = p_name AND ticket = v_sup;
      SET v_superseded = 1, v_by = COALESCE(v_by, '');
      LEAVE try;
    END IF;
    IF p_shared = 1 THEN
      SELECT COUNT(*) INTO v_ahead FROM (SELECT 1 FROM {waiters}
        WHERE name = p_name AND shared = 0 AND ticket < COALESCE(v_ticket, 18446744073709551615)
        LIMIT 1) AS w;
      SET v_can = (v_writers = 0 AND v_ahead = 0);
    ELSEIF v_readers = 0 AND v_free > 0 THEN
      SELECT COUNT(*) INTO v_ahead FROM (SELECT 1 FROM {waiters}
        WHERE name = p_name AND ticket < COALESCE(v_ticket, 18446744073709551615)
        LIMIT v_free) AS w;
      SET v_can = (v_ahead < v_free);
    END IF;
    IF v_can = 1 THEN
      SET v_token = GREATEST(v_token + 1,
        TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', v_now));
      UPDATE {names} SET token = v_token WHERE name = p_name;
      IF p_shared = 0 THEN
        IF NOT EXISTS (SELECT 1 FROM {leases} WHERE name = p_name AND slot = 0) THEN
          SET v_slot = 0;
        ELSE
          SELECT MIN(l.slot + 1) INTO v_slot FROM {leases} AS l
            WHERE l.name = p_name AND l.slot IS NOT NULL AND l.slot + 1 < p_limit
            AND NOT EXISTS (SELECT 1 FROM {leases} AS m
              WHERE m.name = p_name AND m.slot = l.slot + 1);
        END IF;
      END IF;
      INSERT INTO {leases} (name, owner, slot, token, holder, bell, expires_at)
        VALUES (p_name, p_owner, v_slot, v_token, p_holder, p_bell,
                v_now + INTERVAL p_ttl_ms * 1000 MICROSECOND);
      DELETE FROM {waiters} WHERE name = p_name AND owner = p_owner;
      SET v_taken = 1;
      LEAVE try;
    END IF;
    IF p_heartbeat_ms > 0 THEN
      IF v_ticket IS NULL THEN
        SELECT arrivals + 1 INTO v_ticket FROM {names} WHERE name = p_name;
        UPDATE {names} SET arrivals = v_ticket WHERE name = p_name;
        IF p_supersede = 1 THEN
          -- Every older --supersede waiter gives up: wake each to find out.
          SELECT COALESCE(GROUP_CONCAT(bell SEPARATOR ','), '') INTO v_bells FROM {waiters}
            WHERE name = p_name AND supersede = 1;
          IF v_bells <> '' THEN
            SET v_bells = CONCAT(v_bells, ',');
          END IF;
          UPDATE {waiters} SET rung = rung + 1 WHERE name = p_name AND supersede = 1;
          UPDATE {names} SET sup_ticket = v_ticket WHERE name = p_name;
        END IF;
        INSERT INTO {waiters} (name, owner, ticket, shared, supersede, holder, bell, rung,
                               beat_until)
          VALUES (p_name, p_owner, v_ticket, p_shared, p_supersede, p_holder, p_bell, 0,
                  v_now + INTERVAL p_heartbeat_ms * 1000 MICROSECOND);
        SET v_rung = 0;
      ELSE
        UPDATE {waiters} SET beat_until = v_now + INTERVAL p_heartbeat_ms * 1000 MICROSECOND,
          bell = p_bell WHERE name = p_name AND owner = p_owner;
      END IF;
    END IF;
  END try;
  COMMIT;
{ring_bells}  SELECT v_taken, v_token, COALESCE(v_slot, 0), v_soonest, v_superseded, v_by, v_rung;
END",
        acquire = t.procedure("acquire"),
        names = t.names,
        leases = t.leases,
        waiters = t.waiters,
        ring_bells = ring(t, "v_bells", ""),
    )
}

/// `release(name, owner)`: drops this owner's hold, if it still has one, and wakes whoever is
/// next. Returns one row: how many holds were dropped (0 or 1).
fn release_body(t: &Tables) -> String {
    Dropping {
        what: "release",
        params: OWNER_PARAMS,
        count: "v_released",
        interrupts_holders: false,
        drops: &format!(
            "  DELETE FROM {leases} WHERE name = p_name AND owner = p_owner;
  SET v_released = ROW_COUNT();
",
            leases = t.leases
        ),
    }
    .body(t)
}

/// `leave(name, owner)`: a waiter that gives up leaves the line, drops a hold that one of its
/// tries took if the answer never reached it, and wakes whoever is next. Returns one row: how
/// many entries went.
fn leave_body(t: &Tables) -> String {
    Dropping {
        what: "leave",
        params: OWNER_PARAMS,
        count: "v_removed",
        interrupts_holders: false,
        drops: &format!(
            "  DELETE FROM {leases} WHERE name = p_name AND owner = p_owner;
  SET v_removed = ROW_COUNT();
  DELETE FROM {waiters} WHERE name = p_name AND owner = p_owner;
  SET v_removed = v_removed + ROW_COUNT();
",
            leases = t.leases,
            waiters = t.waiters
        ),
    }
    .body(t)
}

/// `force(name)`: break-glass. Drops every holder of the name, interrupts each one's listening
/// connection so it stops its command at once, and wakes whoever is next; the token counter is
/// untouched. Returns one row: how many live holders were dropped.
fn force_body(t: &Tables) -> String {
    Dropping {
        what: "force",
        params: "IN p_name VARBINARY(200)",
        count: "v_dropped",
        interrupts_holders: true,
        drops: &format!(
            "  SELECT COUNT(*), COALESCE(GROUP_CONCAT(bell SEPARATOR ','), '') INTO v_dropped, v_holders
    FROM {leases} WHERE name = p_name AND expires_at > UTC_TIMESTAMP(6);
  IF v_holders <> '' THEN
    SET v_holders = CONCAT(v_holders, ',');
  END IF;
  DELETE FROM {leases} WHERE name = p_name;
",
            leases = t.leases
        ),
    }
    .body(t)
}

/// The parameters of the procedures that act for one owner.
const OWNER_PARAMS: &str = "IN p_name VARBINARY(200), IN p_owner VARBINARY(32)";

/// A procedure that drops some of a name's entries and wakes whoever is next: in one transaction
/// that locks the name's row first, `drops` deletes rows and counts them in `count`; when any
/// went, `wake` marks the next waiters; after the commit their bells are rung. Returns one row:
/// that count.
struct Dropping<'a> {
    /// The procedure, as in [`procedure`].
    what: &'a str,
    params: &'a str,
    /// The variable `drops` counts the dropped entries in.
    count: &'a str,
    /// Whether `drops` also collects the dropped holders' bells in `v_holders`, whose listening
    /// connections are then interrupted (`force`).
    interrupts_holders: bool,
    drops: &'a str,
}

impl Dropping<'_> {
    fn body(&self, t: &Tables) -> String {
        let (declare_holders, ring_holders) = match self.interrupts_holders {
            true => (
                "  DECLARE v_holders TEXT DEFAULT '';\n".to_owned(),
                ring(t, "v_holders", ":r"),
            ),
            false => (String::new(), String::new()),
        };
        format!(
            "CREATE PROCEDURE `{procedure}`({params})
SQL SECURITY INVOKER MODIFIES SQL DATA
BEGIN
  DECLARE v_limit INT DEFAULT 1;
  DECLARE {count} INT DEFAULT 0;
{declare_holders}  DECLARE v_bells TEXT DEFAULT '';
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  START TRANSACTION;
  SELECT max_limit INTO v_limit FROM {names} WHERE name = p_name FOR UPDATE;
{drops}  IF {count} > 0 THEN
    CALL {wake}(p_name, v_bells);
  END IF;
  COMMIT;
{ring_holders}{ring_bells}  SELECT {count};
END",
            procedure = t.procedure(self.what),
            params = self.params,
            count = self.count,
            drops = self.drops,
            names = t.names,
            wake = t.wake,
            ring_bells = ring(t, "v_bells", ""),
        )
    }
}

/// After a commit: interrupts the sessions of the comma-terminated bells in `bells` (a variable),
/// each holding `lockrun:BELL` + `suffix`, if any.
fn ring(t: &Tables, bells: &str, suffix: &str) -> String {
    format!(
        "  IF {bells} <> '' THEN
    CALL {ring}({bells}, '{suffix}');
  END IF;
",
        ring = t.ring
    )
}

/// `claim(name, interval_us)`: `--min-interval`. Records that the name runs now, by the server's
/// clock, unless it was recorded less than the interval ago; a clock that went backwards counts
/// as too soon, never as a free pass. Returns one row: `claimed, microseconds since the last run`.
fn claim_body(t: &Tables) -> String {
    format!(
        "CREATE PROCEDURE `{claim}`(IN p_name VARBINARY(200), IN p_interval_us BIGINT)
SQL SECURITY INVOKER MODIFIES SQL DATA
BEGIN
  DECLARE v_last BIGINT DEFAULT NULL;
  DECLARE v_now BIGINT;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  START TRANSACTION;
  INSERT INTO {names} (name) VALUES (p_name) ON DUPLICATE KEY UPDATE name = name;
  SELECT last_run_us INTO v_last FROM {names} WHERE name = p_name FOR UPDATE;
  SET v_now = TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6));
  IF v_last IS NOT NULL AND v_now - v_last < p_interval_us THEN
    COMMIT;
    SELECT 0, GREATEST(v_now - v_last, 0);
  ELSE
    UPDATE {names} SET last_run_us = v_now WHERE name = p_name;
    COMMIT;
    SELECT 1, 0;
  END IF;
END",
        claim = t.procedure("claim"),
        names = t.names
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_statement_uses_the_prefix_and_only_microsecond_clocks() {
        for (object, sql) in ddl("jobs_") {
            assert!(object.starts_with("jobs_"), "{object}");
            assert!(!sql.contains("lockrun_"), "{object}: another prefix");
            // A whole-second clock would round a lease's end; every clock read is UTC_TIMESTAMP(6).
            for bare in ["NOW()", "UTC_TIMESTAMP()", "SYSDATE()", "CURRENT_TIMESTAMP"] {
                assert!(!sql.contains(bare), "{object} uses {bare}");
            }
            // Double quotes are identifiers under ANSI_QUOTES; strings use single quotes only.
            assert!(!sql.contains('"'), "{object}");
        }
        assert_eq!(procedure("jobs_", "acquire"), "jobs_acquire_v1");
        assert_eq!(procedures("p_").len(), 7);
    }

    #[test]
    fn procedures_run_as_the_caller_and_commit_before_waking_anyone() {
        for (object, sql) in ddl("lockrun_") {
            if !sql.starts_with("CREATE PROCEDURE") {
                continue;
            }
            assert!(sql.contains("SQL SECURITY INVOKER"), "{object}");
            if let Some(ring) = sql.find("CALL `lockrun_ring_v1`") {
                let commit = sql.find("COMMIT;").expect("a commit");
                assert!(commit < ring, "{object} wakes before its commit");
            }
        }
    }
}
