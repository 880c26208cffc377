#!/usr/bin/env bash
# bench/postgres.sh — a private PostgreSQL 15 cluster (Debian 12's postgresql-15) for `shoal bench`,
# which runs YCSB against it with one JSONB row per record. Loopback only; meant to be run as root.
#
#   bench/postgres.sh install      apt-get install postgresql-15 unless /usr/lib/postgresql/15/bin/postgres
#                                  exists; stops the Debian-managed cluster (5432) if the package started it
#   bench/postgres.sh start [DIR]  installs if needed, initdb's DIR/data if missing, starts the server
#                                  and creates database `ycsb`; prints the connection URL as the last
#                                  line of stdout (progress goes to stderr), so URL=$(bench/postgres.sh start)
#   bench/postgres.sh stop [DIR]   fast shutdown if running; keeps the data
#   bench/postgres.sh url          prints the connection URL
#
# DIR defaults to $SHOAL_PG_DIR or /tmp/shoal-bench-pg; it holds data/ (PGDATA), postgres.log and
# the unix socket. The port is $SHOAL_PG_PORT or 55432, on 127.0.0.1 only. URL:
# postgres://postgres@127.0.0.1:55432/ycsb (trust auth, loopback and socket, user postgres only).
# `start` and `stop` are idempotent; `stop` then `start` keeps the data; `rm -rf DIR` resets it.
#
# initdb, pg_ctl and postgres refuse to run as root, so as root they run as the `postgres` system
# user (created by the package; created here if absent) via runuser, and DIR is chown'ed to it: its
# parent directories must be searchable by that user (/tmp is). Run as another user, they run as
# that user (then `install` needs root). Nothing here uses systemd.
set -euo pipefail

PG_BIN=/usr/lib/postgresql/15/bin
PG_DIR=$(realpath -m -- "${2:-${SHOAL_PG_DIR:-/tmp/shoal-bench-pg}}")
PG_PORT="${SHOAL_PG_PORT:-55432}"
PG_DATA="$PG_DIR/data"
PG_LOG="$PG_DIR/postgres.log"
URL="postgres://postgres@127.0.0.1:$PG_PORT/ycsb"

log() { echo "postgres.sh: $*" >&2; }

# Runs a PostgreSQL server program as the `postgres` user when we are root, from / (a cwd that user
# cannot enter, such as /root, breaks initdb), in the C locale (the machine's may not be generated).
as_pg() {
  if [[ $(id -u) -eq 0 ]]; then
    (cd / && LC_ALL=C LANG=C runuser -u postgres -- "$@")
  else
    (cd / && LC_ALL=C LANG=C "$@")
  fi
}

install() {
  if [[ -x "$PG_BIN/postgres" ]]; then
    log "PostgreSQL 15 already installed: $("$PG_BIN/postgres" --version)"
    return
  fi
  if [[ $(id -u) -ne 0 ]]; then
    log "installing postgresql-15 needs root"
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  # A fresh machine (or container image) may have no or stale package lists: update only if needed.
  if ! apt-get install -y --no-install-recommends postgresql-15 >&2; then
    apt-get update >&2
    apt-get install -y --no-install-recommends postgresql-15 >&2
  fi
  # The package creates a cluster "15/main" on port 5432 and, where an init system lets it, starts
  # it. Ours runs on its own port, but don't leave that one running and using memory.
  if command -v pg_ctlcluster >/dev/null; then
    pg_ctlcluster 15 main stop >/dev/null 2>&1 || true
  fi
  log "installed: $("$PG_BIN/postgres" --version)"
}

ensure_user() {
  [[ $(id -u) -eq 0 ]] || return 0
  if ! id -u postgres >/dev/null 2>&1; then
    useradd --system --user-group --home-dir /var/lib/postgresql --no-create-home \
      --shell /usr/sbin/nologin postgres
  fi
}

running() {
  [[ -f "$PG_DATA/PG_VERSION" ]] && as_pg "$PG_BIN/pg_ctl" status -D "$PG_DATA" >/dev/null 2>&1
}

