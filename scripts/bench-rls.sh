#!/usr/bin/env bash
# Measures the Envoy RLS API over gRPC on loopback, driven by `sluice bench`:
# Sluice with the memory store; Sluice with Redis (the default, fixed
# windows counted with pipelined INCRBY+EXPIRE); Sluice with Redis and
# windows counted by the Lua script; and, when ENVOY_RATELIMIT_BIN names an
# envoyproxy/ratelimit binary, envoyproxy/ratelimit on the same Redis. Each
# for 1 and 5 descriptors per request and 16 and 64 concurrent callers.
#
# All servers run at once, idle but for the one measured, and the runs are
# interleaved: each round measures every server on every load, one after
# another, so that a drift in the machine's speed (shared VMs drift by 10%
# and more over minutes) falls on all servers alike. ROUNDS rounds, then a
# summary of the medians, and the ratios to envoyproxy/ratelimit; last,
# each round's own ratios, as ranges, and how many meet issue 16's targets.
#
# One line per run: calls/s; latency percentiles; the server's and Redis's
# CPU time per call (user+system from /proc); and from INFO commandstats
# the commands clients sent per call (client_cmds: one EVALSHA, or the
# pipelined INCRBY/EXPIRE of one round trip) and all commands executed per
# call, script-internal ones included (all_cmds); and from INFO stats the
# reads Redis made from client connections per call (reads: one per round
# trip, fewer when one read carries several calls' commands).
#
#   scripts/bench-rls.sh                      # Sluice only
#   ENVOY_RATELIMIT_BIN=/path/to/ratelimit scripts/bench-rls.sh
#   SERVER_CPUS=1 LOAD_CPUS=0 ROUNDS=5 ENVOY_RATELIMIT_BIN=... scripts/bench-rls.sh
#
# Environment: DURATION (default 10s) and ROUNDS (default 1); LOADS, the
# descriptors/callers pairs to run (default "1/16 1/64 5/16 5/64");
# REDIS_PORT (default 26379); CONFIG, the directory of rules every
# server loads (default examples/config; its bench.yaml is the domain
# `sluice bench` asks about, and envoyproxy/ratelimit's one file); BENCH_FLAGS (extra flags for `sluice bench`,
# e.g. "--client grpc"); SERVER_ENV, VAR=value words set for every server
# and only for them (e.g. "GOMAXPROCS=1" or "GOGC=400"; SLUICE_* variables
# reach Sluice's servers anyway, e.g. SLUICE_GRPC_WORKERS=0); LOAD_ENV, the
# same for the load generator only (e.g. "GOGC=100": Go's default
# collector, where `sluice bench` otherwise tunes its own as `serve` does);
# SERVER_CPUS / LOAD_CPUS: when both are set (e.g.
# SERVER_CPUS=1 LOAD_CPUS=0), every server runs pinned to SERVER_CPUS and
# Redis and the load generator to LOAD_CPUS (taskset -c), so that the
# server under test has cores of its own, as in a deployment.
# BASE_BIN, a sluice binary built elsewhere (say at an older commit), adds
# "sluice memory base", that binary with the memory store, and
# "sluice redis base": that binary on the same Redis with the same flags as
# "sluice redis", measured in the same rounds, for an interleaved A/B.
# REDIS_CLUSTER=1 also starts a Redis Cluster of three masters (ports
# REDIS_PORT+1 to +3, and +10001 to +10003 for the cluster bus: keep them
# below the ephemeral range, 32768, e.g. REDIS_PORT=16379; made with
# redis-cli --cluster create) and adds "sluice redis cluster" (--redis-mode cluster) on it, and
# with ENVOY_RATELIMIT_BIN "envoyproxy/ratelimit cluster" (REDIS_TYPE=cluster); the
# Redis columns (redis_cpu, cmds, reads) always describe the single Redis.
# REDIS_CPU_LIMIT (a fraction of one core, 0.1 to 1; needs root and a CPU
# cgroup, v1 or v2) caps every redis-server started here, each in a cgroup
# of its own, so that Redis, not the servers, is the bottleneck, as on a
# deployment whose Redis is busy: e.g. REDIS_CLUSTER=1
# REDIS_CPU_LIMIT=0.1 compares a Cluster's three capped masters with one.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-1}
LOADS=${LOADS:-1/16 1/64 5/16 5/64}
read -r -a server_env <<<"${SERVER_ENV:-}"
read -r -a load_env <<<"${LOAD_ENV:-}"
REDIS_PORT=${REDIS_PORT:-26379}
BENCH_FLAGS=${BENCH_FLAGS:-}
CONFIG=${CONFIG:-examples/config}
server_pin=() load_pin=()
if [ -n "${SERVER_CPUS:-}" ] && [ -n "${LOAD_CPUS:-}" ]; then
  server_pin=(taskset -c "$SERVER_CPUS")
  load_pin=(taskset -c "$LOAD_CPUS")
