package adaptive

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

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
