#!/usr/bin/env bash
# Tries Sluice as a hostile or careless caller would, and as a bad day in
# production does, against real `sluice serve` processes and real Redis
# servers on 127.0.0.1, and prints one markdown table row per scenario:
# what was tried, what was measured, and whether that is what Sluice
# promises (docs/operations.md, "Faults tried and survived").
#
#   1. bad inputs: malformed requests over HTTP /json and /v1/* (empty,
#      invalid JSON, unknown fields, 2 MiB bodies, 80,000 descriptors,
#      1 MiB descriptor values and KV ids, invalid UTF-8, ...): every one
#      answered 4xx, the process alive and its memory bounded;
#   2. over-admission: three instances on one Redis, a limit of 500 an
#      hour, 2,000 calls spread over the three: exactly 500 admitted;
#   3. Redis killed and restarted under load (--on-store-error local):
#      every call answered in bounded time, health back after the restart;
#   4. Redis paused (SIGSTOP) while a caller with a very short deadline calls: the
#      other callers are not failed and the store is never marked down;
#   5. SIGTERM with calls in flight: they are answered and the process
#      exits within --shutdown-timeout;
#   6. bad reloads: a broken file written in place, then the runtime root
#      swapped to an invalid config: the service keeps answering with the
#      last good one, counts the failures, and takes a good one after;
#   7. HTTP/2 abuse on the gRPC port (scripts/h2abuse writes the frames):
#      calls opened and reset in a loop while Redis is paused, calls that
#      declare 4 MiB and send 5 bytes, calls that never send a request,
#      calls that send 1 MiB of a message and never finish it, and calls
#      that send 1 MB of headers and nothing more: the
#      goroutines, the heap and RSS stay bounded, the connections holding
#      more than their share are refused, and a normal caller is answered
#      meanwhile and afterwards;
#   8. slow HTTP clients: 2,000 connections each sending 900 KB of a header
#      line, then 2,000 each sending 900 KB of a 1 MB body, never
#      finishing: RSS stays bounded, the requests are answered 431 and 503,
#      and a normal /json call is answered meanwhile.
#
#   scripts/faults.sh
#
# Needs bash, curl, redis-server, redis-cli, Go and coreutils; runs in
# about a minute. Exits 1 when a scenario did not hold.
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/sluice" ./cmd/sluice
go build -o "$work/h2abuse" ./scripts/h2abuse
sluice=$work/sluice

used=" "
free_port() { # a port nothing listens on, not handed out before
  local p
  while :; do
    p=$((20000 + RANDOM % 12000)) # below the usual ephemeral range (32768-)
    case $used in *" $p "*) continue ;; esac
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      used+="$p "
      echo "$p"
      return
    fi
  done
}

wait_port() { # port: wait up to 10s for something to listen on it
  local i
  for i in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "nothing listens on 127.0.0.1:$1" >&2
  return 1
}

start_redis() { # port: starts redis-server; sets redis_pid
  redis-server --port "$1" --bind 127.0.0.1 --save '' --appendonly no >>"$work/redis-$1.log" 2>&1 &
  redis_pid=$!
  pids+=("$redis_pid")
  wait_port "$1"
}

start_sluice() { # name grpc-port http-port [flags...]: starts sluice serve; sets sluice_pid
  local name=$1 grpc=$2 http=$3
  shift 3
  "$sluice" serve --config "$work/config" --grpc-addr "127.0.0.1:$grpc" --http-addr "127.0.0.1:$http" \
    --log-level warn "$@" >"$work/$name.log" 2>&1 &
  sluice_pid=$!
  pids+=("$sluice_pid")
  if ! wait_port "$grpc" || ! wait_port "$http"; then cat "$work/$name.log" >&2; return 1; fi
}