fi
work=$(mktemp -d)
pids=() cgroups=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for g in "${cgroups[@]}"; do rmdir "$g" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# cap_cpu pid name: with REDIS_CPU_LIMIT set, moves pid into a CPU cgroup
# of its own allowed that fraction of one core (each Redis apart, as if on
# machines of its own), in 10 ms periods.
cap_cpu() {
  [ -n "${REDIS_CPU_LIMIT:-}" ] || return 0
  local dir quota
  quota=$(awk -v f="$REDIS_CPU_LIMIT" 'BEGIN { q = int(f * 10000); if (q < 1000 || f > 1) exit 1; print q }') ||
    { echo "bench-rls: REDIS_CPU_LIMIT=$REDIS_CPU_LIMIT: want a fraction of a core from 0.1 to 1" >&2; exit 1; }
  if [ -w /sys/fs/cgroup/cpu ] && [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
    dir=/sys/fs/cgroup/cpu/sluice-bench-$$-$2
    mkdir "$dir" && cgroups+=("$dir")
    echo 10000 >"$dir/cpu.cfs_period_us"
    echo "$quota" >"$dir/cpu.cfs_quota_us"
  elif [ -w /sys/fs/cgroup ] && grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; then
    dir=/sys/fs/cgroup/sluice-bench-$$-$2
    mkdir "$dir" && cgroups+=("$dir")
    echo "$quota 10000" >"$dir/cpu.max"
  else
    echo "bench-rls: REDIS_CPU_LIMIT needs a writable CPU cgroup (v1 at /sys/fs/cgroup/cpu, or v2 with the cpu controller enabled)" >&2
    exit 1
  fi
  echo "$1" >"$dir/cgroup.procs"
}

go build -o "$work/sluice" ./cmd/sluice
${load_pin[@]+"${load_pin[@]}"} redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no >"$work/redis.log" 2>&1 &
pids+=($!)
redis_pid=$!
cap_cpu "$redis_pid" redis
until redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1; do sleep 0.1; done
cluster_addrs=()
if [ -n "${REDIS_CLUSTER:-}" ]; then
  for p in $((REDIS_PORT + 1)) $((REDIS_PORT + 2)) $((REDIS_PORT + 3)); do
    mkdir -p "$work/cluster-$p"
    (cd "$work/cluster-$p" && exec ${load_pin[@]+"${load_pin[@]}"} redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no \
      --cluster-enabled yes --cluster-config-file nodes.conf >redis.log 2>&1) &
    pids+=($!)
    cap_cpu "$!" "redis-$p"
    cluster_addrs+=("127.0.0.1:$p")
    until redis-cli -p "$p" ping >/dev/null 2>&1; do
      if ! kill -0 "$!" 2>/dev/null; then tail -3 "$work/cluster-$p/redis.log" >&2; exit 1; fi
      sleep 0.1
    done
  done
  redis-cli --cluster create "${cluster_addrs[@]}" --cluster-yes >"$work/cluster-create.log" 2>&1
  until redis-cli -p $((REDIS_PORT + 1)) cluster info | grep -q 'cluster_state:ok'; do sleep 0.1; done
fi

wait_port() { # port [pid]: fails if the process dies first
  until (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; do
    if [ -n "${2:-}" ] && ! kill -0 "$2" 2>/dev/null; then echo "bench-rls: the server for port $1 exited" >&2; exit 1; fi
    sleep 0.1
  done
}

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

reads() { # reads Redis has made from client connections so far
  redis-cli -p "$REDIS_PORT" info stats | tr -d '\r' | awk -F: '$1 == "total_reads_processed" {print $2+0}'
}

cpu_ms() { # CPU time of a process so far, in milliseconds
  awk -v hz="$(getconf CLK_TCK)" '{printf "%d", ($14 + $15) * 1000 / hz}' "/proc/$1/stat"
}

names=() addrs=() spids=()
serve_sluice() { # name port [flags...]
  local name=$1 port=$2
  shift 2
  env ${server_env[@]+"${server_env[@]}"} ${server_pin[@]+"${server_pin[@]}"} "$work/sluice" serve --config "$CONFIG" --grpc-addr "127.0.0.1:$port" \
    --http-addr "127.0.0.1:$((port - 1))" --debug-addr off --log-level warn "$@" &
  pids+=($!)
  names+=("$name") addrs+=("127.0.0.1:$port") spids+=($!)
  wait_port "$port" $!
}

serve_sluice "sluice memory" 48081
serve_sluice "sluice redis" 48083 --store redis --redis-addr "127.0.0.1:$REDIS_PORT"
serve_sluice "sluice redis lua" 48085 --store redis --redis-addr "127.0.0.1:$REDIS_PORT" --redis-envoy-keys=false
if [ -n "${BASE_BIN:-}" ]; then
  cp "$BASE_BIN" "$work/sluice-base"
  env ${server_env[@]+"${server_env[@]}"} ${server_pin[@]+"${server_pin[@]}"} "$work/sluice-base" serve --config "$CONFIG" --grpc-addr 127.0.0.1:48087 \
    --http-addr 127.0.0.1:48086 --debug-addr off --log-level warn --store redis --redis-addr "127.0.0.1:$REDIS_PORT" &
  pids+=($!)
  names+=("sluice redis base") addrs+=("127.0.0.1:48087") spids+=($!)
  wait_port 48087 $!
  env ${server_env[@]+"${server_env[@]}"} ${server_pin[@]+"${server_pin[@]}"} "$work/sluice-base" serve --config "$CONFIG" --grpc-addr 127.0.0.1:48097 \
    --http-addr 127.0.0.1:48096 --debug-addr off --log-level warn &
  pids+=($!)
  names+=("sluice memory base") addrs+=("127.0.0.1:48097") spids+=($!)
  wait_port 48097 $!
fi
if [ ${#cluster_addrs[@]} -gt 0 ]; then
  serve_sluice "sluice redis cluster" 48089 --store redis --redis-mode cluster --redis-addr "$(IFS=,; echo "${cluster_addrs[*]}")"
fi
serve_envoy() { # name grpc-port [VAR=value...]: envoyproxy/ratelimit, its HTTP port grpc-port-1, its debug port grpc-port+1
  local name=$1 port=$2
  shift 2
  env USE_STATSD=false LOG_LEVEL=warn REDIS_SOCKET_TYPE=tcp "$@" \
    RUNTIME_ROOT="$work/runtime" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
    PORT=$((port - 1)) GRPC_PORT="$port" DEBUG_PORT=$((port + 1)) ${server_env[@]+"${server_env[@]}"} \
    ${server_pin[@]+"${server_pin[@]}"} "$ENVOY_RATELIMIT_BIN" >"$work/envoy-$port.log" 2>&1 &
  pids+=($!)
  names+=("$name") addrs+=("127.0.0.1:$port") spids+=($!)
  wait_port "$port" $!
}

if [ -n "${ENVOY_RATELIMIT_BIN:-}" ]; then
  mkdir -p "$work/runtime/ratelimit/config"
  cp "$CONFIG/bench.yaml" "$work/runtime/ratelimit/config/"
  serve_envoy "envoyproxy/ratelimit" 48091 REDIS_URL="127.0.0.1:$REDIS_PORT"
  if [ ${#cluster_addrs[@]} -gt 0 ]; then
    serve_envoy "envoyproxy/ratelimit cluster" 48094 REDIS_TYPE=cluster REDIS_URL="$(IFS=,; echo "${cluster_addrs[*]}")"
  fi
fi

measure() { # name addr pid descriptors callers
  local name=$1 addr=$2 pid=$3 d=$4 c=$5
  redis-cli -p "$REDIS_PORT" flushall >/dev/null
  redis-cli -p "$REDIS_PORT" config resetstat >/dev/null
  local before after line calls cpu0 cpu1 rcpu0 rcpu1 reads0 reads1
  before=$(commands)
  reads0=$(reads)
  cpu0=$(cpu_ms "$pid")
  rcpu0=$(cpu_ms "$redis_pid")
  # shellcheck disable=SC2086 # BENCH_FLAGS is a list of flags
  line=$(env ${load_env[@]+"${load_env[@]}"} ${load_pin[@]+"${load_pin[@]}"} "$work/sluice" bench --addr "$addr" --descriptors "$d" --concurrency "$c" \
    --duration "$DURATION" --warmup 0s $BENCH_FLAGS)
  after=$(commands)
  reads1=$(reads)
  cpu1=$(cpu_ms "$pid")
  rcpu1=$(cpu_ms "$redis_pid")
  calls=$(sed -E 's/.* calls=([0-9]+) .*/\1/' <<<"$line")
  printf '%-22s descriptors=%d concurrency=%-3d %s server_cpu/call=%sus redis_cpu/call=%sus %s reads/call=%s\n' "$name" "$d" "$c" \
    "$(sed -E 's/.*(calls\/s=.*) over_limit.*/\1/' <<<"$line")" \
    "$(awk -v a="$cpu1" -v b="$cpu0" -v n="$calls" 'BEGIN {if (n > 0) printf "%.1f", (a-b)*1000/n}')" \
    "$(awk -v a="$rcpu1" -v b="$rcpu0" -v n="$calls" 'BEGIN {if (n > 0) printf "%.1f", (a-b)*1000/n}')" \
    "$(awk -v a="$after" -v b="$before" -v n="$calls" 'BEGIN {
        split(a, x, " "); split(b, y, " ")
        if (n > 0) printf "client_cmds/call=%.2f all_cmds/call=%.2f", (x[1]-y[1])/n, (x[2]-y[2])/n; else print "-"}')" \
    "$(awk -v a="$reads1" -v b="$reads0" -v n="$calls" 'BEGIN {if (n > 0) printf "%.2f", (a-b)/n}')"
}

# A short unmeasured run per server first: connections, script loading,
# and the Go runtime's warm-up.
for i in "${!names[@]}"; do
  env ${load_env[@]+"${load_env[@]}"} ${load_pin[@]+"${load_pin[@]}"} "$work/sluice" bench --addr "${addrs[$i]}" --duration 1s --warmup 0s >/dev/null
done

results="$work/results"
for round in $(seq "$ROUNDS"); do
  echo "# round $round of $ROUNDS"
  for load in $LOADS; do
    for i in "${!names[@]}"; do
      measure "${names[$i]}" "${addrs[$i]}" "${spids[$i]}" "${load%/*}" "${load#*/}" | tee -a "$results"
    done
  done
done

echo
echo "# medians of $ROUNDS round(s): calls/s p50 p99 server_cpu/call; and for Sluice the ratios to envoyproxy/ratelimit, on the same Cluster for a Cluster (calls/s, p99)"
# Then, from the same lines, each round's own ratios (printed by END after
# the medians).
awk -v rounds_header="# round by round: each Sluice server's ratios to envoyproxy/ratelimit (on the same Cluster for a Cluster) in the same round and load, min-max over the rounds for each load in turn, then over all; and how many of them meet issue 16's targets (Redis: calls/s >= 2x, p99 <= 0.5x, server CPU per call <= 0.35x; memory store: calls/s >= 4x, CPU <= 0.2x); for a Cluster, last, its calls/s over the same server's on the single Redis" '
  function ms(s) { # a Go duration as printed by sluice bench, in ms
    if (s ~ /ms$/) return substr(s, 1, length(s) - 2) + 0
    if (s ~ /µs$/) return substr(s, 1, length(s) - 3) / 1000
    if (s ~ /s$/) return substr(s, 1, length(s) - 1) * 1000
    return s + 0
  }
  function median(list,   a, n, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  function widen(key, x) {
    if (!(key in lo) || x < lo[key]) lo[key] = x
    if (!(key in hi) || x > hi[key]) hi[key] = x
  }
  # metric m of server k over that of server e in round r; "" when e has
  # none (a failed run), so that no division by zero ends the summary
  function ratio(m, k, e, r,   d) {
    d = m == "calls/s" ? rcps[e, r] : m == "p99" ? rp99[e, r] : rcpu[e, r]
    if (d + 0 <= 0) return ""
    return (m == "calls/s" ? rcps[k, r] : m == "p99" ? rp99[k, r] : rcpu[k, r]) / d
  }
  # the ranges of each load in turn, then over all, of name against
  # against for metric m; met counts those meeting target t ("": none)
  function ranges(name, against, m, t,   j, k, e, key, all, r, x, line) {
    line = ""; all = name SUBSEP m SUBSEP against; met = 0; counted = 0
    for (j = 1; j <= nl; j++) {
      k = name SUBSEP loads[j]; e = against SUBSEP loads[j]; key = all SUBSEP loads[j]
      for (r = 1; r <= count[k] && r <= count[e]; r++) {
        if ((x = ratio(m, k, e, r)) == "") continue
        widen(key, x); widen(all, x); counted++
        if (t != "" && (m == "calls/s" ? x >= t : x <= t)) met++
      }
      if (key in lo) line = line sprintf("%s %s %.2f-%.2f", (line != "" ? " |" : ""), loads[j], lo[key], hi[key])
    }
    return counted ? sprintf("%s; all %.2f-%.2f", line, lo[all], hi[all]) : ""
  }
  {
    name = $0; sub(/ +descriptors=.*/, "", name)
    for (f = 1; f <= NF; f++) { split($f, kv, "="); v[kv[1]] = kv[2] }
    load = v["descriptors"] "/" v["concurrency"]
    k = name SUBSEP load
    cpu = v["server_cpu/call"]; sub(/us$/, "", cpu)
    if (!(k in seen)) { seen[k] = 1; order[++n] = k }
    cps[k] = cps[k] " " v["calls/s"]; p50[k] = p50[k] " " ms(v["p50"]); p99[k] = p99[k] " " ms(v["p99"]); scpu[k] = scpu[k] " " cpu
    # each round on its own: the r-th line of a server and load is round r
    r = ++count[k]
    rcps[k, r] = v["calls/s"]; rp99[k, r] = ms(v["p99"]); rcpu[k, r] = cpu
    if (!(name in seenName)) { seenName[name] = 1; names[++nn] = name }
    if (!(load in seenLoad)) { seenLoad[load] = 1; loads[++nl] = load }
  }
  END {
    for (i = 1; i <= n; i++) {
      k = order[i]; split(k, p, SUBSEP); split(p[2], dc, "/")
      # a Cluster against envoyproxy/ratelimit on the same Cluster when it ran
      against = p[1] ~ / cluster$/ ? "envoyproxy/ratelimit cluster" : "envoyproxy/ratelimit"
      e = against SUBSEP p[2]
      out = ""
      if ((e in seen) && p[1] !~ /^envoyproxy/ && median(cps[e]) > 0 && median(p99[e]) > 0)
        out = sprintf("  vs %s: %.2fx calls/s, p99 %.2f", against, median(cps[k]) / median(cps[e]), median(p99[k]) / median(p99[e]))
      printf "%-22s descriptors=%s concurrency=%-3s calls/s=%.0f p50=%.3fms p99=%.3fms server_cpu/call=%.1fus%s\n",
        p[1], dc[1], dc[2], median(cps[k]), median(p50[k]), median(p99[k]), median(scpu[k]), out
    }

    print ""
    print rounds_header
    split("calls/s p99 cpu", metric, " ")
    for (i = 1; i <= nn; i++) {
      name = names[i]
      if (name ~ /^envoyproxy/) continue
      against = name ~ / cluster$/ ? "envoyproxy/ratelimit cluster" : "envoyproxy/ratelimit"
      # targets: none for a Cluster or a server that is neither store
      tgt["calls/s"] = tgt["p99"] = tgt["cpu"] = ""
      if (name !~ / cluster$/ && name ~ /redis/) { tgt["calls/s"] = 2; tgt["p99"] = 0.5; tgt["cpu"] = 0.35 }
      if (name !~ / cluster$/ && name ~ /memory/) { tgt["calls/s"] = 4; tgt["cpu"] = 0.2 }
      first = 1
      for (m = 1; m <= 3; m++) {
        if ((line = ranges(name, against, metric[m], tgt[metric[m]])) == "") continue
        verdict = ""
        if (tgt[metric[m]] != "") verdict = sprintf(", target %s%sx met in %d of %d", (metric[m] == "calls/s" ? ">= " : "<= "), tgt[metric[m]], met, counted)
        printf "%-22s %-7s %s%s\n", (first ? name : ""), metric[m], line, verdict
        first = 0
      }
    }
    # a Cluster against the same server on the single Redis: does it scale?
    for (i = 1; i <= nn; i++) {
      name = names[i]
      if (name !~ / cluster$/) continue
      single = name; sub(/ cluster$/, "", single)
      if ((line = ranges(name, single, "calls/s", "")) != "")
        printf "%-22s calls/s on the Cluster over on one Redis:%s\n", name, line
    }
  }' "$results"
