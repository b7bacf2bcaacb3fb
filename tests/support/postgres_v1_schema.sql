-- Version 1 of lockrun's PostgreSQL schema, as the previous release created it (schema "lockrun"),
-- for the test that migrates it.
SELECT pg_advisory_xact_lock(4242);
CREATE SCHEMA IF NOT EXISTS lockrun;
CREATE TABLE IF NOT EXISTS lockrun.names (
    name text PRIMARY KEY,
    token bigint NOT NULL DEFAULT 0,
    max_limit integer NOT NULL DEFAULT 1,
    arrivals bigint NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS lockrun.leases (
    name text NOT NULL,
    slot integer NOT NULL,
    owner text NOT NULL,
    token bigint NOT NULL,
    holder text NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (name, slot)
);
CREATE TABLE IF NOT EXISTS lockrun.waiters (
    name text NOT NULL,
    owner text NOT NULL,
    ticket bigint NOT NULL,
    beat_until timestamptz NOT NULL,
    PRIMARY KEY (name, owner)
);
CREATE OR REPLACE FUNCTION lockrun.acquire_v1(
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
    INSERT INTO lockrun.names AS n (name, max_limit) VALUES (p_name, p_limit)
        ON CONFLICT (name) DO UPDATE SET max_limit = greatest(n.max_limit, excluded.max_limit)
        RETURNING n.token INTO v_last;
    DELETE FROM lockrun.leases l WHERE l.name = p_name AND l.expires_at <= clock_timestamp();
    DELETE FROM lockrun.waiters w WHERE w.name = p_name AND w.beat_until < clock_timestamp();
    SELECT array_agg(k ORDER BY k) INTO v_free FROM generate_series(0, p_limit - 1) AS k
        WHERE NOT EXISTS (SELECT 1 FROM lockrun.leases l WHERE l.name = p_name AND l.slot = k);
    SELECT w.ticket INTO v_ticket FROM lockrun.waiters w
        WHERE w.name = p_name AND w.owner = p_owner;
    -- First come, first served: only the first (free slots) in line may take one.
    SELECT count(*) INTO place FROM lockrun.waiters w
        WHERE w.name = p_name AND (v_ticket IS NULL OR w.ticket < v_ticket);
    IF place < coalesce(array_length(v_free, 1), 0) THEN
        taken := true;
        slot := v_free[1];
        token := v_last + 1;
        UPDATE lockrun.names n SET token = v_last + 1 WHERE n.name = p_name;
        INSERT INTO lockrun.leases (name, slot, owner, token, holder, expires_at)
            VALUES (p_name, v_free[1], p_owner, v_last + 1, p_holder,
                    clock_timestamp() + p_ttl_ms * interval '1 millisecond');
        DELETE FROM lockrun.waiters w WHERE w.name = p_name AND w.owner = p_owner;
        RETURN;
    END IF;
    taken := false;
    IF p_heartbeat_ms > 0 THEN
        IF v_ticket IS NULL THEN
            UPDATE lockrun.names n SET arrivals = n.arrivals + 1 WHERE n.name = p_name
                RETURNING n.arrivals INTO v_ticket;
            INSERT INTO lockrun.waiters (name, owner, ticket, beat_until)
                VALUES (p_name, p_owner, v_ticket,
                        clock_timestamp() + p_heartbeat_ms * interval '1 millisecond');
        ELSE
            UPDATE lockrun.waiters w
                SET beat_until = clock_timestamp() + p_heartbeat_ms * interval '1 millisecond'
                WHERE w.name = p_name AND w.owner = p_owner;
        END IF;
    ELSE
        place := -1;
    END IF;
    SELECT ceil(extract(epoch FROM min(l.expires_at) - clock_timestamp()) * 1000)::bigint
        INTO soonest_ms FROM lockrun.leases l WHERE l.name = p_name;
END
$fn$;
