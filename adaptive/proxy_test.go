package adaptive

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/clock"
)

// proxyHarness runs an upstream and the proxy on real loopback sockets.
type proxyHarness struct {
	l        *Limiter
	clk      *clock.Fake
	reg      *prometheus.Registry
	upstream *httptest.Server
	front    *httptest.Server
}

func newProxyHarness(t *testing.T, cfg Config, upstream http.Handler) *proxyHarness {
	t.Helper()
	ph := &proxyHarness{clk: clock.NewFake(t0), reg: prometheus.NewRegistry()}
	l, err := New(cfg, Options{Clock: ph.clk, Registerer: ph.reg})
	if err != nil {
		t.Fatal(err)
	}
	ph.l = l
	ph.upstream = httptest.NewServer(upstream)
	t.Cleanup(ph.upstream.Close)
	u, _ := url.Parse(ph.upstream.URL)
	ph.front = httptest.NewServer(NewProxy(u, l, ProxyOptions{}))
	t.Cleanup(ph.front.Close)
	return ph
}

func (ph *proxyHarness) get(t *testing.T, path string) (int, http.Header, string) {
	t.Helper()
	resp, err := ph.front.Client().Get(ph.front.URL + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(body)
}

func TestTheProxyForwardsMeasuresAndDeniesOverRealSockets(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.MaxRate = 3
	cfg.MinRate = 1
	cfg.MaxValue = 10000
	var ph *proxyHarness
	ph = newProxyHarness(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ph.clk.Add(300 * time.Millisecond) // the upstream takes 300 ms
		w.Header().Set("X-Seen-Forwarded-For", r.Header.Get("X-Forwarded-For"))
		_, _ = io.WriteString(w, "hello from "+r.URL.Path)
	}))
	for i := range 3 {
		code, h, body := ph.get(t, "/page?n=1")
		if code != http.StatusOK || body != "hello from /page" || h.Get("X-Seen-Forwarded-For") != "127.0.0.1" {
			t.Fatalf("request %d: got %d %q (X-Forwarded-For %q), want 200 from the upstream", i+1, code, body, h.Get("X-Seen-Forwarded-For"))
		}
	}
	code, h, body := ph.get(t, "/page")
	if code != http.StatusTooManyRequests || !strings.Contains(body, "Whoa, Slow Down There!") || h.Get("Cache-Control") == "" || h.Get("Retry-After") == "" {
		t.Errorf("the 4th page request got %d %q, want 429 with the page and headers", code, body)
	}
	for range 3 {
		ph.get(t, "/api/items")
	}
	if code, _, body := ph.get(t, "/api/items"); code != http.StatusTooManyRequests || body != "" {
		t.Errorf("the 4th API request got %d %q, want 429 with an empty body", code, body)
	}
	s := stats(t, ph.l, "/page")
	if s.Count != 3 || s.Samples != 3 || s.AvgMs != 300 {
		t.Errorf("got %+v, want 3 requests averaging 300 ms", s)
	}
}

func TestUpstreamErrorsAreCountedApartFromTheAverage(t *testing.T) {
	t.Parallel()
	ph := newProxyHarness(t, DefaultConfig(), http.NotFoundHandler())
	// Point a second proxy at an address nobody listens on.
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL, _ := url.Parse(dead.URL)
	dead.Close()
	front := httptest.NewServer(NewProxy(deadURL, ph.l, ProxyOptions{}))
	defer front.Close()
	for range 2 {
		resp, err := front.Client().Get(front.URL + "/down")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("got %d, want 502", resp.StatusCode)
		}
	}
	s := stats(t, ph.l, "/down")
	if s.Count != 2 || s.Errors != 2 || s.Samples != 0 {
		t.Errorf("got %+v, want 2 requests, 2 errors, no samples", s)
	}
	if got := counterValue(ph.l.m.upstreamErrors); got != 2 {
		t.Errorf("got %g upstream errors in the metric, want 2", got)
	}
}

func TestTheProxyDoesNotMeasureStreamsOrUpgrades(t *testing.T) {
	t.Parallel()
	var ph *proxyHarness
	ph = newProxyHarness(t, DefaultConfig(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ph.clk.Add(20 * time.Second)
		switch r.URL.Path {
		case "/events":
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: tick\n\n")
		case "/ws":
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: test\r\nConnection: Upgrade\r\n\r\n")
			_ = brw.Flush()
		}
	}))
	if code, _, body := ph.get(t, "/events"); code != http.StatusOK || body != "data: tick\n\n" {
		t.Fatalf("events: got %d %q", code, body)
	}
	conn, err := net.Dial("tcp", ph.front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: got %v, %v; want 101", resp, err)
	}
	conn.Close()
	for _, key := range []string{"/events", "/ws"} {
		if s := stats(t, ph.l, key); s.Count != 1 || s.Samples != 0 {
			t.Errorf("%s: got %+v, want counted once and never measured", key, s)
		}
	}
}

// An upstream slower than the timeout to send its headers gets 504, and
// the wait counts as the request's response time; a response whose
// headers came in time may take longer to send its body.
func TestTheProxyTimesOutASlowUpstream(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var ph *proxyHarness
	ph = newProxyHarness(t, DefaultConfig(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow":
			ph.clk.Add(2 * time.Second) // the wait, as the limiter's clock sees it
			select {                    // no headers until the proxy gives up
			case <-r.Context().Done():
			case <-release:
			}
		case "/stream":
			w.WriteHeader(http.StatusOK)
			http.NewResponseController(w).Flush()
			time.Sleep(300 * time.Millisecond) // three times the timeout
			_, _ = io.WriteString(w, "late body")
		}
	}))
	defer close(release)
	u, _ := url.Parse(ph.upstream.URL)
	front := httptest.NewServer(NewProxy(u, ph.l, ProxyOptions{Timeout: 100 * time.Millisecond}))
	defer front.Close()

	start := time.Now()
	resp, err := front.Client().Get(front.URL + "/slow")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("slow upstream: got %d, want 504", resp.StatusCode)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("slow upstream: answered after %s, want about the 100ms timeout", d)
	}
	if s := stats(t, ph.l, "/slow"); s.Count != 1 || s.Samples != 1 || s.Errors != 0 || s.AvgMs != 2000 {
		t.Errorf("got %+v, want the timed-out request measured at its 2s wait", s)
	}

	resp, err = front.Client().Get(front.URL + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || string(body) != "late body" {
		t.Errorf("slow body: got %d %q, %v; want 200 and the whole body", resp.StatusCode, body, err)
	}
}
