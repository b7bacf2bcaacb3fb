#!/usr/bin/env bash
# Runs lockrun's whole test suite: style checks, then every unit and integration test.
# The backend tests start their own servers on free loopback ports; this script installs the server
# packages first when they are missing (as root, with apt-get), so it works on a fresh machine, and
# dynalite (the tests' DynamoDB, an npm package) into tools/dynalite/node_modules from its lock file.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || missing+=(etcd-client)
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
command -v psql >/dev/null 2>&1 || missing+=(postgresql-client)
{ command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ]; } || missing+=(mariadb-server)
command -v mariadb >/dev/null 2>&1 || missing+=(mariadb-client)
# ZooKeeper runs from Debian's jar (tests start it with java, never as a service).
[ -e /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
[ -x /usr/sbin/pgbouncer ] || command -v pgbouncer >/dev/null 2>&1 || missing+=(pgbouncer)
command -v setpriv >/dev/null 2>&1 || missing+=(util-linux)
command -v script >/dev/null 2>&1 || missing+=(bsdutils)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
# libfaketime's preload library, wherever the architecture puts it (package libfaketime).
compgen -G '/usr/lib/*/faketime/libfaketime.so.1' >/dev/null || compgen -G '/usr/lib/faketime/libfaketime.so.1' >/dev/null || missing+=(faketime)

# A download that fails once (a mirror mid-sync, a dropped connection) is tried again, a few
# seconds later, up to three times: a red run should mean a failing test, not a flaky mirror.
retry() {
  local attempt
  for attempt in 1 2 3; do
    "$@" && return 0
    [ "$attempt" = 3 ] || { echo "retrying in $((attempt * 10)) s: $*" >&2; sleep $((attempt * 10)); }
  done
  return 1
}

if ((${#missing[@]})); then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing: ${missing[*]}"
    retry apt-get update -qq
    retry env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "missing: ${missing[*]} — install them (or run this script as root on Debian/Ubuntu)" >&2
    exit 1
  fi
fi

if [ ! -x tools/dynalite/node_modules/.bin/dynalite ]; then
  echo "installing dynalite (npm ci in tools/dynalite)"
  retry npm ci --prefix tools/dynalite --no-audit --no-fund --loglevel=error
fi

cargo fmt --all -- --check
cargo clippy --locked --all-targets -- -D warnings
# One integration-test binary whose tests mostly wait on servers and timers: run 8 at a time.
cargo test --locked --all-targets -- --test-threads 8
python3 tests/soak/test_check.py
python3 tests/soak/soak.py --ci --backend all --bin target/debug/lockrun