rss_kib() { awk '$1 == "VmRSS:" {print $2}' "/proc/$1/status"; }
now_ms() { date +%s%3N; }
health() { curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$1/healthcheck" || true; }
metric() { # debug-port series: the value of one series, as printed (with its labels), "absent" when not served
  { curl -s --max-time 2 "http://127.0.0.1:$1/metrics" || true; } | awk -v n="$2" '$1 == n {v = $2; f = 1} END {print (f ? v : "absent")}'
}

mkdir -p "$work/config"
cat >"$work/config/faults.yaml" <<'EOF'
domain: faults
descriptors:
  - key: hourly
    rate_limit:
      unit: hour
      requests_per_unit: 500
  - key: roomy
    rate_limit:
      unit: second
      requests_per_unit: 1000000
EOF
cat >"$work/limits.yaml" <<'EOF'
FaultsPerAccount:
  burst: 10
  count: 10
  period: 1s
EOF

failed=0
rows=()
row() { # scenario tried measured verdict
  rows+=("| $1 | $2 | $3 | $4 |")
  if [ "$4" != ok ]; then failed=1; fi
  echo "done: $1: $4" >&2
}

# 1. Bad inputs ---------------------------------------------------------
bad_inputs() {
  local grpc http debug
  grpc=$(free_port) http=$(free_port) debug=$(free_port)
  start_sluice bad "$grpc" "$http" --debug-addr "127.0.0.1:$debug" --limits "$work/limits.yaml"
  local pid=$sluice_pid in=$work/in
  mkdir -p "$in"
  head -c 1048576 /dev/zero | tr '\0' a >"$in/mib"
  local mib
  mib=$(cat "$in/mib")
  : >"$in/empty"
  printf '{' >"$in/json-invalid"
  printf '[1,2' >"$in/json-truncated"
  printf 'null' >"$in/json-null"
  printf '{"domain":"faults","bogus":1,"descriptors":[{"entries":[{"key":"roomy","value":"a"}]}]}' >"$in/json-unknown-field"
  printf '{"descriptors":[{"entries":[{"key":"roomy","value":"a"}]}]}' >"$in/json-no-domain"
  printf '{"domain":"faults","descriptors":[{"entries":[{"key":"roomy","value":"a"}]}],"hits_addend":-1}' >"$in/json-negative-hits"
  printf '{"domain":"faults","descriptors":"x"}' >"$in/json-wrong-type"
  printf '{"domain":"faults","descriptors":[{"entries":[{"key":"roomy","value":"%s"}]}]}' "$mib" >"$in/json-value-1mib"
  printf '{"domain":"faults","descriptors":[{"entries":[{"key":"%s","value":"a"}]}]}' "$mib" >"$in/json-key-1mib"
  printf '{"domain":"faults","descriptors":[{"entries":[{"key":"roomy","value":"\xff\xfe"}]}]}' >"$in/json-invalid-utf8"
  awk 'BEGIN {
    printf "{\"domain\":\"faults\",\"descriptors\":["
    for (i = 0; i < 80000; i++) printf "%s{\"entries\":[{\"key\":\"roomy\",\"value\":\"v%d\"}]}", (i ? "," : ""), i
    print "]}" }' >"$in/json-80000-descriptors"
  awk 'BEGIN {
    printf "{\"domain\":\"faults\",\"descriptors\":[{\"entries\":["
    for (i = 0; i < 1000; i++) printf "%s{\"key\":\"k%d\",\"value\":\"v\"}", (i ? "," : ""), i
    print "]}]}" }' >"$in/json-1000-entries"
  { printf '{"domain":"faults","descriptors":[{"entries":[{"key":"roomy","value":"'; head -c 2097152 /dev/zero | tr '\0' b; printf '"}]}]}'; } >"$in/json-2mib"
  printf '{"name":"FaultsPerAccount","id":"%s","cost":1}' "$mib" >"$in/v1-id-1mib"
  printf '{"name":"FaultsPerAccount","id":"\xff\xfe","cost":1}' >"$in/v1-invalid-utf8"
  printf '{"name":"FaultsPerAccount","id":"a","cost":1,"bogus":true}' >"$in/v1-unknown-field"
  printf '{"name":"NoSuchLimit","id":"a","cost":1}' >"$in/v1-unknown-name"
  printf '{"name":"FaultsPerAccount","id":"a","cost":-1}' >"$in/v1-negative-cost"
  printf '{"name":"FaultsPerAccount","cost":1}' >"$in/v1-no-id"
  { printf '{"name":"FaultsPerAccount","id":"'; head -c 2097152 /dev/zero | tr '\0' c; printf '","cost":1}'; } >"$in/v1-2mib"
  awk 'BEGIN {
    printf "{\"transactions\":["
    for (i = 0; i < 10000; i++) printf "%s{\"name\":\"FaultsPerAccount\",\"id\":\"i%d\",\"cost\":1}", (i ? "," : ""), i
    print "]}" }' >"$in/v1-batch-10000"

  # endpoint input repeats
  local plan=(
    "/json empty 1" "/json json-invalid 1" "/json json-truncated 1" "/json json-null 1"
    "/json json-unknown-field 1" "/json json-no-domain 1"
    "/json json-negative-hits 1" "/json json-wrong-type 1" "/json json-invalid-utf8 1"
    "/json json-value-1mib 100" "/json json-key-1mib 20" "/json json-80000-descriptors 3"
    "/json json-1000-entries 3" "/json json-2mib 3"
    "/v1/spend empty 1" "/v1/spend json-invalid 1" "/v1/spend v1-unknown-field 1"
    "/v1/spend v1-unknown-name 1" "/v1/spend v1-negative-cost 1" "/v1/spend v1-no-id 1"
    "/v1/spend v1-invalid-utf8 1" "/v1/spend v1-id-1mib 100" "/v1/spend v1-2mib 3"
    "/v1/check v1-id-1mib 20" "/v1/refund v1-id-1mib 20" "/v1/reset v1-id-1mib 20"
    "/v1/batch v1-batch-10000 3" "/v1/batch json-invalid 1"
  )
  local rss0 rss1 line path file n i code kinds=0 sent=0 non4xx=0 worst=""
  rss0=$(rss_kib "$pid")
  : >"$work/codes"
  for line in "${plan[@]}"; do
    read -r path file n <<<"$line"
    kinds=$((kinds + 1))
    for i in $(seq "$n"); do
      code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -H 'Content-Type: application/json' \
        --data-binary "@$in/$file" "http://127.0.0.1:$http$path" || true)
      sent=$((sent + 1))
      echo "$code" >>"$work/codes"
      case $code in 4??) ;; *) non4xx=$((non4xx + 1)) worst+=" $path:$file=$code" ;; esac
    done
  done
  # The same over gRPC (envoy.service.ratelimit.v3), through `sluice query`;
  # one argument can carry at most 128 KiB, so the long strings are 100 KiB.
  local kib100 many entries gsent=0 ginvalid=0 gkinds=0 gline gn gerr
  kib100=$(head -c 102400 /dev/zero | tr '\0' d)
  mapfile -t many < <(seq -f 'roomy=%g' 80000)
  entries=$(seq -f 'k%g=v' 1000 | paste -sd, -)
  local gplan=("roomy=$kib100 20" "$kib100=x 20" "$entries 3")
  for gline in "${gplan[@]}" "many 3"; do
    gn=${gline##* }
    gkinds=$((gkinds + 1))
    for i in $(seq "$gn"); do
      gerr=$work/grpc-err
      if [ "$gline" = "many 3" ]; then
        "$sluice" query --addr "127.0.0.1:$grpc" --domain faults --timeout 10s "${many[@]}" >/dev/null 2>"$gerr" || true
      else
        "$sluice" query --addr "127.0.0.1:$grpc" --domain faults --timeout 10s "${gline% *}" >/dev/null 2>"$gerr" || true
      fi
      gsent=$((gsent + 1))
      if grep -q 'answered InvalidArgument' "$gerr"; then ginvalid=$((ginvalid + 1)); else worst+=" grpc:$(head -c 200 "$gerr")"; fi
    done
  done
  local alive=dead
  if kill -0 "$pid" 2>/dev/null && [ "$(health "$http")" = 200 ]; then alive=alive; fi
  rss1=$(rss_kib "$pid" 2>/dev/null || echo 0)
  local byc
  byc=$(sort "$work/codes" | uniq -c | awk '{printf "%s%s×%d", (NR > 1 ? ", " : ""), $2, $1}')
  local verdict=ok
  if [ "$non4xx" -ne 0 ] || [ "$ginvalid" -ne "$gsent" ] || [ "$alive" != alive ] || [ "$rss1" -gt 262144 ]; then verdict="FAILED${worst}"; fi
  row "1. bad inputs over HTTP and gRPC" \
    "HTTP: $kinds kinds of malformed request to /json and /v1/{spend,check,refund,reset,batch}, $sent requests, among them 100× a 1 MiB descriptor value, 100× a 1 MiB KV id, 80,000 descriptors, 2 MiB bodies, invalid UTF-8; gRPC: $gkinds kinds, $gsent requests (100 KiB keys and values, 1,000 entries in a descriptor, 80,000 descriptors)" \
    "HTTP answers: $byc; not 4xx: $non4xx; gRPC answered InvalidArgument: $ginvalid of $gsent; process $alive, /healthcheck $(health "$http"); RSS $((rss0 / 1024)) MiB before, $((rss1 / 1024)) MiB after" \
    "$verdict"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
}

