#!/usr/bin/env bash
# bench/security.sh — what security costs: the same YCSB load and 80/20 mix through the router of
# the default cluster shape, plain (A) and with authorization, cluster key file and requireTLS on
# the client port (B, the driver authenticating with SCRAM-SHA-256 over TLS), alternating A B A B
# on this machine in one run with one binary. Prints each phase's throughput and B/A.
#
#   bench/security.sh [BIN] [ROUNDS] [extra -p key=value flags...]     (default: target/release/shoal, 3)
set -euo pipefail

BIN=$(realpath "${1:-target/release/shoal}")
ROUNDS=${2:-3}
shift 2 || shift $#
COMMON=(-p recordcount=50000 -p threadcount=64 -p fieldcount=8 -p fieldlength=250 "$@")
WORK=$(mktemp -d /tmp/shoal-secbench.XXXXXX)
UP_PID=

stop_cluster() {
  if [[ -n $UP_PID ]] && kill -0 "$UP_PID" 2>/dev/null; then
    kill -INT "$UP_PID"
    for _ in $(seq 1 150); do kill -0 "$UP_PID" 2>/dev/null || break; sleep 0.2; done
  fi
  UP_PID=
}
trap 'stop_cluster; rm -rf "$WORK"' EXIT

# The built-in local spec, plus the security sections for B.
"$BIN" up --help >/dev/null
sed -n '/^name:/,$p' deploy/local.yaml > "$WORK/plain.yaml"
cp "$WORK/plain.yaml" "$WORK/secure.yaml"
printf 'security:\n  authorization: enabled\nnet:\n  tls:\n    mode: requireTLS\n' >> "$WORK/secure.yaml"

round() {
  local label=$1 spec=$2 dir="$WORK/$1-$3"
  "$BIN" up -f "$spec" --data-dir "$dir" > "$dir.log" 2>&1 &
  UP_PID=$!
  for _ in $(seq 1 300); do grep -q '^SHOAL_READY cluster' "$dir.log" && break; sleep 0.2; done
  grep -q '^SHOAL_READY cluster' "$dir.log" || { tail -n 30 "$dir.log"; exit 1; }
  local uri="mongodb://127.0.0.1:27017/"
  if [[ $label == B ]]; then
    local tls="tls=true&tlsCAFile=$dir/pki/ca.pem"
    python3 - "$uri?$tls" <<'PY'
import sys, pymongo
pymongo.MongoClient(sys.argv[1]).admin.command("createUser", "bench", pwd="bench-password", roles=["root"])
PY
    uri="mongodb://bench:bench-password@127.0.0.1:27017/?$tls"
  fi
  local tp
  tp=$("$BIN" bench load --uri "$uri" --fresh "${COMMON[@]}" | sed -n 's/^\[OVERALL\], Throughput(ops\/sec), //p')
  echo "$label load $tp" | tee -a "$WORK/results"
  tp=$("$BIN" bench run --uri "$uri" "${COMMON[@]}" -p requestdistribution=zipfian -p operationcount=100000000 \
    -p maxexecutiontime=15 -p readproportion=0.8 -p updateproportion=0.2 |
    sed -n 's/^\[OVERALL\], Throughput(ops\/sec), //p')
  echo "$label 80/20 $tp" | tee -a "$WORK/results"
  stop_cluster
}

for r in $(seq 1 "$ROUNDS"); do
  round A "$WORK/plain.yaml" "$r"
  round B "$WORK/secure.yaml" "$r"
done

python3 - "$WORK/results" <<'PY'
import sys, statistics, collections
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    label, phase, tp = line.split()
    runs[(label, phase)].append(float(tp))
print(f"{'phase':<8} {'plain':>10} {'secured':>10} {'B/A':>6}   runs A | B")
for phase in ["load", "80/20"]:
    a, b = runs[("A", phase)], runs[("B", phase)]
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"{phase:<8} {ma:>10.0f} {mb:>10.0f} {mb / ma:>5.2f}x   {' '.join(f'{x:.0f}' for x in a)} | {' '.join(f'{x:.0f}' for x in b)}")
PY
