package app_test

import (
	"bufio"
	"context"
	"io"
	"maps"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/sluice-rl/sluice/app"
)

// statsConfig has a plain rule, a shadow-mode rule and a nested rule.
const statsConfig = `domain: modes
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: route
    value: api
    descriptors:
      - key: http_method
        rate_limit: {unit: minute, requests_per_unit: 10}
`

// runStatsScript makes the calls whose statistics statsScriptCounters
// lists: within, near and over a limit, a shadow-mode rule over its
// limit, a nested rule, an unknown domain, a bad request, and a config
// reload that fails. It returns the number of ShouldRateLimit calls.
func runStatsScript(t *testing.T, ta *testApp) int {
	t.Helper()
	calls := 0
	for range 6 { // 4 within, the 5th within and near, the 6th over
		ta.ask(t, "modes", desc("user", "alice"))
		calls++
	}
	for range 2 { // within and near (limit 1), then over: answered OK
		if got := ta.ask(t, "modes", desc("shadow", "x")).OverallCode; got != rlsv3.RateLimitResponse_OK {
			t.Fatalf("shadow-mode rule: got %v, want OK", got)
		}
		calls++
	}
	ta.ask(t, "modes", desc("route", "api", "http_method", "GET"))
	calls++
	// An unknown domain is counted once a descriptor, as upstream counts
	// it.
	ta.askReq(t, &rlsv3.RateLimitRequest{Domain: "nope", Descriptors: []*rlcommon.RateLimitDescriptor{desc("user", "alice"), desc("user", "bob")}})
	calls++
	// A limit override with no entries: upstream's stats key is the
	// domain and a dot.
	ta.askReq(t, &rlsv3.RateLimitRequest{Domain: "modes", Descriptors: []*rlcommon.RateLimitDescriptor{
		{Limit: &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_HOUR}},
	}})
	calls++
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := ta.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{}); err == nil {
		t.Fatal("a request without a domain: got no error, want InvalidArgument")
	}
	calls++
	writeFile(t, filepath.Join(ta.dir, "broken.yaml"), "domain: [\n")
	if err := ta.Reload(); err == nil {
		t.Fatal("reload of a broken file: got no error")
	}
	return calls
}

// statsScriptCounters are the StatsD counters runStatsScript produces,
// named as envoyproxy/ratelimit names them.
func statsScriptCounters(calls int) map[string]uint64 {
	return map[string]uint64{
		"ratelimit.service.rate_limit.modes.user.total_hits":                    6,
		"ratelimit.service.rate_limit.modes.user.within_limit":                  5,
		"ratelimit.service.rate_limit.modes.user.near_limit":                    1,
		"ratelimit.service.rate_limit.modes.user.over_limit":                    1,
		"ratelimit.service.rate_limit.modes.shadow.total_hits":                  2,
		"ratelimit.service.rate_limit.modes.shadow.within_limit":                1,
		"ratelimit.service.rate_limit.modes.shadow.near_limit":                  1,
		"ratelimit.service.rate_limit.modes.shadow.over_limit":                  1,
		"ratelimit.service.rate_limit.modes.shadow.shadow_mode":                 1,
		"ratelimit.service.rate_limit.modes.route_api.http_method.total_hits":   1,
		"ratelimit.service.rate_limit.modes.route_api.http_method.within_limit": 1,
		"ratelimit.service.rate_limit.nope.domain_not_found":                    2,
		"ratelimit.service.rate_limit.modes..total_hits":                        1,
		"ratelimit.service.rate_limit.modes..within_limit":                      1,
		"ratelimit.service.config_load_success":                                 1,
		"ratelimit.service.config_load_error":                                   1,
		"ratelimit.service.call.should_rate_limit.service_error":                1,
		"ratelimit_server.ShouldRateLimit.total_requests":                       uint64(calls),
	}
}

var (
	counterLine = regexp.MustCompile(`^([A-Za-z0-9_.]+):(\d+)\|c$`)
	timerLine   = regexp.MustCompile(`^ratelimit_server\.ShouldRateLimit\.response_time:\d+(\.\d+)?\|ms$`)
)