# 2. Over-admission -----------------------------------------------------
over_admission() {
  local workers_pids=()
  local rport g=() h=() i
  rport=$(free_port)
  start_redis "$rport"
  for i in 0 1 2; do
    g[i]=$(free_port) h[i]=$(free_port)
    start_sluice "admit$i" "${g[i]}" "${h[i]}" --debug-addr off --store redis --redis-addr "127.0.0.1:$rport"
  done
  local workers=6 calls=2000 w
  for w in $(seq 0 $((workers - 1))); do
    (
      ok=0 over=0 err=0
      for ((n = w; n < calls; n += workers)); do
        rc=0
        "$sluice" query --addr "127.0.0.1:${g[w % 3]}" --domain faults --timeout 5s hourly=one >/dev/null 2>&1 || rc=$?
        case $rc in 0) ok=$((ok + 1)) ;; 3) over=$((over + 1)) ;; *) err=$((err + 1)) ;; esac
      done
      echo "$ok $over $err" >"$work/admit-$w"
    ) &
    workers_pids+=($!)
  done
  wait "${workers_pids[@]}" 2>/dev/null || true
  local ok over err
  read -r ok over err < <(cat "$work"/admit-* | awk '{o += $1; v += $2; e += $3} END {print o + 0, v + 0, e + 0}')
  local verdict=ok
  if [ "$ok" -ne 500 ] || [ "$err" -ne 0 ]; then verdict=FAILED; fi
  row "2. over-admission, 3 instances on one Redis" \
    "limit 500/hour on one descriptor; $calls calls by $workers concurrent callers spread over 3 \`sluice serve\` (\`--store redis\`)" \
    "admitted $ok of $calls (want 500); over limit $over; errors $err" \
    "$verdict"
}

