#!/usr/bin/env bash
# bench/layers.sh — where one server process spends its CPU, by layer: samples `perf record` takes
# of PID for SECONDS (no call graphs: each sample counts for the function it landed in), grouped by
# the symbol's crate or kernel subsystem. Multiply a layer's share by the process's CPU per
# operation (`shoal bench ... --server-pids`) for microseconds per layer (docs/benchmarks.md,
# "Per-operation cost").
#
#   bench/layers.sh PID [SECONDS]       e.g. bench/layers.sh "$(pgrep -f 'shoal shard' | head -1)" 8
#
# Attribution is by the leaf function, so it is approximate where a leaf is shared: a memcpy or an
# allocator call is counted as `alloc/copy` whoever called it, a kernel lock as `kernel other`.
set -euo pipefail

PID=$1
SECS=${2:-8}
OUT=$(mktemp /tmp/shoal-layers.XXXXXX)
trap 'rm -f "$OUT" "$OUT.txt"' EXIT
perf record -q -F 1999 -p "$PID" -o "$OUT" -- sleep "$SECS" 2>/dev/null
perf report -i "$OUT" --no-children --sort sym --stdio --percent-limit 0 2>/dev/null \
  | awk '/^ +[0-9.]+%/ { print }' > "$OUT.txt"

awk '
function layer(sym) {
  if (sym ~ /fjall|lsm_tree|crossbeam_skiplist|value_log|fdatasync|ext4|jbd2|blk_|xxh|lz4|file_write|iomap|filemap|generic_perform_write/) return "storage engine";
  if (sym ~ /h2::|hyper|tonic|tower|prost|http::|tcp_|sock|skb|sendmsg|recvmsg|sendto|recvfrom|ip_|__netif|net_rx|loopback|inet|nf_|__dev_queue|napi/) return "rpc + network";
  if (sym ~ /shoal_router|shoal_wire/) return "router logic (wire, routing, merge)";
  if (sym ~ /shoal_shard|shoal_query|shoal_exec/) return "shard logic (exec, query, store)";
  if (sym ~ /bson|serde/) return "bson";
  if (sym ~ /tokio|futex|schedule|switch|pick_next|enqueue|dequeue|wake_up|ttwu|update_curr|select_task_rq|update_load|psi_|epoll|syscall|entry_SYSCALL|do_syscall|exit_to_user|native_sched|raw_spin|__x64_sys/) return "runtime, scheduling, syscalls";
  if (sym ~ /mi_|mimalloc|malloc|free|memcpy|memmove|memset|clear_page|page_fault|do_anonymous|alloc_pages|__rmqueue|release_pages/) return "alloc/copy";
  if (sym ~ /\[k\]/) return "kernel other";
  return "other user";
}
{
  pct = $1; sub(/%/, "", pct);
  line = $0; sub(/^ +[0-9.]+% +/, "", line);
  share[layer(line)] += pct; total += pct;
}
END {
  for (l in share) printf "%6.1f %%  %s\n", share[l], l | "sort -rn";
  close("sort -rn");
  printf "%6.1f %%  (sampled)\n", total;
}' "$OUT.txt"
