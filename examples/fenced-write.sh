#!/bin/sh
# A fenced write: store VALUE in the database only if no holder with a newer fencing token has
# written since. Run it under lockrun, so $FENCING_TOKEN is set:
#
#   lockrun --backend postgres://lock-db/app --name nightly -- \
#       examples/fenced-write.sh postgres://app-db/app "report of $(date +%F)"
#
# A holder that was paused past its lease (VM pause, SIGSTOP, a long GC) may wake up and write
# after another holder took over; the check `fence_token <= $FENCING_TOKEN`, done by the database
# in the same statement as the write, turns that stale write into a no-op, and this script then
# exits 3. The database URL is a psql connection string (its password is best kept in PGPASSWORD
# or ~/.pgpass, not on the command line). The demo table `fenced_demo` is created if missing.
set -eu

if [ $# -ne 2 ] || [ -z "${FENCING_TOKEN:-}" ]; then
    echo "usage: FENCING_TOKEN=N $0 DATABASE_URL VALUE  (normally run under lockrun)" >&2
    exit 2
fi
db=$1
value=$2

updated=$(psql "$db" -X -q -A -t -v ON_ERROR_STOP=1 \
    -v token="$FENCING_TOKEN" -v value="$value" <<'SQL'
CREATE TABLE IF NOT EXISTS fenced_demo (
    id integer PRIMARY KEY,
    value text,
    fence_token bigint NOT NULL
);
INSERT INTO fenced_demo (id, value, fence_token) VALUES (1, NULL, 0) ON CONFLICT (id) DO NOTHING;
WITH written AS (
    UPDATE fenced_demo SET value = :'value', fence_token = :'token'::bigint
     WHERE id = 1 AND fence_token <= :'token'::bigint
    RETURNING 1)
SELECT count(*) FROM written;
SQL
)

if [ "$updated" != "1" ]; then
    echo "fenced-write: rejected: fencing token $FENCING_TOKEN is older than the last writer's" >&2
    exit 3
fi
echo "fenced-write: stored with fencing token $FENCING_TOKEN" >&2