# 3. Redis killed and restarted -----------------------------------------
redis_killed() {
  local workers_pids=()
  local rport grpc http
  rport=$(free_port) grpc=$(free_port) http=$(free_port)
  start_redis "$rport"
  start_sluice killed "$grpc" "$http" --debug-addr off --store redis --redis-addr "127.0.0.1:$rport" \
    --on-store-error local --redis-health-check-active-connection
  local spid=$sluice_pid body
  body='{"domain":"faults","descriptors":[{"entries":[{"key":"roomy","value":"a"}]}]}'
  : >"$work/killed-calls"
  local stop=$work/killed-stop w
  for w in 1 2; do
    (
      while [ ! -e "$stop" ]; do
        curl -s -o /dev/null -w "$(now_ms) %{http_code} %{time_total}\n" --max-time 5 \
          --data-binary "$body" "http://127.0.0.1:$http/json" >>"$work/killed-calls" || echo "$(now_ms) 000 5" >>"$work/killed-calls"
      done
    ) &
    workers_pids+=($!)
  done
  sleep 1
  local down_at up_at healthy_at=""
  down_at=$(now_ms)
  kill -KILL "$redis_pid"
  wait "$redis_pid" 2>/dev/null || true
  sleep 2
  local down_health
  down_health=$(health "$http")
  up_at=$(now_ms)
  start_redis "$rport"
  local i
  for i in $(seq 200); do
    if [ "$(health "$http")" = 200 ]; then healthy_at=$(now_ms); break; fi
    sleep 0.05
  done
  sleep 0.5
  touch "$stop"
  wait "${workers_pids[@]}" 2>/dev/null || true
  local during answered maxlat
  read -r during answered maxlat < <(awk -v a="$down_at" -v b="$up_at" '
    $1 >= a && $1 <= b {n++; if ($2 == 200) ok++}
    {if ($3 > m) m = $3}
    END {printf "%d %d %.3f\n", n, ok, m}' "$work/killed-calls")
  local total
  total=$(wc -l <"$work/killed-calls")
  local rec="never"
  if [ -n "$healthy_at" ]; then rec="$((healthy_at - up_at)) ms"; fi
  local verdict=ok
  if [ "$during" -eq 0 ] || [ "$answered" -ne "$during" ] || [ -z "$healthy_at" ] || ! kill -0 "$spid" 2>/dev/null; then verdict=FAILED; fi
  row "3. Redis killed (SIGKILL) for 2 s, then restarted" \
    "2 callers on HTTP /json for the whole run; \`--on-store-error local --redis-health-check-active-connection\`" \
    "calls during the outage answered 200: $answered of $during ($total in all); slowest call ${maxlat}s; /healthcheck during the outage $down_health; healthy again $rec after Redis restarted" \
    "$verdict"
  kill "$spid"
  wait "$spid" 2>/dev/null || true
}

# 4. Redis paused, a caller with a short deadline -------------------------
redis_paused() {
  local workers_pids=()
  local rport grpc http debug
  rport=$(free_port) grpc=$(free_port) http=$(free_port) debug=$(free_port)
  start_redis "$rport"
  start_sluice paused "$grpc" "$http" --debug-addr "127.0.0.1:$debug" --store redis --redis-addr "127.0.0.1:$rport" \
    --on-store-error deny --redis-timeout 500ms
  local spid=$sluice_pid stop=$work/paused-stop w
  for w in short1 short2 normal1 normal2; do
    (
      timeout=1s
      case $w in short*) timeout=2ms ;; esac
      ok=0 bad=0
      while [ ! -e "$stop" ]; do
        rc=0
        "$sluice" query --addr "127.0.0.1:$grpc" --domain faults --timeout "$timeout" roomy=a >/dev/null 2>&1 || rc=$?
        if [ "$rc" -eq 0 ]; then ok=$((ok + 1)); else bad=$((bad + 1)); fi
      done
      echo "$ok $bad" >"$work/paused-$w"
    ) &
    workers_pids+=($!)
  done
  local i
  for i in 1 2 3; do
    sleep 0.7
    kill -STOP "$redis_pid"
    sleep 0.2
    kill -CONT "$redis_pid"
  done
  sleep 0.5
  touch "$stop"
  wait "${workers_pids[@]}" 2>/dev/null || true
  local nok nbad sok sbad down fallback
  read -r nok nbad < <(cat "$work"/paused-normal* | awk '{o += $1; b += $2} END {print o + 0, b + 0}')
  read -r sok sbad < <(cat "$work"/paused-short* | awk '{o += $1; b += $2} END {print o + 0, b + 0}')
  down=$(metric "$debug" 'sluice_store_primary_transitions_total{to="down"}')
  fallback=$(metric "$debug" 'sluice_store_fallback_answers_total{policy="deny"}')
  local verdict=ok
  if [ "$nbad" -ne 0 ] || [ "$down" != 0 ]; then verdict=FAILED; fi
  row "4. Redis paused (SIGSTOP) 3× 200 ms, callers with a 2 ms deadline" \
    "2 callers with a 2 ms deadline and 2 with 1 s, gRPC \`sluice query\` in loops; \`--on-store-error deny --redis-timeout 500ms\`" \
    "1 s callers failed or denied: $nbad of $((nok + nbad)); 2 ms callers answered OK $sok of $((sok + sbad)); store marked down $down times; deny-policy answers $fallback" \
    "$verdict"
  kill "$spid"
  wait "$spid" 2>/dev/null || true
}