# Shared buffers: 25% of RAM, at most 1 GiB, at least 128 MiB.
shared_buffers_mb() {
  local kb mb
  kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
  mb=$((kb / 1024 / 4))
  if ((mb > 1024)); then mb=1024; fi
  if ((mb < 128)); then mb=128; fi
  echo "$mb"
}

init_cluster() {
  mkdir -p "$PG_DIR"
  if [[ $(id -u) -eq 0 ]]; then chown postgres: "$PG_DIR"; fi
  chmod 700 "$PG_DIR"
  if ! as_pg test -w "$PG_DIR"; then
    log "$PG_DIR is not writable by the postgres user (are its parent directories searchable by it?)"
    exit 1
  fi
  [[ -f "$PG_DATA/PG_VERSION" ]] && return
  log "initdb $PG_DATA"
  if ! as_pg "$PG_BIN/initdb" -D "$PG_DATA" -U postgres --encoding=UTF8 --locale=C \
    --auth-local=trust --auth-host=trust >"$PG_DIR/initdb.log" 2>&1; then
    cat "$PG_DIR/initdb.log" >&2
    rm -rf "$PG_DATA"
    exit 1
  fi
  # Only user postgres, only over the socket and 127.0.0.1, no password.
  cat >"$PG_DATA/pg_hba.conf" <<'EOF'
# TYPE  DATABASE  USER      ADDRESS        METHOD
local   all       postgres                 trust
host    all       postgres  127.0.0.1/32   trust
EOF
  echo "include_if_exists = 'shoal-bench.conf'" >>"$PG_DATA/postgresql.conf"
  if [[ $(id -u) -eq 0 ]]; then chown postgres: "$PG_DATA/pg_hba.conf"; fi
}

# Rewritten at every start so that SHOAL_PG_PORT / DIR changes take effect.
write_conf() {
  cat >"$PG_DATA/shoal-bench.conf" <<EOF
# Written by bench/postgres.sh at each start; overrides postgresql.conf.
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$PG_DIR'
max_connections = 400
shared_buffers = $(shared_buffers_mb)MB
# Everything else stays at PostgreSQL's defaults, which keep full durability: fsync = on,
# synchronous_commit = on (a commit returns after its WAL is flushed), full_page_writes = on,
# wal_sync_method = fdatasync. The benchmark compares against that, so don't relax them here.
EOF
  if [[ $(id -u) -eq 0 ]]; then chown postgres: "$PG_DATA/shoal-bench.conf"; fi
}

wait_ready() {
  local deadline=$((SECONDS + 30))
  until "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -d postgres -U postgres; do
    if ((SECONDS >= deadline)); then
      log "PostgreSQL did not become ready on 127.0.0.1:$PG_PORT within 30 s; tail of $PG_LOG:"
      tail -n 30 "$PG_LOG" >&2 || true
      exit 1
    fi
    sleep 0.2
  done
}

psql_admin() {
  "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres "$@"
}

start() {
  install
  ensure_user
  init_cluster
  if running; then
    log "already running (data $PG_DATA, log $PG_LOG)"
  else
    write_conf
    log "starting on 127.0.0.1:$PG_PORT (data $PG_DATA, log $PG_LOG)"
    # -w -t 30: pg_ctl waits (bounded) until the server accepts connections or has exited.
    if ! as_pg "$PG_BIN/pg_ctl" start -w -t 30 -D "$PG_DATA" -l "$PG_LOG" >/dev/null; then
      log "pg_ctl start failed (it waits up to 30 s); tail of $PG_LOG:"
      tail -n 30 "$PG_LOG" >&2 || true
      exit 1
    fi
  fi
  wait_ready
  if [[ -z $(psql_admin -tA -c "SELECT 1 FROM pg_database WHERE datname = 'ycsb'") ]]; then
    psql_admin -c "CREATE DATABASE ycsb"
    log "created database ycsb"
  fi
  echo "$URL"
}

stop() {
  if running; then
    as_pg "$PG_BIN/pg_ctl" stop -D "$PG_DATA" -m fast -w -t 60 >/dev/null
    log "stopped (data kept in $PG_DATA)"
  else
    log "not running"
  fi
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  url) echo "$URL" ;;
  *)
    echo "usage: $0 install | start [DIR] | stop [DIR] | url" >&2
    exit 2
    ;;
esac
