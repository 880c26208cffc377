#!/usr/bin/env bash
# bench/matrix.sh — the YCSB matrix of docs/benchmarks.md in one command: builds `shoal` (release),
# starts PostgreSQL 15 (bench/postgres.sh) and the default `shoal up` cluster on loopback, each with
# a fresh data dir, runs `shoal bench matrix` against both, and stops both afterwards.
#
#   bench/matrix.sh [OUT_DIR] [extra `shoal bench matrix` flags...]
#
# OUT_DIR (default bench-results/matrix) receives report.md, results.json and the PNG charts.
# Example, a quick smaller grid:  bench/matrix.sh /tmp/m --sizes 256 --threads 64 --max-seconds 5
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${1:-bench-results/matrix}
shift || true

WORK=$(mktemp -d /tmp/shoal-matrix.XXXXXX)
chmod 755 "$WORK" # the postgres user must reach $WORK/pg
export SHOAL_PG_DIR="$WORK/pg"
UP_PID=

cleanup() {
  if [[ -n $UP_PID ]] && kill -0 "$UP_PID" 2>/dev/null; then
    kill -INT "$UP_PID" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$UP_PID" 2>/dev/null || break; sleep 0.2; done
  fi
  bash bench/postgres.sh stop "$SHOAL_PG_DIR" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

cargo build --release --locked -p shoal
PG_URL=$(bash bench/postgres.sh start "$SHOAL_PG_DIR" | tail -n 1)

# The default local cluster (deploy/local.yaml), exactly what `cargo run --release -- up` starts.
target/release/shoal up --data-dir "$WORK/shoal" > "$WORK/up.log" 2>&1 &
UP_PID=$!
for _ in $(seq 1 300); do
  grep -q '^SHOAL_READY cluster' "$WORK/up.log" && break
  kill -0 "$UP_PID" 2>/dev/null || { cat "$WORK/up.log"; exit 1; }
  sleep 0.2
done
grep -q '^SHOAL_READY cluster' "$WORK/up.log" || { echo "shoal up did not become ready"; tail -n 40 "$WORK/up.log"; exit 1; }
ADDR=$(sed -n 's/^SHOAL_READY cluster //p' "$WORK/up.log")

# Server CPU per operation: `shoal up` with the processes it supervises, the postmaster with its
# backends (the first line of postmaster.pid).
PG_PID=$(head -n 1 "$SHOAL_PG_DIR/data/postmaster.pid" 2>/dev/null || true)
target/release/shoal bench matrix --shoal-uri "mongodb://$ADDR/ycsb" --postgres-uri "$PG_URL" --out "$OUT" \
  --shoal-pids "$UP_PID" ${PG_PID:+--postgres-pids "$PG_PID"} "$@"