# 5. SIGTERM with calls in flight ----------------------------------------
sigterm() {
  local workers_pids=()
  local rport grpc http
  rport=$(free_port) grpc=$(free_port) http=$(free_port)
  start_redis "$rport"
  start_sluice term "$grpc" "$http" --debug-addr off --store redis --redis-addr "127.0.0.1:$rport" \
    --redis-timeout 5s --shutdown-timeout 3s
  local spid=$sluice_pid body i
  body='{"domain":"faults","descriptors":[{"entries":[{"key":"roomy","value":"a"}]}]}'
  # warm the connections to Redis
  curl -s -o /dev/null --max-time 5 --data-binary "$body" "http://127.0.0.1:$http/json"
  kill -STOP "$redis_pid"
  (sleep 1; kill -CONT "$redis_pid") &
  workers_pids+=($!)
  sleep 0.2
  : >"$work/term-calls"
  for i in $(seq 20); do
    curl -s -o /dev/null -w '%{http_code} %{time_total}\n' --max-time 8 --data-binary "$body" \
      "http://127.0.0.1:$http/json" >>"$work/term-calls" || echo "000 8" >>"$work/term-calls" &
    workers_pids+=($!)
  done
  sleep 0.3
  local t0 t1 rc=0
  t0=$(now_ms)
  kill -TERM "$spid"
  wait "$spid" || rc=$?
  t1=$(now_ms)
  wait "${workers_pids[@]}" 2>/dev/null || true
  local ok total
  total=$(wc -l <"$work/term-calls")
  ok=$(awk '$1 == 200' "$work/term-calls" | wc -l)
  local verdict=ok
  if [ "$ok" -ne 20 ] || [ "$rc" -ne 0 ] || [ $((t1 - t0)) -gt 3500 ]; then verdict=FAILED; fi
  row "5. SIGTERM with calls in flight" \
    "20 HTTP /json calls held in flight by Redis paused (SIGSTOP) for 1 s, then SIGTERM to sluice; \`--shutdown-timeout 3s\`" \
    "in-flight calls answered 200: $ok of $total; exited $((t1 - t0)) ms after SIGTERM with status $rc" \
    "$verdict"
}

