#!/usr/bin/env bash
# bench/layers.sh — where one server process spends its CPU, by layer: `perf record` samples PID's
# stacks for SECONDS, and each sample is charged to the nearest frame, walking from the leaf towards
# the thread's root, that belongs to a named layer (wire decode, routing, RPC, shard execution,
# storage, replication, bson, runtime). An allocation, a memcpy or a syscall is so charged to the
# layer that asked for it; a sample with no named frame on its stack keeps its leaf's kind
# (`alloc/copy`, `kernel`, `other`). Multiply a layer's share by the process's CPU per operation
# (`shoal bench ... --server-pids`) for microseconds per layer (docs/benchmarks.md, "Per-operation
# cost").
#
#   bench/layers.sh PID [SECONDS]       e.g. bench/layers.sh "$(pgrep -f 'shoal shard' | head -1)" 8
#   LEAF=1 bench/layers.sh PID          the leaf function alone decides (no call graphs; cheaper)
#
# Stacks are unwound from DWARF (release builds keep debug info, not frame pointers), which costs
# the profiled process a few percent while perf runs; the frequency is kept low for that.
set -euo pipefail

PID=${1//[[:space:]]/}
SECS=${2:-8}
OUT=$(mktemp /tmp/shoal-layers.XXXXXX)
trap 'rm -f "$OUT" "$OUT.txt" "$OUT.err"' EXIT

# perf's own chatter is kept out of the report, but a failed recording says why.
record() {
  if ! perf record -o "$OUT" "$@" -p "$PID" -- sleep "$SECS" 2>"$OUT.err"; then
    echo "layers.sh: perf record of pid '$PID' failed:" >&2
    cat "$OUT.err" >&2
    exit 1
  fi
}

# The layers, nearest-first in each stack. A frame's symbol is matched in this order.
read -r -d '' LAYERS <<'AWK' || true
function layer(sym) {
  if (sym ~ /shoal_shard::repl|shoal_shard::store::apply|oplog_tail/) return "replication";
  if (sym ~ /fjall|lsm_tree|crossbeam_skiplist|shoal_shard::storage|shoal_shard::store|value_log|fdatasync|ext4|jbd2|blk_|xxh|lz4|iomap|filemap|generic_perform_write/) return "storage (store, engine, fs)";
  if (sym ~ /shoal_shard|shoal_query/) return "shard execution (exec, query, lane)";
  if (sym ~ /shoal_router::wire|shoal_router::server/) return "wire decode / encode";
  if (sym ~ /shoal_router|shoal_cluster/) return "routing, merge (router)";
  if (sym ~ /shoal_proto|h2::|hyper|tonic|tower|prost|http::|tcp_|sock_|skb|sendmsg|recvmsg|sendto|recvfrom|ip_|__netif|net_rx|loopback|inet|nf_|__dev_queue|napi/) return "rpc + network";
  if (sym ~ /bson|serde/) return "bson";
  if (sym ~ /tokio|futex|schedule|__switch|pick_next|enqueue|dequeue|wake_up|ttwu|epoll|native_sched/) return "runtime, scheduling";
  return "";
}
function leaf_kind(sym) {
  if (sym ~ /mi_|mimalloc|malloc|free|memcpy|memmove|memset|clear_page|page_fault|do_anonymous|alloc_pages|__rmqueue|release_pages/) return "alloc/copy (no named caller)";
  if (sym ~ /\[kernel|\[k\]|entry_SYSCALL|do_syscall|__x64_sys|exit_to_user/) return "kernel (no named caller)";
  return "other (no named caller)";
}
function report(samples) {
  for (l in share) printf "%6.1f %%  %s\n", 100 * share[l] / total, l | "sort -rn";
  close("sort -rn");
  if (samples) printf "%6d samples\n", total;
}
AWK

if [ -n "${LEAF:-}" ]; then
  record -F 1999
  perf report -i "$OUT" --no-children --sort sym --stdio --percent-limit 0 2>/dev/null \
    | awk '/^ +[0-9.]+%/ { print }' > "$OUT.txt"
  awk "$LAYERS"'
  {
    pct = $1; sub(/%/, "", pct);
    line = $0; sub(/^ +[0-9.]+% +/, "", line);
    l = layer(line); if (l == "") l = leaf_kind(line);
    share[l] += pct; total += pct;
  }
  END { report(0) }' "$OUT.txt"
  exit 0
fi

record -F 499 --call-graph dwarf,16384
# With only ip,sym,dso asked for, a sample is its frames, leaf first ("addr symbol (dso)"), then a
# blank line.
perf script -i "$OUT" --no-inline -F ip,sym,dso 2>/dev/null | awk "$LAYERS"'
  function close_sample() {
    if (nframes == 0) return;
    l = "";
    for (i = 1; i <= nframes && l == ""; i++) l = layer(frame[i]);
    if (l == "") l = leaf_kind(frame[1]);
    share[l]++; total++;
    nframes = 0;
  }
  /^[[:space:]]*$/ { close_sample(); next }
  { line = $0; sub(/^[[:space:]]*[0-9a-f]+ /, "", line); frame[++nframes] = line }
  END { close_sample(); report(1) }'
