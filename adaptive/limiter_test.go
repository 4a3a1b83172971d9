package adaptive

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluice-rl/sluice/clock"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// harness is a limiter on a fake clock in front of a handler whose
// latency is the fake clock moving while it runs.
type harness struct {
	l   *Limiter
	clk *clock.Fake
	reg *prometheus.Registry
	h   http.Handler
	// latency is how long each request takes; the clock is wound back
	// after each request so that the window stays still.
	latency time.Duration
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	hs := &harness{clk: clock.NewFake(t0), reg: prometheus.NewRegistry()}
	l, err := New(cfg, Options{Clock: hs.clk, Registerer: hs.reg})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	hs.l = l
	hs.h = l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hs.clk.Add(hs.latency)
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok"))
	}))
	return hs
}

// get sends one request and winds the clock back by the latency.
func (hs *harness) get(path string) *httptest.ResponseRecorder {
	return hs.send(httptest.NewRequest(http.MethodGet, path, nil))
}

func (hs *harness) send(r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	before := hs.clk.Now()
	hs.h.ServeHTTP(w, r)
	hs.clk.Set(before)
	return w
}

// admitted sends n requests and counts the ones that were not 429.
func (hs *harness) admitted(path string, n int) int {
	ok := 0
	for range n {
		if hs.get(path).Code != http.StatusTooManyRequests {
			ok++
		}
	}
	return ok
}

func stats(t *testing.T, l *Limiter, key string) Stats {
	t.Helper()
	s, ok := l.StatsFor(key)
	if !ok {
		t.Fatalf("key %q is not tracked", key)
	}
	return s
}

func TestAFastUpstreamGetsMaxRateThenA429(t *testing.T) {
	t.Parallel()
	hs := newHarness(t, DefaultConfig())
	hs.latency = 50 * time.Millisecond
	if got := hs.admitted("/page", 240); got != 240 {
		t.Fatalf("got %d of the first 240 admitted, want 240", got)
	}
	if got := hs.get("/page").Code; got != http.StatusTooManyRequests {
		t.Fatalf("the 241st request got %d, want 429", got)
	}
	if got := hs.get("/other").Code; got != http.StatusOK {
		t.Errorf("another URL got %d, want 200: budgets are per URL", got)
	}
}

func TestASlowUpstreamAdmitsWhatTheCurveAllows(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		latency time.Duration
		curve   Curve
		want    int
	}{
		{name: "5 s on the line admits 178 (counts 0..177 < 177.33)", latency: 5 * time.Second, want: 178},
		{name: "9.15 s on the line admits 122", latency: 9150 * time.Millisecond, want: 122},
		{name: "20 s on the line admits minRate", latency: 20 * time.Second, want: 4},
		{name: "5 s on the inverse curve admits 15 (72000/5000 = 14.4)", latency: 5 * time.Second, curve: Inverse, want: 15},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig()
			cfg.Curve = tt.curve
			hs := newHarness(t, cfg)
			hs.latency = tt.latency
			if got := hs.admitted("/report", 400); got != tt.want {
				t.Errorf("got %d admitted, want %d", got, tt.want)
			}
			want := cfg.AllowedRate(float64(tt.latency) / 1e6)
			if s := stats(t, hs.l, "/report"); s.Rate != want || s.AvgMs != float64(tt.latency)/1e6 {
				t.Errorf("got rate %g avg %g, want %g and %g", s.Rate, s.AvgMs, want, float64(tt.latency)/1e6)
			}
		})
	}
}