# 6. Bad reloads -----------------------------------------------------------
bad_reloads() {
  local grpc http dbg rt=$work/rt
  grpc=$(free_port) http=$(free_port) dbg=$(free_port)
  mkdir -p "$rt/v1/app/config" "$rt/v2/app/config" "$rt/v3/app/config"
  printf 'domain: reload\ndescriptors:\n  - key: r\n    rate_limit: {unit: hour, requests_per_unit: 3}\n' >"$rt/v1/app/config/reload.yaml"
  printf 'domain: reload\ndescriptors:\n  - key: r\n    rate_limit: {unit: fortnight, requests_per_unit: 5}\n' >"$rt/v2/app/config/reload.yaml"
  printf 'domain: reload\ndescriptors:\n  - key: r\n    rate_limit: {unit: hour, requests_per_unit: 7}\n' >"$rt/v3/app/config/reload.yaml"
  ln -s v1 "$rt/current"
  "$sluice" serve --runtime-root "$rt/current" --runtime-subdirectory app --grpc-addr "127.0.0.1:$grpc" \
    --http-addr "127.0.0.1:$http" --debug-addr "127.0.0.1:$dbg" --log-level warn >"$work/reload.log" 2>&1 &
  local spid=$!
  pids+=("$spid")
  wait_port "$http"
  wait_port "$dbg"
  limit() { # the limit the service answers for r=x, "error" when it does not answer one
    curl -s --max-time 2 --data-binary '{"domain":"reload","descriptors":[{"entries":[{"key":"r","value":"x"}],"hitsAddend":"0"}]}' \
      "http://127.0.0.1:$http/json" | sed -n 's/.*"requestsPerUnit":\([0-9]*\).*/\1/p' | grep . || echo error
  }
  failures() { # failed reloads so far (the series appears with the first)
    local v
    v=$(metric "$dbg" 'sluice_config_reloads_total{kind="descriptors",result="failure"}')
    if [ "$v" = absent ]; then echo 0; else echo "$v"; fi
  }
  settle() { # wait up to 5 s for the failure count to leave $1 (or for the limit to become $2)
    local i
    for i in $(seq 50); do
      if [ "$(failures)" != "$1" ] || [ "$(limit)" = "$2" ]; then return 0; fi
      sleep 0.1
    done
  }
  local before=$(limit) f0 steps=() healthy=0 checks=0
  f0=$(failures)
  # a. a broken file written in place of the good one
  printf 'domain: reload\ndescriptors:\n  - key: r\n    rate_limit: {unit: hour, requests_per_unit: [\n' >"$rt/v1/app/config/reload.yaml.tmp"
  mv "$rt/v1/app/config/reload.yaml.tmp" "$rt/v1/app/config/reload.yaml"
  settle "$f0" none
  steps+=("broken YAML in place: limit $(limit), failures $(failures)")
  checks=$((checks + 1)); [ "$(health "$http")" = 200 ] && healthy=$((healthy + 1))
  # b. the root swapped to a version with an invalid unit
  local f1
  f1=$(failures)
  ln -sfn v2 "$rt/current.new" && mv -T "$rt/current.new" "$rt/current"
  settle "$f1" none
  steps+=("root swapped to an invalid unit: limit $(limit), failures $(failures)")
  checks=$((checks + 1)); [ "$(health "$http")" = 200 ] && healthy=$((healthy + 1))
  # c. the root swapped to a good version
  ln -sfn v3 "$rt/current.new" && mv -T "$rt/current.new" "$rt/current"
  settle "$(failures)" 7
  local after
  after=$(limit)
  steps+=("root swapped to a good version: limit $after")
  checks=$((checks + 1)); [ "$(health "$http")" = 200 ] && healthy=$((healthy + 1))
  local last alive=yes
  last=$(metric "$dbg" 'sluice_config_last_reload_successful{kind="descriptors"}')
  kill -0 "$spid" 2>/dev/null || alive=no
  local verdict=ok
  if [ "$before" != 3 ] || [ "${steps[0]}" != "broken YAML in place: limit 3, failures $((f0 + 1))" ] ||
    [ "${steps[1]}" != "root swapped to an invalid unit: limit 3, failures $((f0 + 2))" ] ||
    [ "$after" != 7 ] || [ "$last" != 1 ] || [ "$healthy" != "$checks" ] || [ "$alive" != yes ]; then
    verdict=FAILED
  fi
  row "6. bad reloads, then a good one" \
    "\`--runtime-root\` on a symlink, limit 3/hour; a broken YAML file written in place, then the root swapped to a version with an invalid unit, then to a good version (7/hour)" \
    "answered limit $before at start; $(printf '%s; ' "${steps[@]}")last reload successful $last; /healthcheck 200 in $healthy of $checks checks; process alive: $alive" \
    "$verdict"
}

