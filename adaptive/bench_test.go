package adaptive

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/clock"
)

// benchConfig never denies, so every iteration takes the admitted path.
func benchConfig() Config {
	c := DefaultConfig()
	c.MaxRate = 1e15
	c.MinRate = 1
	return c
}

// discard is a ResponseWriter that keeps nothing, so the benchmark
// measures the limiter rather than a recorder.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	_, _ = w.Write([]byte("ok"))
})

func BenchmarkMiddleware(b *testing.B) {
	l, err := New(benchConfig(), Options{Clock: clock.New()})
	if err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name string
		h    http.Handler
	}{
		{name: "bare handler", h: okHandler},
		{name: "behind the limiter", h: l.Middleware(okHandler)},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodGet, "/users/42", nil)
			w := &discard{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				c.h.ServeHTTP(w, r)
			}
		})
		b.Run(c.name+" parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := httptest.NewRequest(http.MethodGet, "/users/42", nil)
				w := &discard{h: http.Header{}}
				for pb.Next() {
					c.h.ServeHTTP(w, r)
				}
			})
		})
	}
}

func BenchmarkProxy(b *testing.B) {
	upstream := httptest.NewServer(okHandler)
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	l, err := New(benchConfig(), Options{Clock: clock.New()})
	if err != nil {
		b.Fatal(err)
	}
	front := httptest.NewServer(NewProxy(u, l, ProxyOptions{}))
	defer front.Close()
	cases := []struct{ name, url string }{
		{name: "direct to the upstream", url: upstream.URL + "/users/42"},
		{name: "through the proxy", url: front.URL + "/users/42"},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			tr := &http.Transport{MaxIdleConnsPerHost: 256}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := client.Get(c.url)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						b.Errorf("got %d", resp.StatusCode)
						return
					}
				}
			})
		})
	}
}

// BenchmarkClientsHeld fills 1,000 keys with 1,024 clients each (205-byte
// client names, perClient on) and reports the heap they hold, with the
// bound of MaxClients over every key (bounded) and without it (unbounded,
// as before ff24906): MB-held and bytes/client. Each iteration fills a
// new limiter.
func BenchmarkClientsHeld(b *testing.B) {
	for _, tt := range []struct {
		name  string
		bound int64
	}{{"bounded", MaxClients}, {"unbounded", 1 << 62}} {
		b.Run(tt.name, func(b *testing.B) {
			cfg := benchConfig()
			cfg.PerClient = true
			cfg.ClientHeader = "X-Client"
			pad := strings.Repeat("c", 200)
			var held, clients int64
			for b.Loop() {
				l, err := New(cfg, Options{Clock: clock.NewFake(time.Unix(1_800_000_000, 0))})
				if err != nil {
					b.Fatal(err)
				}
				l.maxClients = tt.bound
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				for k := range 1000 {
					r := httptest.NewRequest(http.MethodGet, "/k"+strconv.Itoa(k), nil)
					for c := range 1024 {
						r.Header.Set("X-Client", pad+strconv.Itoa(c))
						l.admit(r).exclude()
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				held = int64(after.HeapAlloc) - int64(before.HeapAlloc)
				clients = l.clients.Load()
				runtime.KeepAlive(l)
			}
			b.ReportMetric(float64(held)/(1<<20), "MB-held")
			b.ReportMetric(float64(held)/float64(max(clients, 1)), "bytes/client")
			b.ReportMetric(float64(clients), "clients")
		})
	}
}
