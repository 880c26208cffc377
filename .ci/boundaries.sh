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
# Every channel between the cluster's processes is opened by shoal_cluster::net::{channel,
# channel_now, connect_lazy} and accepted by shoal_cluster::net::incoming, which authenticate the
# peer (clusterAuthMode); a server crate that dials or serves tonic directly would skip that.
direct=$(grep -rnE '\.connect_lazy\(\)|\.connect\(\)\.await|Client::connect\(|TcpIncoming|\.serve\(' \
  --include=*.rs router/src shard/src configsvr/src deploy/src || true)
if [[ -n $direct ]]; then
  echo "channels must go through shoal_cluster::net:"
  echo "$direct"
  status=1
else
  echo "server crates open and accept channels only through shoal_cluster::net"
fi
exit $status
