#!/usr/bin/env bash
# Alternates sluice binaries serving the Envoy RLS on the memory store and
# prints, for each in turn, the calls a `sluice bench` run got answered and
# the server's CPU time per call (user+system from /proc): an A/B of what a
# change costs the server per call, with the machine's drift falling on
# every binary alike.
#
#   scripts/ab-cpu.sh BIN_A BIN_B [BIN...]
#
# ROUNDS (3) rounds; each serves `--config examples/config` plus
# SERVE_FLAGS (say "--grpc-server grpc-go"), warms up for 1 s, then runs
# `sluice bench --descriptors DESCRIPTORS (1) --concurrency CONCURRENCY (16)
# --duration DURATION (5s)` with the first binary as the load generator.
# Pair each round's figures to compare: a VM's drift moves whole rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: $0 BIN_A BIN_B [BIN...]" >&2; exit 2; }
rounds=${ROUNDS:-3} d=${DESCRIPTORS:-1} c=${CONCURRENCY:-16} dur=${DURATION:-5s}
loadgen=$1 tck=$(getconf CLK_TCK)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
for r in $(seq 1 "$rounds"); do
  for bin in "$@"; do
    grpc=$(free_port) http=$(free_port)
    # shellcheck disable=SC2086 # SERVE_FLAGS is a list of flags
    "$bin" serve --config examples/config --grpc-addr "127.0.0.1:$grpc" --http-addr "127.0.0.1:$http" \
      --debug-addr off ${SERVE_FLAGS:-} 2>/dev/null &
    pid=$!
    for _ in $(seq 50); do
      if (exec 3<>"/dev/tcp/127.0.0.1/$grpc") 2>/dev/null; then break; fi
      sleep 0.1
    done
    "$loadgen" bench --addr "127.0.0.1:$grpc" --descriptors "$d" --concurrency "$c" --duration 1s --warmup 0s >/dev/null 2>&1
    t0=$(cpu_ticks "$pid")
    out=$("$loadgen" bench --addr "127.0.0.1:$grpc" --descriptors "$d" --concurrency "$c" --duration "$dur" --warmup 0s 2>&1)
    t1=$(cpu_ticks "$pid")
    calls=$(echo "$out" | grep -oE ' calls=[0-9]+' | grep -oE '[0-9]+' || echo 0)
    echo "round $r $bin calls=$calls cpu_us_per_call=$(awk -v t="$((t1 - t0))" -v k="$tck" -v n="${calls:-0}" \
      'BEGIN {printf "%.2f", (n > 0 ? t / k * 1e6 / n : 0)}')"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
  done
done