func TestDeniedRequestsGetTheirRulesAnswer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		path     string
		wantPage bool
	}{
		{path: "/", wantPage: true},
		{path: "/about", wantPage: true},
		{path: "/index.html", wantPage: true},
		{path: "/api/x", wantPage: false},
		{path: "/v1/api/users?id=3", wantPage: false},
		{path: "/app.js", wantPage: false},
		{path: "/site.css", wantPage: false},
		{path: "/logo.png", wantPage: false},
		{path: "/data.json", wantPage: false},
	}
	for _, tt := range tests {
		name := "an html path " + tt.path + " gets the page"
		if !tt.wantPage {
			name = "an asset path " + tt.path + " gets an empty body"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig()
			cfg.MaxRate = 1
			cfg.MinRate = 1
			hs := newHarness(t, cfg)
			hs.get(tt.path)
			hs.clk.Add(20 * time.Second)
			w := hs.get(tt.path)
			if w.Code != http.StatusTooManyRequests {
				t.Fatalf("got %d, want 429", w.Code)
			}
			for k, v := range map[string]string{
				"Cache-Control": "no-store, no-cache, must-revalidate, max-age=0",
				"Pragma":        "no-cache",
				"Expires":       "0",
				"Retry-After":   "40", // the first request leaves the window at 60 s
			} {
				if got := w.Header().Get(k); got != v {
					t.Errorf("got %s %q, want %q", k, got, v)
				}
			}
			body := w.Body.String()
			if tt.wantPage {
				if !strings.Contains(body, "<title>Whoa, Slow Down There!</title>") || !strings.HasPrefix(body, "<!DOCTYPE html>") ||
					!strings.Contains(body, `<html lang="en">`) || !strings.HasSuffix(body, "</html>\n") {
					t.Errorf("got body %q, want the full HTML page", body)
				}
				if got := w.Header().Get("Content-Type"); got != "text/html; charset=utf-8" {
					t.Errorf("got Content-Type %q, want text/html; charset=utf-8", got)
				}
			} else if body != "" || w.Header().Get("Content-Length") != "0" {
				t.Errorf("got body %q and Content-Length %q, want an empty body", body, w.Header().Get("Content-Length"))
			}
		})
	}
}

func TestRetryAfterIsAtLeastOneSecond(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.MaxRate = 1
	cfg.MinRate = 1
	hs := newHarness(t, cfg)
	hs.get("/x")
	hs.clk.Add(59*time.Second + 900*time.Millisecond)
	if got := hs.get("/x").Header().Get("Retry-After"); got != "1" {
		t.Errorf("got Retry-After %q, want 1", got)
	}
}

func TestABurstOf429sNeitherRaisesTheRateNorEntersTheAverage(t *testing.T) {
	t.Parallel()
	hs := newHarness(t, DefaultConfig())
	hs.latency = 18 * time.Second
	if got := hs.admitted("/slow", 4); got != 4 {
		t.Fatalf("got %d admitted, want 4", got)
	}
	before := stats(t, hs.l, "/slow")
	for range 500 {
		if w := hs.get("/slow"); w.Code != http.StatusTooManyRequests {
			t.Fatalf("got %d during the burst, want 429", w.Code)
		}
	}
	after := stats(t, hs.l, "/slow")
	if after != before {
		t.Errorf("after 500 denials got %+v, want %+v", after, before)
	}
	if got := counterValue(hs.l.m.deniedHTML); got != 500 {
		t.Errorf("got %g html denials, want 500", got)
	}
}

func TestTheRateRecoversWhenTheUpstreamSpeedsUp(t *testing.T) {
	t.Parallel()
	hs := newHarness(t, DefaultConfig())
	hs.latency = 18 * time.Second
	if got := hs.admitted("/x", 10); got != 4 {
		t.Fatalf("while slow got %d admitted, want 4", got)
	}
	// Half a window later the slow samples still count.
	hs.clk.Add(30 * time.Second)
	hs.latency = 10 * time.Millisecond
	if got := hs.admitted("/x", 10); got != 0 {
		t.Fatalf("30 s later got %d admitted, want 0", got)
	}
	// Once they have slid out (each was recorded when its response came,
	// 18 s after its admission), the fast upstream gets maxRate again.
	hs.clk.Add(49 * time.Second)
	if got := hs.admitted("/x", 300); got != 240 {
		t.Errorf("after the window slid got %d admitted, want 240", got)
	}
	if s := stats(t, hs.l, "/x"); s.AvgMs != 10 {
		t.Errorf("got average %g ms, want 10", s.AvgMs)
	}
}