// checkStatsdLines checks lines against the script's counters and one
// response-time timer per call.
func checkStatsdLines(t *testing.T, lines []string, calls int) {
	t.Helper()
	got := map[string]uint64{}
	timers := 0
	for _, l := range lines {
		if m := counterLine.FindStringSubmatch(l); m != nil {
			v, _ := strconv.ParseUint(m[2], 10, 64)
			if _, dup := got[m[1]]; dup {
				t.Errorf("counter %s sent twice in one flush", m[1])
			}
			got[m[1]] = v
			continue
		}
		if timerLine.MatchString(l) {
			timers++
			continue
		}
		t.Errorf("unexpected line %q", l)
	}
	want := statsScriptCounters(calls)
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if got[name] != want[name] {
			t.Errorf("%s: got %d, want %d", name, got[name], want[name])
		}
	}
	for _, name := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[name]; !ok {
			t.Errorf("unexpected counter %s:%d", name, got[name])
		}
	}
	if timers != calls {
		t.Errorf("response_time timers: got %d, want %d", timers, calls)
	}
}

func TestStatsdReceivesUpstreamStatNames(t *testing.T) {
	for _, protocol := range []string{"tcp", "udp"} {
		t.Run("over "+protocol+", one flush carries every counter and timer", func(t *testing.T) {
			lines := make(chan string, 1000)
			addr := listenStatsd(t, protocol, lines)
			ta := start(t, map[string]string{"modes.yaml": statsConfig}, func(o *app.Options) {
				o.Stats.StatsdAddr, o.Stats.StatsdProtocol = addr, protocol
				o.Stats.FlushInterval = time.Hour // flushed by the test
				o.ReloadDelay = time.Hour         // reloaded by the test only
			})
			calls := runStatsScript(t, ta)
			if err := ta.StatsD().Flush(); err != nil {
				t.Fatalf("Flush: %v", err)
			}
			want := len(statsScriptCounters(calls)) + calls
			checkStatsdLines(t, collect(t, lines, want), calls)

			// Nothing changed: a second flush sends nothing but the new
			// call's statistics.
			ta.ask(t, "modes", desc("user", "bob"))
			if err := ta.StatsD().Flush(); err != nil {
				t.Fatalf("second Flush: %v", err)
			}
			got := collect(t, lines, 4)
			wantSecond := []string{
				"ratelimit.service.rate_limit.modes.user.total_hits:1|c",
				"ratelimit.service.rate_limit.modes.user.within_limit:1|c",
				"ratelimit_server.ShouldRateLimit.total_requests:1|c",
			}
			if !slices.Equal(got[:3], wantSecond) || !timerLine.MatchString(got[3]) {
				t.Errorf("second flush: got %q, want %q and one timer", got, wantSecond)
			}
		})
	}
}

// listenStatsd listens on a free loopback port and sends every line
// received to lines.
func listenStatsd(t *testing.T, protocol string, lines chan<- string) string {
	t.Helper()
	if protocol == "udp" {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = pc.Close() })
		go func() {
			buf := make([]byte, 65536)
			for {
				n, _, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				for l := range strings.SplitSeq(strings.TrimSuffix(string(buf[:n]), "\n"), "\n") {
					lines <- l
				}
			}
		}()
		return pc.LocalAddr().String()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					lines <- sc.Text()
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// collect waits for n lines.
func collect(t *testing.T, lines <-chan string, n int) []string {
	t.Helper()
	var got []string
	timeout := time.After(5 * time.Second)
	for len(got) < n {
		select {
		case l := <-lines:
			got = append(got, l)
		case <-timeout:
			t.Fatalf("got %d lines, want %d: %q", len(got), n, got)
		}
	}
	select {
	case l := <-lines:
		t.Errorf("unexpected extra line %q", l)
	case <-time.After(50 * time.Millisecond):
	}
	return got
}

