#!/usr/bin/env bash
# bench/etcd.sh — etcd 3.4 (Debian's etcd-server) for `shoal bench catalog`, on loopback only.
#
#   bench/etcd.sh install   apt-get install etcd-server etcd-client (etcd, etcdctl); needs root
#   bench/etcd.sh start     installs if needed, starts one etcd member on 127.0.0.1 in a temp data
#                           dir (client port $ETCD_PORT, default 2379; peer port +1), waits for it
#   bench/etcd.sh stop      stops it and removes its data dir
#
# `shoal bench catalog` starts its own etcd cluster (3 members on free loopback ports) from the
# `etcd` on PATH, so it only needs `install`; `start`/`stop` are for poking at etcd by hand.
# Debian's package enables an etcd systemd unit; nothing here starts it, and on machines without
# systemd it stays down.
set -euo pipefail

STATE_DIR="${TMPDIR:-/tmp}/shoal-bench-etcd"
PORT="${ETCD_PORT:-2379}"

install() {
  if command -v etcd >/dev/null && command -v etcdctl >/dev/null; then
    etcd --version | head -1
    return
  fi
  local sudo=""
  if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
  $sudo apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends etcd-server etcd-client
  etcd --version | head -1
}

start() {
  install
  if [[ -f "$STATE_DIR/pid" ]] && kill -0 "$(cat "$STATE_DIR/pid")" 2>/dev/null; then
    echo "etcd already running (pid $(cat "$STATE_DIR/pid")) on 127.0.0.1:$PORT"
    return
  fi
  rm -rf "$STATE_DIR"
  mkdir -p "$STATE_DIR"
  local client="http://127.0.0.1:$PORT" peer="http://127.0.0.1:$((PORT + 1))"
  etcd --name bench --data-dir "$STATE_DIR/data" \
    --listen-client-urls "$client" --advertise-client-urls "$client" \
    --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
    --initial-cluster "bench=$peer" --initial-cluster-state new \
    --logger zap --log-outputs stderr >"$STATE_DIR/etcd.log" 2>&1 &
  echo $! >"$STATE_DIR/pid"
  for _ in $(seq 1 100); do
    if ETCDCTL_API=3 etcdctl --endpoints="$client" --command-timeout=1s endpoint health >/dev/null 2>&1; then
      echo "etcd running (pid $(cat "$STATE_DIR/pid")) on $client; log $STATE_DIR/etcd.log"
      return
    fi
    sleep 0.1
  done
  echo "etcd did not become healthy within 10 s; see $STATE_DIR/etcd.log" >&2
  stop
  exit 1
}

stop() {
  if [[ -f "$STATE_DIR/pid" ]]; then
    local pid
    pid=$(cat "$STATE_DIR/pid")
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid"
      for _ in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
      done
      if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; fi
    fi
  fi
  rm -rf "$STATE_DIR"
  echo "etcd stopped"
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  *)
    echo "usage: $0 install|start|stop" >&2
    exit 2
    ;;
esac
