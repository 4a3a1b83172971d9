package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/descriptors"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/server"
	"github.com/sluice-rl/sluice/store/memory"
)

const dashConfig = `domain: shop
descriptors:
  - key: hot
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: cool
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: export
    rate_limit: {unit: minute, unit_multiplier: 15, requests_per_unit: 20}
  - key: login
    rate_limit: {unit: minute, requests_per_unit: 10, burst: 3}
  - key: health
    rate_limit: {unlimited: true}
`

// newDashboard returns an RLS on the memory store with dashConfig, its
// dashboard and the fake clock both read.
func newDashboard(t *testing.T) (*server.RLS, *server.Dashboard, *clock.Fake) {
	t.Helper()
	d, err := descriptors.Parse("shop.yaml", []byte(dashConfig))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := descriptors.New(d)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	reg := prometheus.NewRegistry()
	rls := server.NewRLS(server.RLSOptions{
		Limiter: limiter.New(memory.New(memory.Options{}), clk),
		Clock:   clk,
		Metrics: server.NewMetrics(reg),
	})
	rls.SetConfig(cfg)
	return rls, server.NewDashboard(server.DashboardOptions{RLS: rls, Clock: clk, Gatherer: reg}), clk
}

func callRule(t *testing.T, rls *server.RLS, key string, n int) {
	t.Helper()
	for range n {
		_, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "shop",
			Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: key, Value: "x"}}}}})
		if err != nil {
			t.Fatalf("ShouldRateLimit %s: %v", key, err)
		}
	}
}

func dashRule(t *testing.T, st server.DashboardState, key string) server.DashboardRule {
	t.Helper()
	for _, r := range st.Rules {
		if r.Key == key {
			return r
		}
	}
	t.Fatalf("no rule %s in %+v", key, st.Rules)
	return server.DashboardRule{}
}

func TestDashboardStateRatesAndPressure(t *testing.T) {
	rls, dash, clk := newDashboard(t)
	first := dash.State(context.Background())
	if first.WindowSeconds != 0 || dashRule(t, first, "shop.hot").CallsRate != 0 {
		t.Fatalf("first read: got window %v and calls/s %v, want no rates yet", first.WindowSeconds, dashRule(t, first, "shop.hot").CallsRate)
	}
	callRule(t, rls, "hot", 5)  // 1 allowed, 4 over
	callRule(t, rls, "cool", 8) // all allowed
	clk.Add(2 * time.Second)
	st := dash.State(context.Background())

	hot, cool := dashRule(t, st, "shop.hot"), dashRule(t, st, "shop.cool")
	tests := []struct {
		name      string
		got, want any
	}{
		{"the window is the time since the first read", st.WindowSeconds, 2.0},
		{"calls per second count every call of the window", hot.CallsRate, 2.5},
		{"over-limit per second count the refused calls", hot.OverRate, 2.0},
		{"pressure is the over-limit share", hot.Pressure, 0.8},
		{"an unpressed rule has no pressure", cool.Pressure, 0.0},
		{"the most pressed rule comes first", st.Rules[0].Key, "shop.hot"},
		{"an equally unpressed busier rule comes next", st.Rules[1].Key, "shop.cool"},
		{"totals are cumulative", hot.Over, uint64(4)},
		{"requests per second cover every call", st.RequestsRate, 6.5},
		{"the configured domains are listed", strings.Join(st.Domains, ","), "shop"},
		{"a rule's limit reads per unit", hot.Limit, "1/second"},
		{"a multiplied unit reads as a span", dashRule(t, st, "shop.export").Limit, "20 per 15 minutes"},
		{"a burst is shown", dashRule(t, st, "shop.login").Limit, "10/minute burst 3"},
		{"an unlimited rule says so", dashRule(t, st, "shop.health").Limit, "unlimited"},
		{"the config hash is 12 hex digits", len(st.Config.Hash), 12},
		{"the config counts its rules", st.Config.Rules, 5},
		{"the sampled calls' keys are the hot keys, ties by name", hotKeyNames(st.HotKeys), "shop cool=x,shop hot=x"},
		{"a sampled call's hits are scaled by the sampling", st.HotKeys[0].Hits, uint64(8)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %v, want %v", tt.got, tt.want)
			}
		})
	}
}