func TestUnmeasurableRequestsAreCountedButNotAveraged(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		handler func(clk *clock.Fake) http.HandlerFunc
		ctx     func() context.Context
	}{
		{name: "an upgrade (101) is not measured", handler: func(clk *clock.Fake) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				clk.Add(10 * time.Second)
				w.WriteHeader(http.StatusSwitchingProtocols)
			}
		}},
		{name: "a hijacked connection is not measured", handler: func(clk *clock.Fake) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				clk.Add(10 * time.Second)
				_, _, _ = w.(http.Hijacker).Hijack() // the recorder cannot; the attempt is enough
			}
		}},
		{name: "a server-sent event stream is not measured", handler: func(clk *clock.Fake) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				clk.Add(10 * time.Second)
				w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
				_, _ = w.Write([]byte("data: hi\n\n"))
			}
		}},
		{name: "a request cancelled before the first byte is not measured", handler: func(clk *clock.Fake) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				clk.Add(10 * time.Second)
				_, _ = w.Write([]byte("too late"))
			}
		}, ctx: func() context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		}},
		{name: "a panicking handler is not measured", handler: func(clk *clock.Fake) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				clk.Add(10 * time.Second)
				panic(http.ErrAbortHandler)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(t0)
			l, err := New(DefaultConfig(), Options{Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			h := l.Middleware(tt.handler(clk))
			r := httptest.NewRequest(http.MethodGet, "/stream", nil)
			if tt.ctx != nil {
				r = r.WithContext(tt.ctx())
			}
			func() {
				defer func() { _ = recover() }()
				h.ServeHTTP(httptest.NewRecorder(), r)
			}()
			s := stats(t, l, "/stream")
			if s.Count != 1 || s.Samples != 0 {
				t.Errorf("got count %d and %d samples, want 1 and 0", s.Count, s.Samples)
			}
		})
	}
}

func TestAHandlerThatWritesNothingIsMeasuredWhenItReturns(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	l, _ := New(DefaultConfig(), Options{Clock: clk})
	h := l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { clk.Add(700 * time.Millisecond) }))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/quiet", nil))
	if s := stats(t, l, "/quiet"); s.Samples != 1 || s.AvgMs != 700 {
		t.Errorf("got %d samples averaging %g ms, want 1 at 700", s.Samples, s.AvgMs)
	}
}

func TestRequestsAreKeyedByRouteTemplate(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Routes = []string{"/users/{id}", "/files/{path...}"}
	clk := clock.NewFake(t0)
	l, err := New(cfg, Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", l.Middleware(ok))
	plain := l.Middleware(ok)
	for _, p := range []string{"/users/1", "/users/2?x=1", "/files/a/b.txt", "/files/c", "/about?q=1", "/about"} {
		plain.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, p, nil))
	}
	for _, p := range []string{"/items/1", "/items/2", "/items/3"} {
		mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, p, nil))
	}
	tests := []struct {
		key  string
		want int64
	}{
		{key: "/users/{id}", want: 2},
		{key: "/files/{path...}", want: 2},
		{key: "/about", want: 2},
		{key: "GET /items/{id}", want: 3},
	}
	for _, tt := range tests {
		if got := stats(t, l, tt.key).Count; got != tt.want {
			t.Errorf("key %q: got count %d, want %d", tt.key, got, tt.want)
		}
	}
	if got := l.Keys(); got != 4 {
		t.Errorf("got %d keys, want 4", got)
	}
}

// TestALongPathIsKeyedByItsStart: a path is a key only up to MaxKeyBytes,
// so that requests with long distinct paths (a server takes up to a
// megabyte of request line) cannot make the tracked keys, and their
// metric labels, take gigabytes: 150 paths of 900 KiB took a proxy from
// 22 to 255 MB before the bound.
func TestALongPathIsKeyedByItsStart(t *testing.T) {
	t.Parallel()
	l, err := New(DefaultConfig(), Options{Clock: clock.NewFake(t0)})
	if err != nil {
		t.Fatal(err)
	}
	ok := l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	long := "/p/" + strings.Repeat("a", 3*MaxKeyBytes)
	for _, tail := range []string{"x", "y", "z"} {
		ok.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, long+tail, nil))
	}
	key := l.Key(httptest.NewRequest(http.MethodGet, long, nil))
	if len(key) > MaxKeyBytes || !strings.HasPrefix(long, key) {
		t.Fatalf("got a key of %d bytes, want the path's first %d at most", len(key), MaxKeyBytes)
	}
	if got := stats(t, l, key).Count; got != 3 {
		t.Errorf("the long paths' key: got count %d, want 3", got)
	}
	if got := l.Keys(); got != 1 {
		t.Errorf("got %d keys, want 1", got)
	}
	// A multi-byte character cut in two is not left half.
	if key := l.Key(httptest.NewRequest(http.MethodGet, "/"+strings.Repeat("é", MaxKeyBytes), nil)); len(key) > MaxKeyBytes || !utf8.ValidString(key) {
		t.Errorf("got a key of %d bytes, valid UTF-8 %v; want at most %d, valid", len(key), utf8.ValidString(key), MaxKeyBytes)
	}
}