# 7. HTTP/2 abuse ----------------------------------------------------------
h2_abuse() {
  local rport grpc http dbg
  rport=$(free_port) grpc=$(free_port) http=$(free_port) dbg=$(free_port)
  start_redis "$rport"
  start_sluice h2 "$grpc" "$http" --debug-addr "127.0.0.1:$dbg" --store redis --redis-addr "127.0.0.1:$rport"
  local spid=$sluice_pid body steps=() verdict=ok
  wait_port "$dbg"
  body='{"domain":"faults","descriptors":[{"entries":[{"key":"roomy","value":"a"}]}]}'
  curl -s -o /dev/null --max-time 5 --data-binary "$body" "http://127.0.0.1:$http/json" # warm Redis's connections
  abuse() { "$work/h2abuse" -addr "127.0.0.1:$grpc" "$@"; }
  field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" "$2"; }
  heap_mib() { metric "$dbg" go_memstats_heap_inuse_bytes | awk '{printf "%d", $1 / 1048576}'; }

  # a. rapid reset while Redis is paused: the calls' handlers wait
  kill -STOP "$redis_pid"
  abuse -mode reset -n 200000 -hold 1s >"$work/h2-reset" &
  local apid=$! maxg=0 g
  while kill -0 "$apid" 2>/dev/null; do
    g=$(metric "$dbg" go_goroutines)
    case $g in absent | "") ;; *) if [ "${g%.*}" -gt "$maxg" ]; then maxg=${g%.*}; fi ;; esac
    sleep 0.1
  done
  wait "$apid" || true
  kill -CONT "$redis_pid"
  steps+=("200,000 calls opened and reset on one connection, Redis paused: at most $maxg goroutines")
  if [ "$maxg" -ge 5000 ]; then verdict=FAILED; fi

  # held NAME ARGS...: runs the abuser with ARGS, its connections held 3 s,
  # into $work/h2-NAME; 2.5 s in, sets heap and rss (MiB) for the server,
  # and during to how a normal gRPC call on a connection of its own fared
  local heap rss during
  held() {
    local name=$1 pid
    shift
    abuse "$@" -hold 3s >"$work/h2-$name" &
    pid=$!
    sleep 2.5
    heap=$(heap_mib) rss=$(($(rss_kib "$spid") / 1024))
    during=answered
    "$sluice" query --addr "127.0.0.1:$grpc" --domain faults --timeout 2s roomy=a >/dev/null 2>&1 || during=failed
    wait "$pid" || true
  }

  # b. calls that declare 4 MiB and send 5 bytes
  held declared -mode declared -conns 8 -streams 1000
  steps+=("8 connections × 1,000 calls declaring 4 MiB and sending 5 bytes: heap in use $heap MiB, RSS $rss MiB, a normal call meanwhile $during")
  if [ "$heap" -ge 512 ] || [ "$during" != answered ]; then verdict=FAILED; fi

  # c. calls that never send a request, past --grpc-max-streams (65,536):
  # the connections holding more than their share are refused, not a
  # normal caller
  held idle -mode idle -conns 80 -streams 1000
  local refused counted
  refused=$(field refused "$work/h2-idle")
  counted=$(metric "$dbg" 'sluice_grpc_calls_refused_total{reason="max_streams"}')
  steps+=("80 connections × 1,000 calls sending no request: $refused refused ($counted in \`sluice_grpc_calls_refused_total{reason=\"max_streams\"}\`), heap in use $heap MiB, RSS $rss MiB, a normal call meanwhile $during")
  if [ "${refused:-0}" -lt 1 ] || [ "$counted" != "$refused" ] || [ "$heap" -ge 512 ] || [ "$during" != answered ]; then verdict=FAILED; fi

  # d. calls that send 1 MiB of a 4 MiB message and never finish it
  held unfinished -mode unfinished -conns 16 -streams 100 -send 1048576
  local exhausted
  exhausted=$(field resource_exhausted "$work/h2-unfinished")
  steps+=("16 connections × 100 calls sending 1 MiB of a 4 MiB message: $exhausted answered RESOURCE_EXHAUSTED, heap in use $heap MiB, RSS $rss MiB, a normal call meanwhile $during")
  if [ "${exhausted:-0}" -lt 1 ] || [ "$rss" -ge 1024 ] || [ "$during" != answered ]; then verdict=FAILED; fi

  # e. calls that send 1 MiB of headers and no request
  held headers -mode headers -conns 4 -streams 200 -send 1000000
  refused=$(field refused "$work/h2-headers")
  steps+=("4 connections × 200 calls sending 1 MB of headers and no request: $refused refused, heap in use $heap MiB, RSS $rss MiB, a normal call meanwhile $during")
  if [ "${refused:-0}" -lt 1 ] || [ "$rss" -ge 1024 ] || [ "$during" != answered ]; then verdict=FAILED; fi

  # f. and then a normal caller
  local code alive=yes
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 --data-binary "$body" "http://127.0.0.1:$http/json" || true)
  if ! "$sluice" query --addr "127.0.0.1:$grpc" --domain faults --timeout 5s roomy=a >/dev/null 2>&1; then code="$code, gRPC failed"; verdict=FAILED; fi
  kill -0 "$spid" 2>/dev/null || alive=no
  if [ "${code%%,*}" != 200 ] || [ "$alive" != yes ]; then verdict=FAILED; fi
  row "7. HTTP/2 abuse on the gRPC port" \
    "frames written by \`scripts/h2abuse\`; \`--store redis\`, defaults otherwise (\`--grpc-max-concurrent-streams\` 1000, \`--grpc-max-streams\` 65,536, \`--grpc-max-pending-bytes\` 64 MiB)" \
    "$(printf '%s; ' "${steps[@]}")then a normal call answered $code over /json and over gRPC; process alive: $alive" \
    "$verdict"
  kill "$spid"
  wait "$spid" 2>/dev/null || true
}