func hotKeyNames(hk []server.HotKey) string {
	var names []string
	for _, k := range hk {
		names = append(names, k.Key)
	}
	return strings.Join(names, ",")
}

func TestDashboardHotKeysAreBoundedAndForget(t *testing.T) {
	rls, dash, clk := newDashboard(t)
	for i := range 1000 { // 1000 distinct keys, one in 8 sampled
		_, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "shop",
			Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "cool", Value: strconv.Itoa(i)}}}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	callRule(t, rls, "hot", 80)
	st := dash.State(context.Background())
	if len(st.HotKeys) != 20 {
		t.Errorf("hot keys shown: got %d, want 20", len(st.HotKeys))
	}
	if len(st.HotKeys) > 0 && st.HotKeys[0].Key != "shop hot=x" {
		t.Errorf("hottest key: got %+v, want shop hot=x", st.HotKeys[0])
	}
	clk.Add(61 * time.Second)
	if st := dash.State(context.Background()); len(st.HotKeys) != 0 {
		t.Errorf("hot keys a minute later: got %+v, want none", st.HotKeys)
	}
}

func TestDashboardKeepsFewSamples(t *testing.T) {
	_, dash, clk := newDashboard(t)
	var st server.DashboardState
	for range 50 {
		st = dash.State(context.Background())
		clk.Add(time.Second)
	}
	if st.WindowSeconds > 5 || st.WindowSeconds < 4 {
		t.Errorf("rates window after 50 reads a second apart: got %vs, want 4s to 5s", st.WindowSeconds)
	}
	for range 50 { // reads faster than a second keep the window
		st = dash.State(context.Background())
		clk.Add(10 * time.Millisecond)
	}
	if st.WindowSeconds > 6 {
		t.Errorf("rates window after quick reads: got %vs, want at most 6s", st.WindowSeconds)
	}
	clk.Add(10 * time.Minute) // nobody looked for a while
	if st = dash.State(context.Background()); st.WindowSeconds != 0 {
		t.Errorf("rates window on the first read after a pause: got %vs, want 0 (no rates over the pause)", st.WindowSeconds)
	}
	clk.Add(time.Second)
	if st = dash.State(context.Background()); st.WindowSeconds != 1 {
		t.Errorf("rates window a second later: got %vs, want 1s", st.WindowSeconds)
	}
}

func TestDebugHandlerServesTheDashboard(t *testing.T) {
	rls, dash, _ := newDashboard(t)
	for _, withDash := range []bool{true, false} {
		d := dash
		name := "with a rate limit service"
		if !withDash {
			d, name = nil, "without a dashboard, as the proxy's debug port"
		}
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(server.DebugHandler(prometheus.NewRegistry(), func() string { return rls.Config().String() }, d))
			defer srv.Close()
			tests := []struct {
				path, wantType, wantBody string
			}{
				{"/", "text/html", `<script src="/dashboard/app.js">`},
				{"/dashboard", "text/html", "<title>Sluice dashboard</title>"},
				{"/dashboard/", "text/html", "<title>Sluice dashboard</title>"},
				{"/dashboard/app.js", "javascript", "/dashboard/state.json"},
				{"/dashboard/style.css", "text/css", "font"},
				{"/dashboard/state.json", "application/json", `"rules"`},
				{"/rlconfig", "text/plain", "shop.hot"},
				{"/metrics", "text/plain", ""},
			}
			for _, tt := range tests {
				resp, err := http.Get(srv.URL + tt.path)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), tt.wantType) || !strings.Contains(string(body), tt.wantBody) {
					t.Errorf("GET %s: got %d %q, want 200 %s containing %q", tt.path, resp.StatusCode, resp.Header.Get("Content-Type"), tt.wantType, tt.wantBody)
				}
				if strings.HasPrefix(tt.path, "/dashboard/") && strings.Contains(string(body), "://") && tt.path != "/dashboard/state.json" {
					t.Errorf("GET %s: the asset names another host: %s", tt.path, body)
				}
				if tt.path == "/dashboard/state.json" {
					var v server.DashboardState
					if err := json.Unmarshal(body, &v); err != nil {
						t.Errorf("state.json: %v", err)
					}
				}
			}
		})
	}
}