func TestKeysBeyondTheBoundOverflowUntilIdleOnesAreEvicted(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.MaxKeys = 2
	hs := newHarness(t, cfg)
	hs.get("/a")
	hs.get("/b")
	hs.get("/c") // no room, nothing idle: overflow
	hs.get("/d")
	if got := hs.l.Keys(); got != 2 {
		t.Fatalf("got %d keys, want 2", got)
	}
	if got := stats(t, hs.l, OverflowKey).Count; got != 2 {
		t.Errorf("got overflow count %d, want 2", got)
	}
	if _, ok := hs.l.StatsFor("/c"); ok {
		t.Error("/c is tracked, want it in the overflow key")
	}
	// A window later /a and /b are idle: /c evicts them.
	hs.clk.Add(61 * time.Second)
	hs.get("/c")
	if got := stats(t, hs.l, "/c").Count; got != 1 {
		t.Errorf("got /c count %d, want 1", got)
	}
	if _, ok := hs.l.StatsFor("/a"); ok {
		t.Error("/a is still tracked, want it evicted")
	}
}

func TestMinSamplesHoldsTheRateUntilEnoughSamples(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.MinSamples = 3
	hs := newHarness(t, cfg)
	hs.latency = 5 * time.Second
	steps := []struct {
		name     string
		wantRate float64
	}{
		{name: "one slow sample leaves maxRate", wantRate: 240},
		{name: "two slow samples leave maxRate", wantRate: 240},
		{name: "the third slow sample lowers the rate", wantRate: cfg.AllowedRate(5000)},
	}
	for _, st := range steps {
		hs.get("/x")
		if got := stats(t, hs.l, "/x").Rate; got != st.wantRate {
			t.Errorf("%s: got rate %g, want %g", st.name, got, st.wantRate)
		}
	}
}

func TestDryRunNeverDeniesButCountsWouldBeDenials(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.DryRun = true
	cfg.MaxRate = 2
	cfg.MinRate = 1
	hs := newHarness(t, cfg)
	if got := hs.admitted("/api/x", 5); got != 5 {
		t.Errorf("got %d admitted, want 5", got)
	}
	if got := counterValue(hs.l.m.dryRunAsset); got != 3 {
		t.Errorf("got %g would-be denials, want 3", got)
	}
	if got := counterValue(hs.l.m.deniedAsset); got != 0 {
		t.Errorf("got %g denials, want 0", got)
	}
}

// perClientHarness is a harness counting clients by X-Client, 10 a
// window, and a function that sends a request to /shared with X-Client
// set to value and returns its status.
func perClientHarness(t *testing.T) (*harness, func(value string) int) {
	cfg := DefaultConfig()
	cfg.PerClient = true
	cfg.ClientHeader = "X-Client"
	cfg.MaxRate = 10
	hs := newHarness(t, cfg)
	return hs, func(value string) int {
		r := httptest.NewRequest(http.MethodGet, "/shared", nil)
		r.Header.Set("X-Client", value)
		return hs.send(r).Code
	}
}

func TestPerClientSharesTheBudgetBetweenActiveClients(t *testing.T) {
	t.Parallel()
	_, send := perClientHarness(t)
	from := func(client string) int { return send(client + ", proxy") }
	steps := []struct {
		name   string
		client string
		n      int
		want   int // admitted of n
	}{
		{name: "a lone client may use the whole budget so far", client: "a", n: 6, want: 6},
		{name: "a second client gets its half (5)", client: "b", n: 4, want: 4},
		{name: "the first client, over its half, is denied", client: "a", n: 1, want: 0},
		{name: "the second client fills its half", client: "b", n: 3, want: 0}, // total 10 reached
	}
	for _, st := range steps {
		got := 0
		for range st.n {
			if from(st.client) == http.StatusOK {
				got++
			}
		}
		if got != st.want {
			t.Errorf("%s: got %d of %d admitted, want %d", st.name, got, st.n, st.want)
		}
	}
}

