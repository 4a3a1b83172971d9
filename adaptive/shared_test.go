package adaptive

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/store/memory"
)

func TestProxiesSharingAStoreShareOneBudget(t *testing.T) {
	t.Parallel()
	st := memory.New(memory.Options{})
	clk := clock.NewFake(t0)
	cfg := DefaultConfig()
	cfg.MaxRate = 5
	cfg.MinRate = 1
	cfg.MaxValue = 10000
	latency := time.Duration(0)
	mk := func() http.Handler {
		l, err := New(cfg, Options{Clock: clk, Shared: limiter.New(st, clk)})
		if err != nil {
			t.Fatal(err)
		}
		return l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			clk.Add(latency)
		}))
	}
	a, b := mk(), mk()
	send := func(h http.Handler) int {
		before := clk.Now()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/shared", nil))
		clk.Set(before)
		return w.Code
	}
	steps := []struct {
		name    string
		h       http.Handler
		advance time.Duration
		want    int
	}{
		{name: "proxy a admits the first", h: a, want: 200},
		{name: "proxy b admits the second", h: b, want: 200},
		{name: "a third", h: a, want: 200},
		{name: "a fourth, ten seconds on", h: b, advance: 10 * time.Second, want: 200},
		{name: "the fifth fills the shared budget", h: a, want: 200},
		{name: "proxy b sees the other's requests and denies", h: b, want: 429},
		{name: "proxy a denies too", h: a, want: 429},
		{name: "a window after the first three, they have left", h: b, advance: 51 * time.Second, want: 200},
	}
	for _, st := range steps {
		clk.Add(st.advance)
		if got := send(st.h); got != st.want {
			t.Errorf("%s: got %d, want %d", st.name, got, st.want)
		}
	}
	// A proxy that starts late reads the whole window from the store: 3
	// requests (two at 10 s, one now), so 2 more fit.
	c := mk()
	for i, want := range []int{200, 200, 429} {
		if got := send(c); got != want {
			t.Errorf("a late proxy's request %d: got %d, want %d", i+1, got, want)
		}
	}
}

func TestASharedStoreCarriesLatencyBetweenProxies(t *testing.T) {
	t.Parallel()
	st := memory.New(memory.Options{})
	clk := clock.NewFake(t0)
	cfg := DefaultConfig()
	mk := func() *Limiter {
		l, err := New(cfg, Options{Clock: clk, Shared: limiter.New(st, clk)})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a, b := mk(), mk()
	slow := a.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { clk.Add(5 * time.Second) }))
	slow.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/r", nil))
	clk.Add(time.Second)
	fast := b.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	fast.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/r", nil))
	s := stats(t, b, "/r")
	// b's window: a's request and a's 5000 ms sample, and b's own 0 ms one.
	if s.Count != 2 || s.Samples != 2 || s.AvgMs != 2500 {
		t.Errorf("got %+v, want 2 requests and 2 samples averaging 2500 ms", s)
	}
}
