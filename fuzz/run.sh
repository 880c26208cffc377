#!/usr/bin/env bash
# fuzz/run.sh — AFL++ campaigns on Shoal's fuzz targets (fuzz/targets/src/lib.rs).
#
#   bash fuzz/run.sh [SECONDS] [TARGET...]    default: 60 s per target, every target
#
# Installs cargo-afl if it is missing, builds the instrumented harness (fuzz/afl), then runs
# afl-fuzz on each target starting from fuzz/corpus/<target>/, as many at once as there are
# cores. Crashes and hangs are copied to fuzz/findings/<target>/ and make the script fail: turn
# each into a regression (fuzz/regressions/<target>/<what-it-broke>) once fixed.
# CI runs `bash fuzz/run.sh 60`; a longer campaign is `bash fuzz/run.sh 3600`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

seconds=${1:-60}
shift || true
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  targets=(wire bson sasl filter update pipeline keystring)
fi

if ! cargo afl --version >/dev/null 2>&1; then
  echo "cargo-afl is missing; installing it"
  cargo install --locked cargo-afl
fi
(cd afl && cargo afl build --release --locked)
harness=afl/target/release/shoal-fuzz-afl

# Findings go nowhere near the system's crash handler, and runs need no terminal.
export AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1 AFL_QUIET=1
out=$(mktemp -d /tmp/shoal-fuzz.XXXXXX)
trap 'rm -rf "$out"' EXIT
jobs_max=$(nproc)
failed=0

run() {
  local target=$1
  SHOAL_FUZZ_TARGET=$target cargo afl fuzz -i "corpus/$target" -o "$out/$target" -V "$seconds" -- "$harness" \
    >"$out/$target.log" 2>&1 || { echo "afl-fuzz on $target failed:"; tail -20 "$out/$target.log"; return 1; }
}

pids=()
for target in "${targets[@]}"; do
  run "$target" &
  pids+=($!)
  if [[ ${#pids[@]} -ge $jobs_max ]]; then
    wait "${pids[0]}" || failed=1
    pids=("${pids[@]:1}")
  fi
done
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done

for target in "${targets[@]}"; do
  stats="$out/$target/default/fuzzer_stats"
  execs=$(awk -F: '/^execs_done/ {gsub(/ /, "", $2); print $2}' "$stats" 2>/dev/null || echo "?")
  found=0
  for kind in crashes hangs; do
    for f in "$out/$target/default/$kind"/id:*; do
      [[ -e $f ]] || continue
      mkdir -p "findings/$target"
      cp "$f" "findings/$target/$kind-$(basename "$f" | tr ':,' '__')"
      found=$((found + 1))
    done
  done
  echo "fuzz $target: $execs executions in $seconds s, $found crash(es)/hang(s)"
  if [[ $found -gt 0 ]]; then
    failed=1
  fi
done
exit $failed