// TestAClientIsAtMostMaxClientBytes: a client named by ClientHeader is
// its header value's first maxClientBytes bytes, so that long values
// cannot make the 1,024 clients tracked per key take gigabytes; clients
// whose values share those bytes share a share of the budget.
func TestAClientIsAtMostMaxClientBytes(t *testing.T) {
	t.Parallel()
	hs, from := perClientHarness(t)
	long := strings.Repeat("c", 4*maxClientBytes)
	r := httptest.NewRequest(http.MethodGet, "/shared", nil)
	r.Header.Set("X-Client", long+"1, proxy")
	if got := hs.l.clientOf(r); len(got) != maxClientBytes || !strings.HasPrefix(long, got) {
		t.Fatalf("got a client of %d bytes, want the value's first %d", len(got), maxClientBytes)
	}
	for range 6 {
		from(long + "1")
	}
	from(long + "2")
	// One client (the two values cut to the same bytes) with 7 of 10:
	// two would have 5 each, and the first would be denied.
	if got := from(long + "1"); got != http.StatusOK {
		t.Errorf("got %d, want 200: the two long values are one client", got)
	}
}

// The clients tracked are bounded for every key together (MaxClients,
// lowered here to 10): past it, a new client of any key shares its key's
// otherClient slot; and the count follows clients as they go idle and
// keys as they are evicted.
func TestClientsAreBoundedAcrossKeys(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.PerClient = true
	cfg.ClientHeader = "X-Client"
	cfg.MaxRate = 1000
	hs := newHarness(t, cfg)
	hs.l.maxClients = 10
	tracked := func() (n int64) {
		for i := range hs.l.shards {
			sh := &hs.l.shards[i]
			sh.mu.RLock()
			for _, e := range sh.m {
				e.mu.Lock()
				n += int64(len(e.clients))
				e.mu.Unlock()
			}
			sh.mu.RUnlock()
		}
		return n
	}
	for k := range 4 {
		for c := range 8 {
			r := httptest.NewRequest(http.MethodGet, fmt.Sprintf("/k%d", k), nil)
			r.Header.Set("X-Client", fmt.Sprintf("client-%d", c))
			hs.send(r)
		}
	}
	// 10 clients, then each further key's otherClient slot (at most one a
	// key): 32 distinct clients asked.
	if got := tracked(); got > 10+4 {
		t.Errorf("got %d clients tracked over 4 keys, want at most 10 and an other slot a key", got)
	}
	if got := hs.l.clients.Load(); got != tracked() {
		t.Errorf("the count says %d clients, the keys hold %d", got, tracked())
	}
	// Once the window has passed, the idle keys are evicted with their
	// clients, and the count returns to what is held.
	hs.clk.Add(2 * cfg.Window)
	hs.l.sweep(hs.l.slotIndex(hs.clk.Now()))
	if got := hs.l.clients.Load(); got != tracked() || got != 0 {
		t.Errorf("after the window: the count says %d clients, the keys hold %d, want 0", got, tracked())
	}
}

func TestPerClientUsesRemoteAddrByDefault(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.PerClient = true
	cfg.MaxRate = 4
	hs := newHarness(t, cfg)
	from := func(addr string) int {
		r := httptest.NewRequest(http.MethodGet, "/p", nil)
		r.RemoteAddr = addr
		return hs.send(r).Code
	}
	from("10.0.0.1:1000")
	from("10.0.0.1:1001")
	from("10.0.0.2:2000")
	// Two active clients share 4: 10.0.0.1 (2 used, same IP, other port) is at its share.
	if got := from("10.0.0.1:1002"); got != http.StatusTooManyRequests {
		t.Errorf("got %d, want 429 for a client at its share", got)
	}
	if got := from("10.0.0.2:2001"); got != http.StatusOK {
		t.Errorf("got %d, want 200 for a client under its share", got)
	}
}

