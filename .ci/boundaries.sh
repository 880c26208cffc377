#!/usr/bin/env bash
# .ci/boundaries.sh — fails when a process crate links what its boundary forbids (docs/architecture.md):
# the router links neither the Raft implementation (openraft) nor the storage engine (fjall) nor the
# shard; router and shard reach the config service only through its contract (shoal-cluster and
# shoal-proto), never by linking the config service's crate. Checked on each crate's own dependency graph (`cargo tree -p`), so
# features another workspace member turns on do not hide a violation.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

status=0
check() {
  local crate=$1 forbidden=$2 found
  found=$(cargo tree --locked -p "$crate" -e normal,build --prefix none | awk '{print $1}' | grep -xE "$forbidden" | sort -u || true)
  if [[ -n $found ]]; then
    echo "boundary violated: $crate links $(echo "$found" | tr '\n' ' ')"
    cargo tree --locked -p "$crate" -e normal -i "$(echo "$found" | head -1)" | head -20
    status=1
  else
    echo "$crate: links none of $forbidden"
  fi
}
check shoal-router 'openraft|fjall|shoal-shard|shoal-configsvr'
check shoal-shard 'openraft|shoal-configsvr'
check shoal-cluster 'openraft|fjall|shoal-configsvr|shoal-shard|shoal-router'
# The auth crate is pure: it links no server crate and no client of one.
check shoal-auth 'openraft|fjall|shoal-configsvr|shoal-shard|shoal-router|shoal-cluster'
exit $status
