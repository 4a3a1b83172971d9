#!/usr/bin/env bash
# Measures the Envoy RLS API over gRPC on loopback, driven by `sluice bench`:
# Sluice with the memory store; Sluice with Redis (the default, fixed
# windows counted with pipelined INCRBY+EXPIRE); Sluice with Redis and
# windows counted by the Lua script; and, when ENVOY_RATELIMIT_BIN names an
# envoyproxy/ratelimit binary, envoyproxy/ratelimit on the same Redis. Each
# for 1 and 5 descriptors per request and 16 and 64 concurrent callers.
#
# One line per run: calls/s; latency percentiles; the server's and Redis's
# CPU time per call (user+system from /proc: the load generator shares the
# machine, so these are the fairest measures of each process's own cost);
# and from INFO commandstats the commands clients sent per call
# (client_cmds: one EVALSHA, or the pipelined INCRBY/EXPIRE of one round
# trip) and all commands executed per call, script-internal ones included
# (all_cmds).
#
#   scripts/bench-rls.sh                      # Sluice only
#   ENVOY_RATELIMIT_BIN=/path/to/ratelimit scripts/bench-rls.sh
#
# Environment: DURATION (default 10s), REDIS_PORT (default 26379),
# BENCH_FLAGS (extra flags for `sluice bench`, e.g. "--client grpc"), and
# SERVER_CPUS / LOAD_CPUS: when both are set (e.g. SERVER_CPUS=1
# LOAD_CPUS=0), each server runs pinned to SERVER_CPUS and Redis and the
# load generator to LOAD_CPUS (taskset -c), so that the server under test
# has cores of its own, as in a deployment.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
REDIS_PORT=${REDIS_PORT:-26379}
BENCH_FLAGS=${BENCH_FLAGS:-}
server_pin=() load_pin=()
if [ -n "${SERVER_CPUS:-}" ] && [ -n "${LOAD_CPUS:-}" ]; then
  server_pin=(taskset -c "$SERVER_CPUS")
  load_pin=(taskset -c "$LOAD_CPUS")
fi
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/sluice" ./cmd/sluice
${load_pin[@]+"${load_pin[@]}"} redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no >"$work/redis.log" 2>&1 &
pids+=($!)
redis_pid=$!
until redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1; do sleep 0.1; done

wait_port() { until (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; do sleep 0.1; done; }

commands() { # "client all": command calls so far, sent by clients and in total
  redis-cli -p "$REDIS_PORT" info commandstats | tr -d '\r' | awk -F'[:=,]' '
    /^cmdstat_/ && $1 !~ /cmdstat_(info|config|flushall|ping|client|hello|script)$/ {
      all += $3
      if ($1 ~ /cmdstat_(evalsha|eval)$/) scripts += $3
      if ($1 ~ /cmdstat_(incrby|expire|get)$/) plain += $3
    }
    # Commands a script runs are counted too: when scripts ran, only the
    # script calls came from clients.
    END {print (scripts > 0 ? scripts : plain)+0, all+0}'
}

cpu_ms() { # CPU time of a process so far, in milliseconds
  awk -v hz="$(getconf CLK_TCK)" '{printf "%d", ($14 + $15) * 1000 / hz}' "/proc/$1/stat"
}

run() { # name addr pid
  local name=$1 addr=$2 pid=$3
  for d in 1 5; do
    for c in 16 64; do
      redis-cli -p "$REDIS_PORT" flushall >/dev/null
      redis-cli -p "$REDIS_PORT" config resetstat >/dev/null
      local before after line calls
      before=$(commands)
      local cpu0 cpu1 rcpu0 rcpu1
      cpu0=$(cpu_ms "$pid")
      rcpu0=$(cpu_ms "$redis_pid")
      # shellcheck disable=SC2086 # BENCH_FLAGS is a list of flags
      line=$(${load_pin[@]+"${load_pin[@]}"} "$work/sluice" bench --addr "$addr" --descriptors "$d" --concurrency "$c" --duration "$DURATION" --warmup 0s $BENCH_FLAGS)
      after=$(commands)
      cpu1=$(cpu_ms "$pid")
      rcpu1=$(cpu_ms "$redis_pid")
      calls=$(sed -E 's/.* calls=([0-9]+) .*/\1/' <<<"$line")
      printf '%-24s descriptors=%d concurrency=%-3d %s server_cpu/call=%sus redis_cpu/call=%sus %s\n' "$name" "$d" "$c" \
        "$(sed -E 's/.*(calls\/s=.*) over_limit.*/\1/' <<<"$line")" \
        "$(awk -v a="$cpu1" -v b="$cpu0" -v n="$calls" 'BEGIN {if (n > 0) printf "%.1f", (a-b)*1000/n}')" \
        "$(awk -v a="$rcpu1" -v b="$rcpu0" -v n="$calls" 'BEGIN {if (n > 0) printf "%.1f", (a-b)*1000/n}')" \
        "$(awk -v a="$after" -v b="$before" -v n="$calls" 'BEGIN {
            split(a, x, " "); split(b, y, " ")
            if (n > 0) printf "client_cmds/call=%.2f all_cmds/call=%.2f", (x[1]-y[1])/n, (x[2]-y[2])/n; else print "-"}')"
    done
  done
}

# Sluice, memory store.
${server_pin[@]+"${server_pin[@]}"} "$work/sluice" serve --config examples/bench --grpc-addr 127.0.0.1:48081 --http-addr 127.0.0.1:48080 --debug-addr off --log-level warn &
pids+=($!)
wait_port 48081
run "sluice memory" 127.0.0.1:48081 "${pids[-1]}"
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true; unset 'pids[-1]'

# Sluice, Redis, windows counted by the Lua script (one EVALSHA per request).
${server_pin[@]+"${server_pin[@]}"} "$work/sluice" serve --config examples/bench --store redis --redis-addr "127.0.0.1:$REDIS_PORT" --redis-envoy-keys=false \
  --grpc-addr 127.0.0.1:48081 --http-addr 127.0.0.1:48080 --debug-addr off --log-level warn &
pids+=($!)
wait_port 48081
run "sluice redis lua" 127.0.0.1:48081 "${pids[-1]}"
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true; unset 'pids[-1]'

# Sluice, Redis, the default: windows counted with pipelined INCRBY+EXPIRE.
${server_pin[@]+"${server_pin[@]}"} "$work/sluice" serve --config examples/bench --store redis --redis-addr "127.0.0.1:$REDIS_PORT" \
  --grpc-addr 127.0.0.1:48081 --http-addr 127.0.0.1:48080 --debug-addr off --log-level warn &
pids+=($!)
wait_port 48081
run "sluice redis" 127.0.0.1:48081 "${pids[-1]}"
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true; unset 'pids[-1]'

if [ -n "${ENVOY_RATELIMIT_BIN:-}" ]; then
  mkdir -p "$work/runtime/ratelimit/config"
  cp examples/bench/bench.yaml "$work/runtime/ratelimit/config/"
  USE_STATSD=false LOG_LEVEL=warn REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$REDIS_PORT" \
    RUNTIME_ROOT="$work/runtime" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
    PORT=48090 GRPC_PORT=48091 DEBUG_PORT=48092 ${server_pin[@]+"${server_pin[@]}"} "$ENVOY_RATELIMIT_BIN" >"$work/envoy.log" 2>&1 &
  pids+=($!)
  wait_port 48091
  run "envoyproxy/ratelimit" 127.0.0.1:48091 "${pids[-1]}"
fi