# 8. Slow HTTP clients -------------------------------------------------------
slow_http() {
  local grpc http dbg
  grpc=$(free_port) http=$(free_port) dbg=$(free_port)
  start_sluice slow "$grpc" "$http" --debug-addr "127.0.0.1:$dbg" --store memory
  local spid=$sluice_pid body steps=() verdict=ok mode rss during answered pid
  body='{"domain":"faults","descriptors":[{"entries":[{"key":"roomy","value":"a"}]}]}'
  for mode in slowheader slowbody; do
    "$work/h2abuse" -addr "127.0.0.1:$http" -mode "$mode" -conns 2000 -send 921600 -hold 3s >"$work/http-$mode" &
    pid=$!
    sleep 2.5
    rss=$(($(rss_kib "$spid") / 1024))
    during=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 --data-binary "$body" "http://127.0.0.1:$http/json" || true)
    wait "$pid" || true
    answered=$(sed -n 's/.*answered=\([^ ]*\).*/\1/p' "$work/http-$mode")
    steps+=("$mode: answered ${answered:-none}, RSS $rss MiB, a normal /json call meanwhile $during")
    if [ "$rss" -ge 1024 ] || [ "$during" != 200 ] || [ -z "$answered" ]; then verdict=FAILED; fi
  done
  # the 503s, as the server counted them: at least those the tool read
  # (bodies refused once the tool had closed its connections count too)
  local refused counted
  refused=$(sed -n 's/.*503:\([0-9]*\).*/\1/p' "$work/http-slowbody")
  counted=$(metric "$dbg" sluice_http_bodies_refused_total)
  steps+=("bodies refused as \`sluice_http_bodies_refused_total\` counts them: $counted")
  case $counted in absent | "") verdict=FAILED ;; *) if [ "${counted%.*}" -lt "${refused:-0}" ]; then verdict=FAILED; fi ;; esac
  local alive=yes
  kill -0 "$spid" 2>/dev/null || alive=no
  if [ "$alive" != yes ]; then verdict=FAILED; fi
  row "8. slow HTTP clients" \
    "2,000 connections each sending 900 KB of one header line (slowheader), then 2,000 each sending 900 KB of a 1,000,000-byte body (slowbody), never finishing, held 3 s, by \`scripts/h2abuse\`; defaults (\`--http-max-header-bytes\` 64 KiB, 64 MiB for bodies being read)" \
    "$(printf '%s; ' "${steps[@]}")process alive: $alive" \
    "$verdict"
  kill "$spid"
  wait "$spid" 2>/dev/null || true
}

bad_inputs
over_admission
redis_killed
redis_paused
sigterm
bad_reloads
h2_abuse
slow_http

echo "scripts/faults.sh, $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -sm), $(nproc) cores, $(go version | awk '{print $3}'), $(redis-server --version | awk '{print $3}')"
echo
echo "| scenario | tried | measured | held |"
echo "|---|---|---|---|"
printf '%s\n' "${rows[@]}"
exit "$failed"
