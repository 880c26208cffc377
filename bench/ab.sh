#!/usr/bin/env bash
# bench/ab.sh — before/after for a server change: the same YCSB load and mixes against the default
# `shoal up` cluster run by two `shoal` binaries, alternating A B A B ... on this machine in one run,
# with one client binary for both (so only the servers differ). Prints each phase's throughput and
# server CPU per operation (every process `shoal up` started), and the B/A ratios of the medians.
#
#   bench/ab.sh A_BIN B_BIN [ROUNDS] [extra -p key=value flags...]
#   e.g. cp target/release/shoal /tmp/a; <change>; cargo build --release -p shoal
#        bench/ab.sh /tmp/a target/release/shoal 3 -p fieldlength=250
#   SHOAL_AB_SPEC=bench/specs/2x1.yaml bench/ab.sh ... runs another cluster spec than the default.
#   B_BIN `postgres`: B is PostgreSQL 15 (bench/postgres.sh, fresh data dir, synchronous_commit on)
#   with the same client, workloads and CPU accounting (the postmaster's tree) — Shoal beside
#   PostgreSQL, interleaved in one run.
set -euo pipefail

PG_SH="$(dirname "${BASH_SOURCE[0]}")/postgres.sh"
A=$(realpath "$1")
if [[ $2 == postgres ]]; then B=postgres; else B=$(realpath "$2"); fi
ROUNDS=${3:-3}
shift 3 || shift $#
CLIENT=$A
COMMON=(-p recordcount=50000 -p threadcount=64 -p fieldcount=8 -p fieldlength=250 "$@")
WORK=$(mktemp -d /tmp/shoal-ab.XXXXXX)
UP_PID=

stop_cluster() {
  if [[ -n $UP_PID ]] && kill -0 "$UP_PID" 2>/dev/null; then
    kill -INT "$UP_PID"
    for _ in $(seq 1 150); do kill -0 "$UP_PID" 2>/dev/null || break; sleep 0.2; done
  fi
  UP_PID=
}
PG_RUNNING=
trap 'stop_cluster; [[ -z $PG_RUNNING ]] || bash "$PG_SH" stop "$PG_RUNNING" >/dev/null 2>&1; rm -rf "$WORK"' EXIT

# One round against PostgreSQL, as `round` below does against a cluster.
pg_round() {
  local label=$1 dir="$WORK/pg-$2"
  mkdir -p "$dir" && chmod 755 "$WORK" "$dir"
  local url out pid
  PG_RUNNING=$dir
  url=$(bash "$PG_SH" start "$dir" 2>"$dir.log" | tail -n 1)
  pid=$(head -n 1 "$dir/data/postmaster.pid")
  out=$("$CLIENT" bench load --uri "$url" --fresh "${COMMON[@]}" --server-pids "$pid")
  echo "$label load $(figures "$out")" | tee -a "$WORK/results"
  for mix in "50/50 0.5 0.5" "80/20 0.8 0.2"; do
    set -- $mix
    out=$("$CLIENT" bench run --uri "$url" "${COMMON[@]}" -p requestdistribution=zipfian \
      -p operationcount=100000000 -p maxexecutiontime=15 -p readproportion="$2" -p updateproportion="$3" \
      --server-pids "$pid")
    echo "$label $1 $(figures "$out")" | tee -a "$WORK/results"
  done
  bash "$PG_SH" stop "$dir" >/dev/null 2>&1
  PG_RUNNING=
}

# "ops/s server-µs/op" from a bench report.
figures() {
  local tp cpu
  tp=$(sed -n 's/^\[OVERALL\], Throughput(ops\/sec), //p' <<<"$1")
  cpu=$(sed -n 's/^\[OVERALL\], ServerCpuPerOp(us), //p' <<<"$1")
  echo "$tp ${cpu:-0}"
}

# One round on one binary: fresh cluster, load, 50/50, 80/20; appends "label phase ops/s" lines.
round() {
  local label=$1 bin=$2 dir="$WORK/$1-$3"
  "$bin" up ${SHOAL_AB_SPEC:+-f "$SHOAL_AB_SPEC"} --data-dir "$dir" > "$dir.log" 2>&1 &
  UP_PID=$!
  for _ in $(seq 1 300); do grep -q '^SHOAL_READY cluster' "$dir.log" && break; sleep 0.2; done
  grep -q '^SHOAL_READY cluster' "$dir.log" || { tail -n 30 "$dir.log"; exit 1; }
  local out
  out=$("$CLIENT" bench load --fresh "${COMMON[@]}" --server-pids "$UP_PID")
  echo "$label load $(figures "$out")" | tee -a "$WORK/results"
  for mix in "50/50 0.5 0.5" "80/20 0.8 0.2"; do
    set -- $mix
    out=$("$CLIENT" bench run "${COMMON[@]}" -p requestdistribution=zipfian -p operationcount=100000000 \
      -p maxexecutiontime=15 -p readproportion="$2" -p updateproportion="$3" --server-pids "$UP_PID")
    echo "$label $1 $(figures "$out")" | tee -a "$WORK/results"
  done
  stop_cluster
}

for r in $(seq 1 "$ROUNDS"); do
  round A "$A" "$r"
  if [[ $B == postgres ]]; then pg_round B "$r"; else round B "$B" "$r"; fi
done

python3 - "$WORK/results" <<'PY'
import sys, statistics, collections
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    label, phase, tp, cpu = line.split()
    runs[(label, phase)].append((float(tp), float(cpu)))
print(f"{'phase':<8} {'A ops/s':>9} {'B ops/s':>9} {'B/A':>6} {'A µs/op':>8} {'B µs/op':>8} {'B/A':>6}   runs A | B")
for phase in ["load", "50/50", "80/20"]:
    a, b = runs[("A", phase)], runs[("B", phase)]
    ta, tb = statistics.median(x[0] for x in a), statistics.median(x[0] for x in b)
    ca, cb = statistics.median(x[1] for x in a), statistics.median(x[1] for x in b)
    print(f"{phase:<8} {ta:>9.0f} {tb:>9.0f} {tb / ta:>5.2f}x {ca:>8.1f} {cb:>8.1f} {cb / max(ca, 1e-9):>5.2f}x   "
          f"{' '.join(f'{x[0]:.0f}' for x in a)} | {' '.join(f'{x[0]:.0f}' for x in b)}")
PY
