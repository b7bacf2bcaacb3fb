-- lockrun's schema, version 2: its tables, indexes and functions, created on first use or
-- migrated from version 1 in place. The caller runs this inside a transaction that holds an
-- advisory lock and only when the schema is not yet at version 2, so concurrent first uses never
-- trip over each other and a schema already in use is never altered again. @S@ is the schema
-- (quoted).
--
-- Every change to a name's holders or line (a take, a release, leaving, a forced release) locks
-- the name's row in `names` first, so they happen one at a time, and each later statement of the
-- function sees whatever committed before it (READ COMMITTED: a fresh snapshot per statement).
-- A waiter that a release would not wake only refreshes its heartbeat, without that lock.
--
-- Cost per handoff does not grow with the line: every scan of the line starts at the name's
-- `line_floor` (a ticket at or below every waiter's, moved up under the lock as the head of the
-- line leaves, so the entries of departed waiters are never walked again) and stops after a
-- bounded number of rows. That needs an ordered index scan, whatever the statistics say: with
-- few or none (a new table, a name that just became busy) a cached generic plan expects a
-- handful of rows and picks a bitmap or sequential scan, which reads every waiter of the name on
-- every call. So each function that reads the line first turns both off for its own statement's
-- transaction (set_config(.., true): it ends with the statement, behind a pooler too).
--
-- Wake-ups: a waiter that reached the server directly records a channel, `lockrun_<owner>`, and
-- LISTENs there; a release NOTIFYs only the waiters whose turn it may be (the first `max_limit`
-- of the line, or the run of shared waiters at its head), and `release --force` NOTIFYs each
-- holder on the same per-owner channel. A waiter behind a transaction pooler (PgBouncer), where
-- LISTEN cannot work, records no channel and polls `peek_v2`, paced by `epoch` (every change
-- that may make it someone's turn) and the line's recent pace; told where the server itself is
-- (`listen=`), it LISTENs on a connection of its own there once near its turn and then records
-- its channel on its row with a plain UPDATE. A version 1 waiter (an older
-- lockrun) records '' and is woken on the name's own channel, which version 1 listens to.
--
-- Tokens are floored by the server's clock in microseconds, so they keep rising even after a
-- failover to a replica that lost the last increments (unless its clock is behind).
--
-- The functions run with their caller's rights and have no `SET search_path` clause (entering
-- and leaving one costs a fifth of a millisecond per call, more than a heartbeat's own work):
-- every table is schema-qualified, and built-in functions and operators resolve from
-- pg_catalog, which is searched first unless a session deliberately lists it later.

CREATE SCHEMA IF NOT EXISTS @S@;

CREATE TABLE IF NOT EXISTS @S@.names (
    name text PRIMARY KEY,
    token bigint NOT NULL DEFAULT 0,
    max_limit integer NOT NULL DEFAULT 1,
    arrivals bigint NOT NULL DEFAULT 0
);
ALTER TABLE @S@.names
    ADD COLUMN IF NOT EXISTS epoch bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS line_floor bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS newest_supersede bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS supersede_by text NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS last_run_us bigint,
    ADD COLUMN IF NOT EXISTS released_at timestamptz,
    ADD COLUMN IF NOT EXISTS taken_at timestamptz,
    ADD COLUMN IF NOT EXISTS last_handoff_ms double precision,
    ADD COLUMN IF NOT EXISTS prev_handoff_ms double precision;

-- Exclusive holders use slots 0 .. limit-1; shared holders negative slots, one each.
CREATE TABLE IF NOT EXISTS @S@.leases (
    name text NOT NULL,
    slot integer NOT NULL,
    owner text NOT NULL,
    token bigint NOT NULL,
    holder text NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (name, slot)
);
ALTER TABLE @S@.leases ADD COLUMN IF NOT EXISTS shared boolean NOT NULL DEFAULT false;

CREATE TABLE IF NOT EXISTS @S@.waiters (
    name text NOT NULL,
    owner text NOT NULL,
    ticket bigint NOT NULL,
    beat_until timestamptz NOT NULL,
    PRIMARY KEY (name, owner)
);
-- Rows that version 1 left get channel '' (woken on the name's channel, as version 1 expects).
ALTER TABLE @S@.waiters
    ADD COLUMN IF NOT EXISTS shared boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS supersede boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS holder text NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS channel text DEFAULT '';
-- Heartbeats rewrite a waiter's row every second: room on the page keeps them HOT updates.
ALTER TABLE @S@.waiters SET (fillfactor = 70);
CREATE INDEX IF NOT EXISTS waiters_line ON @S@.waiters (name, ticket);
CREATE INDEX IF NOT EXISTS waiters_writers ON @S@.waiters (name, ticket) WHERE NOT shared;
CREATE INDEX IF NOT EXISTS waiters_superseding ON @S@.waiters (name, ticket) WHERE supersede;

-- A shared holder never beside an exclusive one, whoever inserts the row (a version 1 lockrun's
-- one-statement fast path included): the check runs with a snapshot taken now, after any taker
-- that held the name's row lock committed, and skips the insert.
CREATE OR REPLACE FUNCTION @S@.modes_v2() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    IF EXISTS (SELECT 1 FROM @S@.leases l WHERE l.name = NEW.name AND l.shared <> NEW.shared
               AND l.expires_at > clock_timestamp()) THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END
$fn$;
DROP TRIGGER IF EXISTS modes_v2 ON @S@.leases;
CREATE TRIGGER modes_v2 BEFORE INSERT ON @S@.leases
    FOR EACH ROW EXECUTE FUNCTION @S@.modes_v2();

-- Where a waiter with ticket P_TICKET stands, scanning from the line's floor P_FLOOR: how many
-- live waiters are ahead of it (counted up to P_CAP), whether a live exclusive waiter is among
-- them, and how many tickets separate it from the first live waiter (more than the waiters
-- ahead when some left). O(P_CAP), whatever the line's length: each scan starts at the floor and
-- is LIMITed, an ordered index scan that stops early (see the header on plans).
-- (The helpers are PL/pgSQL, whose plans are kept for the session: a SQL function that cannot
-- be inlined is planned again on every call.)
CREATE OR REPLACE FUNCTION @S@.place_v2(p_name text, p_floor bigint, p_ticket bigint,
    p_cap integer, OUT ahead integer, OUT writer_ahead boolean, OUT distance bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
    v_first bigint[];
    v_writer bigint;
BEGIN
    SELECT array_agg(f.ticket ORDER BY f.ticket) INTO v_first FROM (SELECT w.ticket
        FROM @S@.waiters w
        WHERE w.name = p_name AND w.ticket >= p_floor AND w.beat_until >= clock_timestamp()
        ORDER BY w.ticket LIMIT p_cap) f;
    SELECT count(*)::integer INTO ahead FROM unnest(v_first) AS t WHERE t < p_ticket;
    distance := greatest(0, p_ticket - v_first[1]);
    SELECT w.ticket INTO v_writer FROM @S@.waiters w
        WHERE w.name = p_name AND NOT w.shared AND w.ticket >= p_floor
        AND w.beat_until >= clock_timestamp()
        ORDER BY w.ticket LIMIT 1;
    writer_ahead := coalesce(v_writer < p_ticket, false);
END
$fn$;

-- Moves the line's floor up to its first waiter, removing waiters at the head whose heartbeat
-- lapsed on the way (a lapsed waiter further back is skipped by every count, and removed once it
-- reaches the head). Every row below the floor is gone. Returns the new floor. The caller holds
-- the name's row lock.
CREATE OR REPLACE FUNCTION @S@.advance_v2(p_name text) RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
    v_floor bigint;
    v_arrivals bigint;
    v_head bigint;
    v_owner text;
    v_lapsed boolean;
BEGIN
    SELECT n.line_floor, n.arrivals INTO v_floor, v_arrivals
        FROM @S@.names n WHERE n.name = p_name;
    -- One waiter at a time from the head; at most 32 lapsed ones removed per call.
    FOR i IN 1..32 LOOP
        SELECT w.ticket, w.owner, w.beat_until < clock_timestamp()
            INTO v_head, v_owner, v_lapsed FROM @S@.waiters w
            WHERE w.name = p_name AND w.ticket >= v_floor ORDER BY w.ticket LIMIT 1;
        IF NOT FOUND THEN
            v_head := v_arrivals + 1;
            EXIT;
        END IF;
        EXIT WHEN NOT v_lapsed;
        DELETE FROM @S@.waiters w WHERE w.name = p_name AND w.owner = v_owner
            AND w.beat_until < clock_timestamp();
        -- It beat just now: it is the head.
        EXIT WHEN NOT FOUND;
        v_floor := v_head + 1;
        v_head := NULL;
    END LOOP;
    v_head := coalesce(v_head, v_floor);
    UPDATE @S@.names n SET line_floor = v_head WHERE n.name = p_name AND n.line_floor < v_head;
    RETURN v_head;
END
$fn$;

-- Wakes the waiters whose turn it may now be, never the whole line: the run of shared waiters at
-- the head, or else the first max_limit waiters; and, for the waiters that poll, counts the
-- change in `epoch` and keeps the pace of the line: how long the line took to move one place,
-- from the last take (or release) to this release, the last two times. The caller holds the
-- name's row lock.
CREATE OR REPLACE FUNCTION @S@.wake_v2(p_name text, p_legacy text) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    v_limit integer;
    v_from bigint;
    v_head_shared boolean;
    v_rung integer := 0;
    v_batch integer;
    v_legacy_rung boolean := false;
    w record;
BEGIN
    UPDATE @S@.names n SET epoch = n.epoch + 1,
            prev_handoff_ms = n.last_handoff_ms,
            last_handoff_ms = extract(epoch FROM clock_timestamp()
                                      - greatest(n.released_at, n.taken_at)) * 1000,
            released_at = clock_timestamp()
        WHERE n.name = p_name
        RETURNING n.max_limit INTO v_limit;
    v_from := @S@.advance_v2(p_name);
    <<batches>>
    LOOP
        v_batch := 0;
        FOR w IN SELECT q.ticket, q.shared, q.channel FROM @S@.waiters q
                 WHERE q.name = p_name AND q.ticket >= v_from
                 AND q.beat_until >= clock_timestamp()
                 ORDER BY q.ticket LIMIT 64 LOOP
            v_batch := v_batch + 1;
            v_from := w.ticket + 1;
            v_head_shared := coalesce(v_head_shared, w.shared);
            EXIT batches WHEN (v_head_shared AND NOT w.shared)
                           OR (NOT v_head_shared AND v_rung >= greatest(v_limit, 1));
            IF w.channel = '' THEN
                IF NOT v_legacy_rung THEN
                    PERFORM pg_notify(p_legacy, p_name);
                    v_legacy_rung := true;
                END IF;
            ELSIF w.channel IS NOT NULL THEN
                PERFORM pg_notify(w.channel, 'turn');
            END IF;
            v_rung := v_rung + 1;
        END LOOP;
        EXIT WHEN v_batch < 64;
    END LOOP;
END
$fn$;

-- One try to become a holder of P_NAME, in turn; otherwise, when P_HEARTBEAT_MS > 0, keeps the
-- caller in line. The rules, first come first served: an exclusive contender takes a free slot
-- when no shared holder holds and fewer live waiters are ahead of it than slots are free; a
-- shared contender enters when no exclusive holder holds and no live exclusive waiter is ahead
-- of it, so a waiting writer is never starved by readers that came after it. A --supersede
-- waiter joining makes every older --supersede waiter give up (`superseded_by`: its record).
-- P_COOKIE: the connection's own `lockrun.session` setting, present only when the connection
-- reached the server directly (a pooler drops startup options); '' for a version 1 caller.
-- Returns `taken` with `fence` (the token) and `row_slot`; otherwise `next_up` (whether a release
-- would wake it), where it stands (`ahead`: live waiters ahead, up to P_LIMIT + 8; `distance`:
-- tickets from the head), `soonest_ms` (for next_up waiters: the shortest lease left), and for
-- waiters that poll the name's `seen_epoch` and the line's pace (`handoff_ms`: the shorter of
-- the last two times the line took to move one place, once there are two; `since_release_ms`),
-- and whether the caller's connection reached the server directly (`direct`: it can LISTEN).
CREATE OR REPLACE FUNCTION @S@.acquire_v2(
    p_name text, p_owner text, p_ttl_ms bigint, p_limit integer, p_holder text,
    p_heartbeat_ms bigint, p_shared boolean, p_supersede boolean, p_cookie text,
    OUT taken boolean, OUT fence bigint, OUT row_slot integer, OUT soonest_ms bigint,
    OUT next_up boolean, OUT ahead integer, OUT distance bigint, OUT seen_epoch bigint,
    OUT handoff_ms double precision, OUT since_release_ms double precision,
    OUT superseded_by text, OUT direct boolean)
LANGUAGE plpgsql AS $fn$
DECLARE
    v_cap constant integer := p_limit + 8;
    v_beat constant interval := p_heartbeat_ms * interval '1 millisecond';
    v_now timestamptz := clock_timestamp();
    v_names record;
    v_ticket bigint;
    v_live boolean;
    v_in_line boolean;
    v_writer_ahead boolean;
    v_free integer[];
    v_can boolean;
    v_token bigint;
    v_slot integer;
BEGIN
    -- A heartbeat or a place in line needs no durable commit (one lost in a crash only makes its
    -- waiter join again): no WAL flush for them. Taking a lease turns it back on, below.
    PERFORM set_config('enable_bitmapscan', 'off', true),
            set_config('enable_seqscan', 'off', true),
            set_config('synchronous_commit', 'off', true);
    taken := false;
    direct := coalesce(current_setting('lockrun.session', true) = p_cookie, false);
    -- A waiter that a release would not wake only renews its heartbeat, without the name's
    -- lock: a long line's heartbeats never queue behind a handoff, nor hold one up.
    SELECT w.ticket INTO v_ticket FROM @S@.waiters w
        WHERE w.name = p_name AND w.owner = p_owner AND w.beat_until >= v_now;
    IF FOUND THEN
        SELECT * INTO v_names FROM @S@.names n WHERE n.name = p_name;
        SELECT pl.ahead, pl.writer_ahead, pl.distance INTO ahead, v_writer_ahead, distance
            FROM @S@.place_v2(p_name, v_names.line_floor, v_ticket, v_cap) pl;
        next_up := CASE WHEN p_shared THEN NOT v_writer_ahead ELSE ahead < p_limit END;
        IF NOT next_up THEN
            seen_epoch := v_names.epoch;
            handoff_ms := CASE WHEN v_names.prev_handoff_ms IS NOT NULL
                          THEN least(v_names.prev_handoff_ms, v_names.last_handoff_ms) END;
            since_release_ms := extract(epoch FROM clock_timestamp() - v_names.released_at)
                                * 1000;
            IF p_supersede AND v_names.newest_supersede > v_ticket THEN
                superseded_by := v_names.supersede_by;
            ELSE
                UPDATE @S@.waiters w SET beat_until = v_now + v_beat
                    WHERE w.name = p_name AND w.owner = p_owner;
            END IF;
            RETURN;
        END IF;
    END IF;

    -- Tries on one name run one at a time from here.
    SELECT * INTO v_names FROM @S@.names n WHERE n.name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO @S@.names AS n (name, max_limit) VALUES (p_name, p_limit)
            ON CONFLICT (name) DO NOTHING;
        SELECT * INTO v_names FROM @S@.names n WHERE n.name = p_name FOR UPDATE;
    END IF;
    IF p_limit > v_names.max_limit THEN
        UPDATE @S@.names n SET max_limit = p_limit WHERE n.name = p_name;
    END IF;
    seen_epoch := v_names.epoch;
    handoff_ms := CASE WHEN v_names.prev_handoff_ms IS NOT NULL
                  THEN least(v_names.prev_handoff_ms, v_names.last_handoff_ms) END;
    since_release_ms := extract(epoch FROM clock_timestamp() - v_names.released_at) * 1000;
    v_now := clock_timestamp();
    -- Leases that ran out are gone.
    DELETE FROM @S@.leases l WHERE l.name = p_name AND l.expires_at <= v_now;
    SELECT w.ticket, w.beat_until >= v_now INTO v_ticket, v_live FROM @S@.waiters w
        WHERE w.name = p_name AND w.owner = p_owner;
    v_in_line := FOUND AND v_live;
    IF FOUND AND NOT v_live THEN
        -- Its heartbeat lapsed: it left the line, and comes back at the end of it.
        DELETE FROM @S@.waiters w WHERE w.name = p_name AND w.owner = p_owner;
    END IF;
    IF NOT v_in_line THEN
        v_ticket := NULL;
    END IF;

    IF v_in_line AND p_supersede AND v_names.newest_supersede > v_ticket THEN
        superseded_by := v_names.supersede_by;
        RETURN;
    END IF;

    SELECT pl.ahead, pl.writer_ahead, pl.distance INTO ahead, v_writer_ahead, distance
        FROM @S@.place_v2(p_name, v_names.line_floor,
                          coalesce(v_ticket, 9223372036854775807), v_cap) pl;
    IF p_shared THEN
        v_can := NOT v_writer_ahead
            AND NOT EXISTS (SELECT 1 FROM @S@.leases l WHERE l.name = p_name AND NOT l.shared);
    ELSE
        SELECT array_agg(k ORDER BY k) INTO v_free FROM generate_series(0, p_limit - 1) AS k
            WHERE NOT EXISTS (SELECT 1 FROM @S@.leases l WHERE l.name = p_name AND l.slot = k);
        v_can := ahead < coalesce(array_length(v_free, 1), 0)
            AND NOT EXISTS (SELECT 1 FROM @S@.leases l WHERE l.name = p_name AND l.shared);
    END IF;

    IF v_can THEN
        -- Strictly above every earlier token, and never below the server's clock (µs).
        v_token := greatest(v_names.token + 1, (extract(epoch FROM v_now) * 1000000)::bigint);
        IF p_shared THEN
            v_slot := -1 - (v_token % 2147483646)::integer;
            WHILE EXISTS (SELECT 1 FROM @S@.leases l WHERE l.name = p_name AND l.slot = v_slot)
            LOOP
                v_slot := CASE WHEN v_slot <= -2147483647 THEN -1 ELSE v_slot - 1 END;
            END LOOP;
        ELSE
            v_slot := v_free[1];
        END IF;
        INSERT INTO @S@.leases AS l (name, slot, owner, token, holder, expires_at, shared)
            VALUES (p_name, v_slot, p_owner, v_token, p_holder,
                    clock_timestamp() + p_ttl_ms * interval '1 millisecond', p_shared)
            ON CONFLICT (name, slot) DO NOTHING;
        IF FOUND THEN
            -- Durable before the answer leaves, whatever the server's default: a crash must
            -- not take the counter back below a token already handed out. (A SET clause on
            -- the function would be undone before the commit; set_config(.., true) lasts
            -- until it.)
            PERFORM set_config('synchronous_commit', 'on', true);
            UPDATE @S@.names n SET token = v_token, taken_at = clock_timestamp()
                WHERE n.name = p_name;
            IF v_in_line THEN
                DELETE FROM @S@.waiters w WHERE w.name = p_name AND w.owner = p_owner;
                PERFORM @S@.advance_v2(p_name);
            END IF;
            taken := true;
            fence := v_token;
            row_slot := v_slot;
            RETURN;
        END IF;
    END IF;

    IF p_heartbeat_ms > 0 THEN
        IF NOT v_in_line THEN
            v_ticket := v_names.arrivals + 1;
            INSERT INTO @S@.waiters (name, owner, ticket, beat_until, shared, supersede, holder,
                                     channel)
                VALUES (p_name, p_owner, v_ticket, v_now + v_beat, p_shared, p_supersede,
                        p_holder,
                        CASE WHEN p_cookie = '' THEN ''
                             WHEN direct THEN 'lockrun_' || p_owner END);
            IF p_supersede THEN
                -- Every older --supersede waiter gives up: tell each.
                PERFORM pg_notify(w.channel, 'superseded') FROM @S@.waiters w
                    WHERE w.name = p_name AND w.supersede AND w.ticket < v_ticket
                    AND w.ticket >= v_names.line_floor AND w.channel <> '';
                UPDATE @S@.names n SET arrivals = v_ticket, newest_supersede = v_ticket,
                    supersede_by = p_holder WHERE n.name = p_name;
            ELSE
                UPDATE @S@.names n SET arrivals = v_ticket WHERE n.name = p_name;
            END IF;
        ELSE
            UPDATE @S@.waiters w SET beat_until = v_now + v_beat
                WHERE w.name = p_name AND w.owner = p_owner;
        END IF;
        next_up := CASE WHEN p_shared THEN NOT v_writer_ahead ELSE ahead < p_limit END;
        IF next_up THEN
            SELECT ceil(extract(epoch FROM min(l.expires_at) - clock_timestamp()) * 1000)::bigint
                INTO soonest_ms FROM @S@.leases l WHERE l.name = p_name;
        END IF;
    ELSE
        next_up := false;
    END IF;
END
$fn$;

-- Version 1's function, kept for older lockruns still running during an upgrade: an exclusive
-- try through version 2's rules, so they respect shared holders and the line.
CREATE OR REPLACE FUNCTION @S@.acquire_v1(
    p_name text, p_owner text, p_ttl_ms bigint, p_limit integer, p_holder text,
    p_heartbeat_ms bigint,
    OUT taken boolean, OUT token bigint, OUT slot integer, OUT place bigint,
    OUT soonest_ms bigint)
LANGUAGE sql AS $fn$
    SELECT a.taken, a.fence, a.row_slot,
           CASE WHEN a.taken THEN 0 WHEN p_heartbeat_ms > 0 THEN a.ahead ELSE -1 END::bigint,
           a.soonest_ms
    FROM @S@.acquire_v2(p_name, p_owner, p_ttl_ms, p_limit, p_holder, p_heartbeat_ms,
                        false, false, '') a
$fn$;

-- Gives a hold up, only this owner's own, and wakes whoever is next (for a shared hold: once
-- the last shared holder is gone).
CREATE OR REPLACE FUNCTION @S@.release_v2(p_name text, p_slot integer, p_owner text,
    p_legacy text, OUT released boolean)
LANGUAGE plpgsql AS $fn$
DECLARE
    v_shared boolean;
BEGIN
    PERFORM set_config('enable_bitmapscan', 'off', true),
            set_config('enable_seqscan', 'off', true);
    PERFORM 1 FROM @S@.names n WHERE n.name = p_name FOR UPDATE;
    DELETE FROM @S@.leases l WHERE l.name = p_name AND l.slot = p_slot AND l.owner = p_owner
        RETURNING l.shared INTO v_shared;
    released := FOUND;
    IF released AND NOT (v_shared AND EXISTS (SELECT 1 FROM @S@.leases l
            WHERE l.name = p_name AND l.shared AND l.expires_at > clock_timestamp())) THEN
        PERFORM @S@.wake_v2(p_name, p_legacy);
    END IF;
END
$fn$;

-- A contender that gives up leaves the line and drops any hold a try of its took (its answer
-- may have been lost), then wakes whoever is next.
CREATE OR REPLACE FUNCTION @S@.leave_v2(p_name text, p_owner text, p_legacy text,
    OUT removed integer)
LANGUAGE plpgsql AS $fn$
DECLARE
    v_holds integer;
BEGIN
    PERFORM set_config('enable_bitmapscan', 'off', true),
            set_config('enable_seqscan', 'off', true);
    PERFORM 1 FROM @S@.names n WHERE n.name = p_name FOR UPDATE;
    DELETE FROM @S@.waiters w WHERE w.name = p_name AND w.owner = p_owner;
    GET DIAGNOSTICS removed = ROW_COUNT;
    DELETE FROM @S@.leases l WHERE l.name = p_name AND l.owner = p_owner;
    GET DIAGNOSTICS v_holds = ROW_COUNT;
    removed := removed + v_holds;
    IF removed > 0 THEN
        PERFORM @S@.wake_v2(p_name, p_legacy);
    END IF;
END
$fn$;

-- Break-glass: drops every holder of a name, tells each live one on its own channel, and wakes
-- whoever is next. The token counter is untouched. Returns how many live holders were dropped.
CREATE OR REPLACE FUNCTION @S@.force_release_v2(p_name text, p_legacy text,
    OUT dropped integer)
LANGUAGE plpgsql AS $fn$
DECLARE
    v_any boolean := false;
    r record;
BEGIN
    PERFORM set_config('enable_bitmapscan', 'off', true),
            set_config('enable_seqscan', 'off', true);
    dropped := 0;
    PERFORM 1 FROM @S@.names n WHERE n.name = p_name FOR UPDATE;
    FOR r IN DELETE FROM @S@.leases l WHERE l.name = p_name
             RETURNING l.owner, l.expires_at > clock_timestamp() AS live LOOP
        v_any := true;
        IF r.live THEN
            dropped := dropped + 1;
            PERFORM pg_notify(left('lockrun_' || r.owner, 63), 'revoked');
        END IF;
    END LOOP;
    IF v_any THEN
        PERFORM @S@.wake_v2(p_name, p_legacy);
    END IF;
END
$fn$;

-- What a waiter behind a pooler polls (read-only): the name's epoch and pace (as acquire_v2
-- returns them), whether the waiter is still in line, where it stands, and whether a newer
-- --supersede waiter replaced it.
CREATE OR REPLACE FUNCTION @S@.peek_v2(p_name text, p_owner text, p_cap integer,
    OUT seen_epoch bigint, OUT in_line boolean, OUT ahead integer, OUT writer_ahead boolean,
    OUT distance bigint, OUT superseded boolean, OUT handoff_ms double precision,
    OUT since_release_ms double precision)
LANGUAGE plpgsql AS $fn$
DECLARE
    v_names record;
    v_ticket bigint;
    v_supersede boolean;
BEGIN
    PERFORM set_config('enable_bitmapscan', 'off', true),
            set_config('enable_seqscan', 'off', true);
    SELECT * INTO v_names FROM @S@.names n WHERE n.name = p_name;
    seen_epoch := v_names.epoch;
    handoff_ms := CASE WHEN v_names.prev_handoff_ms IS NOT NULL
                  THEN least(v_names.prev_handoff_ms, v_names.last_handoff_ms) END;
    since_release_ms := extract(epoch FROM clock_timestamp() - v_names.released_at) * 1000;
    SELECT w.ticket, w.supersede INTO v_ticket, v_supersede FROM @S@.waiters w
        WHERE w.name = p_name AND w.owner = p_owner AND w.beat_until >= clock_timestamp();
    in_line := FOUND;
    superseded := in_line AND v_supersede AND v_names.newest_supersede > v_ticket;
    IF in_line THEN
        SELECT pl.ahead, pl.writer_ahead, pl.distance INTO ahead, writer_ahead, distance
            FROM @S@.place_v2(p_name, v_names.line_floor, v_ticket, p_cap) pl;
    END IF;
END
$fn$;

-- Subscribes this connection to P_CHANNEL when it reached the server directly (its
-- `lockrun.session` is P_COOKIE); `listening` says whether it did. With P_SLOT, `holds` also says
-- whether P_OWNER still holds that slot of P_NAME (a forced release that came before the
-- subscription is not missed).
CREATE OR REPLACE FUNCTION @S@.subscribe_v2(p_cookie text, p_channel text, p_name text,
    p_slot integer, p_owner text, OUT listening boolean, OUT holds boolean)
LANGUAGE plpgsql AS $fn$
BEGIN
    listening := coalesce(current_setting('lockrun.session', true) = p_cookie, false);
    IF listening THEN
        EXECUTE format('LISTEN %I', p_channel);
    END IF;
    IF p_slot IS NOT NULL THEN
        holds := EXISTS (SELECT 1 FROM @S@.leases l
                         WHERE l.name = p_name AND l.slot = p_slot AND l.owner = p_owner);
    END IF;
END
$fn$;

-- --min-interval: records that P_NAME runs now, by the server's clock, unless it last ran less
-- than P_INTERVAL_US ago (a clock that went backwards counts as too soon). Durable before it
-- answers.
CREATE OR REPLACE FUNCTION @S@.claim_interval_v2(p_name text, p_interval_us bigint,
    OUT claimed boolean, OUT ago_us bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
    v_last bigint;
    v_now bigint;
BEGIN
    INSERT INTO @S@.names AS n (name) VALUES (p_name) ON CONFLICT (name) DO NOTHING;
    SELECT n.last_run_us INTO v_last FROM @S@.names n WHERE n.name = p_name FOR UPDATE;
    v_now := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
    IF v_last IS NOT NULL AND v_now - v_last < p_interval_us THEN
        claimed := false;
        ago_us := greatest(v_now - v_last, 0);
        RETURN;
    END IF;
    PERFORM set_config('synchronous_commit', 'on', true);
    UPDATE @S@.names n SET last_run_us = v_now WHERE n.name = p_name;
    claimed := true;
    ago_us := 0;
END
$fn$;