func TestStatsdReconnectsAfterTheServerGoesAway(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ta := start(t, map[string]string{"modes.yaml": statsConfig}, func(o *app.Options) {
		o.Stats.StatsdAddr, o.Stats.FlushInterval = ln.Addr().String(), time.Hour
	})
	readOne := func() string {
		t.Helper()
		_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second))
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		l, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		return strings.TrimSpace(l)
	}
	ta.ask(t, "modes", desc("user", "alice"))
	if err := ta.StatsD().Flush(); err != nil {
		t.Fatal(err)
	}
	if got, want := readOne(), "ratelimit.service.rate_limit.modes.user.total_hits:1|c"; got != want {
		t.Fatalf("first connection: got %q, want %q", got, want)
	}
	// The server closed the connection: a flush soon fails (the first
	// write may still be taken by the socket), and the next one redials.
	deadline := time.Now().Add(5 * time.Second)
	for {
		ta.ask(t, "modes", desc("user", "alice"))
		if err := ta.StatsD().Flush(); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("flushes to a closed connection never failed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	ta.ask(t, "modes", desc("user", "alice"))
	if err := ta.StatsD().Flush(); err != nil {
		t.Fatalf("flush after a failed one: got %v, want a new connection", err)
	}
	if got, want := readOne(), "ratelimit.service.rate_limit.modes.user.total_hits:"; !strings.HasPrefix(got, want) {
		t.Errorf("after reconnecting: got %q, want %q...", got, want)
	}
}

func TestPrometheusCompatSeriesHaveUpstreamNames(t *testing.T) {
	ta := start(t, map[string]string{"modes.yaml": statsConfig}, func(o *app.Options) {
		o.Stats.PrometheusCompat = true
		o.Stats.PrometheusAddr, o.Stats.PrometheusPath = "127.0.0.1:0", "/prom"
		o.ReloadDelay = time.Hour
	})
	calls := runStatsScript(t, ta)
	// The series upstream's default statsd_exporter mapping
	// (src/stats/prom/default_mapper.yaml at f2fb157) gives these stats;
	// the last ones match no mapping, so statsd_exporter names them after
	// the stat.
	want := []string{
		`ratelimit_service_rate_limit_total_hits{domain="modes",key1="user"} 6`,
		`ratelimit_service_rate_limit_within_limit{domain="modes",key1="user"} 5`,
		`ratelimit_service_rate_limit_near_limit{domain="modes",key1="user"} 1`,
		`ratelimit_service_rate_limit_over_limit{domain="modes",key1="user"} 1`,
		`ratelimit_service_rate_limit_shadow_mode{domain="modes",key1="shadow"} 1`,
		`ratelimit_service_rate_limit_total_hits{domain="modes",key1="route_api",key2="http_method"} 1`,
		`ratelimit_service_should_rate_limit_error{err_type="service_error"} 1`,
		`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} ` + strconv.Itoa(calls),
		`ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"} ` + strconv.Itoa(calls),
		`ratelimit_service_config_load_success 1`,
		`ratelimit_service_config_load_error 1`,
		`ratelimit_service_rate_limit_nope_domain_not_found 2`,
		`ratelimit_service_rate_limit_total_hits{domain="modes",key1=""} 1`,
		`ratelimit_service_rate_limit_within_limit{domain="modes",key1=""} 1`,
	}
	// Upstream's series appear with their first count.
	absent := []string{
		`ratelimit_service_rate_limit_shadow_mode{domain="modes",key1="user"}`,
		`ratelimit_service_should_rate_limit_error{err_type="redis_error"}`,
	}
	for _, tc := range []struct{ name, url string }{
		{name: "on --prometheus-addr", url: "http://" + ta.PrometheusAddr() + "/prom"},
		{name: "on the debug /metrics, beside Sluice's own", url: "http://" + ta.DebugAddr() + "/metrics"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := ta.http.Get(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			have := map[string]bool{}
			for l := range strings.SplitSeq(string(body), "\n") {
				have[l] = true
				if name, _, _ := strings.Cut(l, "{"); strings.HasPrefix(l, "ratelimit_service_rate_limit_") && strings.Contains(l, "{") {
					if !strings.Contains(l, `domain="`) || !strings.Contains(l, `key1="`) {
						t.Errorf("series %s lacks the domain and key1 labels: %q", name, l)
					}
				}
			}
			for _, w := range want {
				if !have[w] {
					t.Errorf("missing %q", w)
				}
			}
			for _, a := range absent {
				if strings.Contains(string(body), a) {
					t.Errorf("got %q, want no such series before its first count", a)
				}
			}
			hasSluice := strings.Contains(string(body), "sluice_ratelimit_total_hits")
			if wantSluice := strings.Contains(tc.url, "/metrics"); hasSluice != wantSluice {
				t.Errorf("Sluice's own metrics present: got %v, want %v", hasSluice, wantSluice)
			}
		})
	}
}

func TestStatsEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    app.StatsOptions
		wantErr string
	}{
		{name: "an upstream environment sends StatsD to localhost:8125, as upstream",
			env:  map[string]string{"REDIS_URL": "r:1"},
			want: app.StatsOptions{StatsdAddr: "localhost:8125", FlushInterval: 10 * time.Second, PrometheusPath: "/metrics"}},
		{name: "USE_STATSD=false sends nothing",
			env:  map[string]string{"USE_STATSD": "false"},
			want: app.StatsOptions{FlushInterval: 10 * time.Second, PrometheusPath: "/metrics"}},
		{name: "DISABLE_STATS sends nothing",
			env:  map[string]string{"DISABLE_STATS": "true", "STATSD_HOST": "h"},
			want: app.StatsOptions{FlushInterval: 10 * time.Second, PrometheusPath: "/metrics"}},
		{name: "STATSD_HOST, STATSD_PORT, STATS_FLUSH_INTERVAL and EXTRA_TAGS",
			env:  map[string]string{"STATSD_HOST": "stats.example", "STATSD_PORT": "9125", "STATS_FLUSH_INTERVAL": "3s", "EXTRA_TAGS": "env:prod,zone:a"},
			want: app.StatsOptions{StatsdAddr: "stats.example:9125", FlushInterval: 3 * time.Second, ExtraTags: "env:prod,zone:a", PrometheusPath: "/metrics"}},
		{name: "STATSD_PROTOCOL=udp",
			env:  map[string]string{"STATSD_PROTOCOL": "udp"},
			want: app.StatsOptions{StatsdAddr: "localhost:8125", StatsdProtocol: "udp", FlushInterval: 10 * time.Second, PrometheusPath: "/metrics"}},
		{name: "a STATSD_PROTOCOL other than tcp or udp is named",
			env: map[string]string{"STATSD_PROTOCOL": "sctp"}, wantErr: `STATSD_PROTOCOL="sctp"`},
		{name: "USE_DOG_STATSD with its mogrifiers",
			env: map[string]string{"USE_STATSD": "false", "USE_DOG_STATSD": "true", "USE_DOG_STATSD_MOGRIFIERS": "HITS",
				"DOG_STATSD_MOGRIFIER_HITS_PATTERN": `^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$`,
				"DOG_STATSD_MOGRIFIER_HITS_NAME":    "ratelimit.service.rate_limit.$3",
				"DOG_STATSD_MOGRIFIER_HITS_TAGS":    "domain:$1,descriptor:$2"},
			want: app.StatsOptions{StatsdAddr: "localhost:8125", DogStatsD: true, FlushInterval: 10 * time.Second, PrometheusPath: "/metrics",
				Mogrifiers: []string{"HITS"}, MogrifierDefs: map[string]app.MogrifierDef{"HITS": {
					Pattern: `^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$`, Name: "ratelimit.service.rate_limit.$3", Tags: "domain:$1,descriptor:$2"}}}},
		{name: "USE_PROMETHEUS serves on PROMETHEUS_ADDR and PROMETHEUS_PATH",
			env:  map[string]string{"USE_STATSD": "false", "USE_PROMETHEUS": "true", "PROMETHEUS_PATH": "/m", "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS": "true"},
			want: app.StatsOptions{FlushInterval: 10 * time.Second, PrometheusCompat: true, PrometheusAddr: ":9090", PrometheusPath: "/m", PrometheusResponseTimeMillis: true}},
		{name: "USE_PROMETHEUS with USE_STATSD left true is refused, as upstream refuses it",
			env: map[string]string{"USE_PROMETHEUS": "true"}, wantErr: "one stats sink"},
		{name: "a mogrifier without a pattern is named",
			env:     map[string]string{"USE_STATSD": "false", "USE_DOG_STATSD": "true", "USE_DOG_STATSD_MOGRIFIERS": "X", "DOG_STATSD_MOGRIFIER_X_NAME": "n"},
			wantErr: "DOG_STATSD_MOGRIFIER_X: no pattern"},
		{name: "bad EXTRA_TAGS are named",
			env: map[string]string{"EXTRA_TAGS": "novalue"}, wantErr: `invalid tag "novalue"`},
		{name: "SLUICE_ variables win",
			env:  map[string]string{"STATSD_HOST": "h", "SLUICE_STATSD_ADDR": "other:1", "SLUICE_STATSD_PROTOCOL": "udp"},
			want: app.StatsOptions{StatsdAddr: "other:1", StatsdProtocol: "udp", FlushInterval: 10 * time.Second, PrometheusPath: "/metrics"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := app.ParseServe(nil, envOf(tc.env), io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(o.Stats.MogrifierDefs) == 0 {
				o.Stats.MogrifierDefs = nil
			}
			if got := o.Stats; !statsOptionsEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func statsOptionsEqual(a, b app.StatsOptions) bool {
	return slices.Equal(a.Mogrifiers, b.Mogrifiers) && maps.Equal(a.MogrifierDefs, b.MogrifierDefs) &&
		a.StatsdAddr == b.StatsdAddr && a.StatsdProtocol == b.StatsdProtocol && a.FlushInterval == b.FlushInterval &&
		a.ExtraTags == b.ExtraTags && a.DogStatsD == b.DogStatsD && a.PrometheusCompat == b.PrometheusCompat &&
		a.PrometheusAddr == b.PrometheusAddr && a.PrometheusPath == b.PrometheusPath &&
		a.PrometheusResponseTimeMillis == b.PrometheusResponseTimeMillis
}

func TestStatsdCountsLocalCacheAnswers(t *testing.T) {
	lines := make(chan string, 100)
	addr := listenStatsd(t, "tcp", lines)
	ta := start(t, map[string]string{"modes.yaml": statsConfig}, func(o *app.Options) {
		o.Stats.StatsdAddr, o.Stats.FlushInterval = addr, time.Hour
		o.LocalCacheSize = 1 << 20
	})
	// Limit 5: five within, the sixth over from the store, which the cache
	// then remembers: the next three are answered from memory.
	for range 9 {
		ta.ask(t, "modes", desc("user", "alice"))
	}
	if err := ta.StatsD().Flush(); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, l := range collect(t, lines, 5+2+9) { // five rule stats, two service counters, nine timers
		if name, v, ok := strings.Cut(l, ":"); ok && !strings.HasPrefix(name, "ratelimit_server.ShouldRateLimit.response_time") {
			got[name] = v
		}
	}
	for name, want := range map[string]string{
		"ratelimit.service.rate_limit.modes.user.total_hits":                  "9|c",
		"ratelimit.service.rate_limit.modes.user.within_limit":                "5|c",
		"ratelimit.service.rate_limit.modes.user.near_limit":                  "1|c",
		"ratelimit.service.rate_limit.modes.user.over_limit":                  "4|c",
		"ratelimit.service.rate_limit.modes.user.over_limit_with_local_cache": "3|c",
	} {
		if got[name] != want {
			t.Errorf("%s: got %q, want %q", name, got[name], want)
		}
	}
}

// Over UDP, a stat whose line no datagram can carry (a detailed_metric
// key built from a 65,500-byte value) is skipped and counted in
// sluice_statsd_lines_too_long_total, and the flush's other stats arrive.
func TestStatsdCountsLinesTooLongForUDP(t *testing.T) {
	lines := make(chan string, 1000)
	addr := listenStatsd(t, "udp", lines)
	const detailed = `domain: long
descriptors:
  - key: token
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
`
	ta := start(t, map[string]string{"long.yaml": detailed}, func(o *app.Options) {
		o.Stats.StatsdAddr, o.Stats.StatsdProtocol = addr, "udp"
		o.Stats.FlushInterval = time.Hour // flushed by the test
	})
	ta.ask(t, "long", desc("token", strings.Repeat("t", 65_500))) // within --max-descriptor-entry-bytes
	if err := ta.StatsD().Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	// config_load_success, total_requests and the call's timer; the long
	// key's total_hits and within_limit do not come.
	got := collect(t, lines, 3)
	if !slices.Contains(got, "ratelimit_server.ShouldRateLimit.total_requests:1|c") {
		t.Errorf("got %.200q, want the flush's total_requests", got)
	}
	if n := gaugeOrCounter(t, ta.Registry(), "sluice_statsd_lines_too_long_total", nil); n != 2 {
		t.Errorf("sluice_statsd_lines_too_long_total: %v, want 2 (the long key's total_hits and within_limit)", n)
	}
}
