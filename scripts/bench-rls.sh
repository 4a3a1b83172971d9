#!/usr/bin/env bash
# Measures the Envoy RLS API over gRPC on loopback: Sluice with the memory
# store, Sluice with Redis, and — when ENVOY_RATELIMIT_BIN names an
# envoyproxy/ratelimit binary — envoyproxy/ratelimit on the same Redis, for
# 1 and 5 descriptors per request and 16 and 64 concurrent callers. Prints
# one line per run: calls/s, latency percentiles, and Redis commands per
# call (from INFO commandstats).
#
#   scripts/bench-rls.sh                      # Sluice only
#   ENVOY_RATELIMIT_BIN=/path/to/ratelimit scripts/bench-rls.sh
#
# Environment: DURATION (default 10s), REDIS_PORT (default 26379).
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
REDIS_PORT=${REDIS_PORT:-26379}
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/sluice" ./cmd/sluice
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no >"$work/redis.log" 2>&1 &
pids+=($!)
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

run() { # name addr
  local name=$1 addr=$2
  for d in 1 5; do
    for c in 16 64; do
      redis-cli -p "$REDIS_PORT" flushall >/dev/null
      redis-cli -p "$REDIS_PORT" config resetstat >/dev/null
      local before after line calls
      before=$(commands)
      line=$("$work/sluice" bench --addr "$addr" --descriptors "$d" --concurrency "$c" --duration "$DURATION" --warmup 0s)
      after=$(commands)
      calls=$(sed -E 's/.* calls=([0-9]+) .*/\1/' <<<"$line")
      printf '%-24s descriptors=%d concurrency=%-3d %s %s\n' "$name" "$d" "$c" \
        "$(sed -E 's/.*(calls\/s=.*) over_limit.*/\1/' <<<"$line")" \
        "$(awk -v a="$after" -v b="$before" -v n="$calls" 'BEGIN {
            split(a, x, " "); split(b, y, " ")
            if (n > 0) printf "client_cmds/call=%.2f all_cmds/call=%.2f", (x[1]-y[1])/n, (x[2]-y[2])/n; else print "-"}')"
    done
  done
}

# Sluice, memory store.
"$work/sluice" serve --config examples/bench --grpc-addr 127.0.0.1:48081 --http-addr 127.0.0.1:48080 --debug-addr off --log-level warn &
pids+=($!)
wait_port 48081
run "sluice memory" 127.0.0.1:48081
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true; unset 'pids[-1]'

# Sluice, Redis (Lua: one EVALSHA per request).
"$work/sluice" serve --config examples/bench --store redis --redis-addr "127.0.0.1:$REDIS_PORT" \
  --grpc-addr 127.0.0.1:48081 --http-addr 127.0.0.1:48080 --debug-addr off --log-level warn &
pids+=($!)
wait_port 48081
run "sluice redis" 127.0.0.1:48081
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true; unset 'pids[-1]'

# Sluice, Redis with envoyproxy/ratelimit's keys and commands.
"$work/sluice" serve --config examples/bench --store redis --redis-addr "127.0.0.1:$REDIS_PORT" --redis-envoy-keys \
  --grpc-addr 127.0.0.1:48081 --http-addr 127.0.0.1:48080 --debug-addr off --log-level warn &
pids+=($!)
wait_port 48081
run "sluice redis envoy-keys" 127.0.0.1:48081
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true; unset 'pids[-1]'

if [ -n "${ENVOY_RATELIMIT_BIN:-}" ]; then
  mkdir -p "$work/runtime/ratelimit/config"
  cp examples/bench/bench.yaml "$work/runtime/ratelimit/config/"
  USE_STATSD=false LOG_LEVEL=warn REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$REDIS_PORT" \
    RUNTIME_ROOT="$work/runtime" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
    PORT=48090 GRPC_PORT=48091 DEBUG_PORT=48092 "$ENVOY_RATELIMIT_BIN" >"$work/envoy.log" 2>&1 &
  pids+=($!)
  wait_port 48091
  run "envoyproxy/ratelimit" 127.0.0.1:48091
fi