func TestRateLimitHeadersDescribePolicyAndState(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Headers = true
	cfg.MaxRate = 3
	cfg.MinRate = 1
	hs := newHarness(t, cfg)
	steps := []struct {
		name       string
		advance    time.Duration
		wantCode   int
		wantPolicy string
		wantState  string
	}{
		{name: "the first request leaves 2", wantCode: 200, wantPolicy: `"adaptive";q=3;w=60`, wantState: `"adaptive";r=2;t=60`},
		{name: "ten seconds on, one more leaves 1", advance: 10 * time.Second, wantCode: 200, wantPolicy: `"adaptive";q=3;w=60`, wantState: `"adaptive";r=1;t=50`},
		{name: "the third leaves 0", wantCode: 200, wantPolicy: `"adaptive";q=3;w=60`, wantState: `"adaptive";r=0;t=50`},
		{name: "the fourth is denied until the first leaves", advance: 5 * time.Second, wantCode: 429, wantPolicy: `"adaptive";q=3;w=60`, wantState: `"adaptive";r=0;t=45`},
	}
	for _, st := range steps {
		hs.clk.Add(st.advance)
		w := hs.get("/h")
		if w.Code != st.wantCode || w.Header().Get("RateLimit-Policy") != st.wantPolicy || w.Header().Get("RateLimit") != st.wantState {
			t.Errorf("%s: got %d %q %q, want %d %q %q", st.name, w.Code, w.Header().Get("RateLimit-Policy"),
				w.Header().Get("RateLimit"), st.wantCode, st.wantPolicy, st.wantState)
		}
	}
}

func TestRulesMaySetTheirOwnParameters(t *testing.T) {
	t.Parallel()
	cfg, err := ParseConfig("r.yaml", []byte("rules:\n  asset:\n    maxRate: 5\n  html:\n    maxRate: 2\n    minRate: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	hs := newHarness(t, cfg)
	if got := hs.admitted("/api/a", 10); got != 5 {
		t.Errorf("asset: got %d admitted, want 5", got)
	}
	if got := hs.admitted("/page", 10); got != 2 {
		t.Errorf("html: got %d admitted, want 2", got)
	}
}

func TestMetricsUseTheSeedsNamesAndBoundedLabels(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.MaxRate = 2
	cfg.MinRate = 1
	hs := newHarness(t, cfg)
	hs.latency = 400 * time.Millisecond
	hs.admitted("/users", 3)
	tests := []struct {
		name, label, value string
		want               float64
	}{
		{name: "request_count_by_url", label: "route", value: "/users", want: 2},
		{name: "request_resp_avg_by_url", label: "route", value: "/users", want: 400},
		{name: "sluice_adaptive_allowed_rate", label: "route", value: "/users", want: cfg.AllowedRate(400)},
		{name: "sluice_adaptive_denied_total", label: "rule", value: "html", want: 1},
		{name: "sluice_adaptive_denied_total", label: "rule", value: "asset", want: 0},
		{name: "sluice_adaptive_keys", want: 1},
	}
	for _, tt := range tests {
		got, ok := gathered(t, hs.reg, tt.name, tt.label, tt.value)
		if !ok || got != tt.want {
			t.Errorf("%s{%s=%q}: got %g (found %v), want %g", tt.name, tt.label, tt.value, got, ok, tt.want)
		}
	}
}

func TestMetricNamesComeFromTheConfig(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.CountMetricName = "shop.count"
	cfg.ValueMetricName = "shop.avg"
	hs := newHarness(t, cfg)
	hs.get("/x")
	for _, name := range []string{"shop_count", "shop_avg"} {
		if _, ok := gathered(t, hs.reg, name, "route", "/x"); !ok {
			t.Errorf("%s{route=\"/x\"} not found", name)
		}
	}
	if _, err := New(cfg, Options{Registerer: hs.reg}); err == nil {
		t.Error("registering twice on one registry succeeded, want an error")
	}
}

// gathered finds one sample by metric name and, when label is set, a
// label value.
func gathered(t *testing.T, reg *prometheus.Registry, name, label, value string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := label == ""
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					match = true
				}
			}
			if !match {
				continue
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue(), true
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}

func TestConcurrentRequestsNeverOverAdmit(t *testing.T) {
	t.Parallel()
	hs := newHarness(t, DefaultConfig())
	h := hs.l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	results := make(chan int, 1000)
	for i := range 1000 {
		go func() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/c?i="+strconv.Itoa(i), nil))
			results <- w.Code
		}()
	}
	ok := 0
	for range 1000 {
		if <-results == http.StatusOK {
			ok++
		}
	}
	if ok != 240 {
		t.Errorf("got %d admitted, want exactly 240", ok)
	}
}
