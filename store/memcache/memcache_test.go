package memcache_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/memcache"
	"github.com/sluice-rl/sluice/store/memcache/memcachetest"
	"github.com/sluice-rl/sluice/store/storetest"
)

func newStore(t testing.TB, o memcache.Options) *memcache.Store {
	t.Helper()
	if o.Timeout == 0 {
		// Generous: the race detector and parallel tests slow things down.
		o.Timeout = 2 * time.Second
	}
	s, err := memcache.New(context.Background(), o)
	if err != nil {
		t.Fatalf("memcache.New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func do(t testing.TB, s store.Store, now time.Time, b store.Batch) []store.Result {
	t.Helper()
	out := make([]store.Result, len(b.Ops))
	if err := s.Do(context.Background(), now, b, out); err != nil {
		t.Fatalf("Do: %v", err)
	}
	return out
}

func windowOp(key string, k store.Kind, limit int64, length time.Duration, cost int64) store.Op {
	return store.Op{Key: key, Algorithm: store.FixedWindow, Kind: k, Window: store.Window{Limit: limit, Length: length}, Cost: cost}
}

func gcraOp(key string, k store.Kind, l gcra.Limit, cost int64) store.Op {
	return store.Op{Key: key, Algorithm: store.GCRA, Kind: k, Limit: l, Cost: cost}
}

var tenPerSecond = gcra.Limit{Burst: 10, Count: 10, Period: time.Second}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		srv := memcachetest.Start(t)
		return newStore(t, memcache.Options{Addrs: []string{srv.Addr}})
	})
}

func TestConformanceOnTwoServers(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		a, b := memcachetest.Start(t), memcachetest.Start(t)
		return newStore(t, memcache.Options{Addrs: []string{a.Addr, b.Addr}, KeyPrefix: "p:"})
	})
}

// TestEnvoyKeyLayout checks that a fixed window is stored as
// envoyproxy/ratelimit stores it: the prefix, the descriptor key, the
// window start, a decimal counter.
func TestEnvoyKeyLayout(t *testing.T) {
	srv := memcachetest.Start(t)
	s := newStore(t, memcache.Options{Addrs: []string{srv.Addr}, KeyPrefix: "rl_"})
	now := storetest.Base().Add(90 * time.Second)
	start := strconv.FormatInt(now.Truncate(time.Minute).Unix(), 10)
	do(t, s, now, store.Batch{Ops: []store.Op{windowOp("domain_key_value_", store.Spend, 5, time.Minute, 3)}})
	do(t, s, now, store.Batch{Ops: []store.Op{windowOp("domain_key_value_", store.Spend, 5, time.Minute, 1)}})
	tests := []struct {
		name      string
		key       string
		wantValue string
		wantFound bool
	}{
		{name: "the window's counter is under prefix, key and window start", key: "rl_domain_key_value_" + start, wantValue: "4", wantFound: true},
		{name: "nothing is stored under the key without its window", key: "rl_domain_key_value_", wantFound: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, found := srv.Get(tt.key)
			if found != tt.wantFound || got != tt.wantValue {
				t.Fatalf("got %q (found %v), want %q (found %v)", got, found, tt.wantValue, tt.wantFound)
			}
		})
	}
	t.Run("an envoyproxy/ratelimit instance's hits are counted too", func(t *testing.T) {
		// What envoyproxy/ratelimit does for a hit: incr the same key.
		if _, err := srv.Do("incr rl_domain_key_value_" + start + " 1"); err != nil {
			t.Fatal(err)
		}
		r := do(t, s, now, store.Batch{Ops: []store.Op{windowOp("domain_key_value_", store.Check, 5, time.Minute, 0)}})[0]
		if r.Count != 5 || r.Remaining != 0 {
			t.Fatalf("got count %d remaining %d, want count 5 remaining 0", r.Count, r.Remaining)
		}
	})
}

func TestGCRAKeyLayout(t *testing.T) {
	srv := memcachetest.Start(t)
	s := newStore(t, memcache.Options{Addrs: []string{srv.Addr}, KeyPrefix: "p:"})
	now := storetest.Base()
	do(t, s, now, store.Batch{Ops: []store.Op{gcraOp("acct:1", store.Spend, tenPerSecond, 2)}})
	got, found := srv.Get("p:acct:1")
	// Two tokens of a ten-per-second bucket: the TAT is 200ms after now.
	if want := strconv.FormatInt(now.Add(200*time.Millisecond).UnixNano(), 10); !found || got != want {
		t.Fatalf("got %q (found %v), want the TAT %q", got, found, want)
	}
}

func TestKeysMemcachedRefusesAreHashed(t *testing.T) {
	srv := memcachetest.Start(t)
	s := newStore(t, memcache.Options{Addrs: []string{srv.Addr}})
	now := storetest.Base()
	tests := []struct {
		name string
		key  string
	}{
		{name: "a key with a space", key: "domain_path_/a b_"},
		{name: "a key with a newline", key: "domain_path_/a\r\nflush_all_"},
		{name: "a key longer than 250 bytes", key: "domain_path_" + strings.Repeat("x", 300) + "_"},
	}
	for _, tt := range tests {
		t.Run(tt.name+" is counted like any other", func(t *testing.T) {
			for i, wantAllowed := range []bool{true, true, false} {
				r := do(t, s, now, store.Batch{Ops: []store.Op{windowOp(tt.key, store.Spend, 2, time.Minute, 1)}})[0]
				if r.Allowed != wantAllowed {
					t.Fatalf("hit %d: got allowed=%v, want %v", i+1, r.Allowed, wantAllowed)
				}
			}
			r := do(t, s, now, store.Batch{Ops: []store.Op{gcraOp(tt.key, store.Spend, gcra.Limit{Burst: 1, Count: 1, Period: time.Hour}, 1)}})[0]
			if !r.Allowed {
				t.Fatal("a GCRA spend on a fresh bucket: got denied, want allowed")
			}
		})
	}
}

func TestAllOrNothingIsUndone(t *testing.T) {
	srv := memcachetest.Start(t)
	s := newStore(t, memcache.Options{Addrs: []string{srv.Addr}})
	now := storetest.Base()
	one := gcra.Limit{Burst: 1, Count: 1, Period: time.Hour}
	do(t, s, now, store.Batch{Ops: []store.Op{gcraOp("full", store.Spend, one, 1)}})
	do(t, s, now, store.Batch{Ops: []store.Op{gcraOp("toreset", store.Spend, tenPerSecond, 4)}})
	rs := do(t, s, now, store.Batch{AllOrNothing: true, Ops: []store.Op{
		gcraOp("a", store.Spend, tenPerSecond, 3),
		gcraOp("full", store.Spend, one, 1), // denied
		gcraOp("b", store.SpendOnly, tenPerSecond, 2),
		gcraOp("toreset", store.Reset, tenPerSecond, 0),
		windowOp("w_", store.Spend, 5, time.Minute, 1),
	}})
	tests := []struct {
		name          string
		got           store.Result
		wantAllowed   bool
		wantApplied   bool
		wantRemaining int64
	}{
		{name: "the allowed spend is reported allowed but not applied", got: rs[0], wantAllowed: true, wantRemaining: 7},
		{name: "the denied spend is denied", got: rs[1], wantAllowed: false},
		{name: "the spend-only is not applied", got: rs[2], wantAllowed: true, wantRemaining: 8},
		{name: "the reset is not applied", got: rs[3], wantAllowed: true, wantRemaining: 10},
		{name: "the window hit is applied", got: rs[4], wantAllowed: true, wantApplied: true, wantRemaining: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got.Allowed != tt.wantAllowed || tt.got.Applied != tt.wantApplied || tt.got.Remaining != tt.wantRemaining {
				t.Fatalf("got %+v, want allowed=%v applied=%v remaining=%d", tt.got, tt.wantAllowed, tt.wantApplied, tt.wantRemaining)
			}
		})
	}
	after := do(t, s, now, store.Batch{Ops: []store.Op{
		gcraOp("a", store.Check, tenPerSecond, 0),
		gcraOp("b", store.Check, tenPerSecond, 0),
		gcraOp("toreset", store.Check, tenPerSecond, 0),
	}})
	for i, want := range []int64{10, 10, 6} {
		if after[i].Remaining != want {
			t.Fatalf("bucket %d after the denied batch: got remaining %d, want %d", i, after[i].Remaining, want)
		}
	}
}

func TestUnavailable(t *testing.T) {
	srv := memcachetest.Start(t)
	reg := prometheus.NewRegistry()
	s := newStore(t, memcache.Options{Addrs: []string{srv.Addr}, Timeout: 500 * time.Millisecond, Registerer: reg})
	now := storetest.Base()
	op := windowOp("k_", store.Spend, 5, time.Minute, 1)
	do(t, s, now, store.Batch{Ops: []store.Op{op}})
	srv.Kill()
	tests := []struct {
		name string
		op   store.Op
	}{
		{name: "a window hit fails as unavailable", op: op},
		{name: "a GCRA spend fails as unavailable", op: gcraOp("g", store.Spend, tenPerSecond, 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := make([]store.Result, 1)
			if err := s.Do(context.Background(), now, store.Batch{Ops: []store.Op{tt.op}}, out); !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("got %v, want an error wrapping store.ErrUnavailable", err)
			}
		})
	}
	if err := s.Ping(context.Background()); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Ping: got %v, want an error wrapping store.ErrUnavailable", err)
	}
	if got := metric(t, reg, "sluice_memcache_errors_total", "unavailable"); got != 3 {
		t.Fatalf("sluice_memcache_errors_total{kind=\"unavailable\"}: got %v, want 3 (two calls, one ping)", got)
	}
	srv.Restart()
	if r := do(t, s, now, store.Batch{Ops: []store.Op{op}})[0]; r.Count != 1 {
		t.Fatalf("after a restart (empty): got count %d, want 1", r.Count)
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	tests := []struct {
		name    string
		o       memcache.Options
		wantErr string
	}{
		{name: "no server", o: memcache.Options{}, wantErr: "no server"},
		{name: "both addresses and SRV", o: memcache.Options{Addrs: []string{"127.0.0.1:1"}, SRV: "_memcache._tcp.example.com"}, wantErr: "both addresses and an SRV name"},
		{name: "an SRV name without service and proto", o: memcache.Options{SRV: "memcache.example.com"}, wantErr: "not of the form _service._proto.name"},
		{name: "a timeout out of range", o: memcache.Options{Addrs: []string{"127.0.0.1:1"}, Timeout: time.Hour}, wantErr: "timeout 1h0m0s out of range"},
		{name: "a negative idle connection count", o: memcache.Options{Addrs: []string{"127.0.0.1:1"}, MaxIdleConns: -1}, wantErr: "max idle connections -1"},
		{name: "an address that is not host:port", o: memcache.Options{Addrs: []string{"nohostport"}}, wantErr: "nohostport"},
	}
	for _, tt := range tests {
		t.Run(tt.name+" is refused", func(t *testing.T) {
			_, err := memcache.New(context.Background(), tt.o)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
	t.Run("a server nobody listens on is unavailable", func(t *testing.T) {
		_, err := memcache.New(context.Background(), memcache.Options{Addrs: []string{"127.0.0.1:1"}})
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("got %v, want an error wrapping store.ErrUnavailable", err)
		}
	})
}

func TestSRV(t *testing.T) {
	a, b := memcachetest.Start(t), memcachetest.Start(t)
	dns := memcachetest.StartDNS(t)
	dns.SetSRV(memcachetest.SRVFor(a))
	s := newStore(t, memcache.Options{SRV: "_memcache._tcp.cache.test", SRVRefresh: 20 * time.Millisecond, Resolver: dns.Resolver()})
	now := storetest.Base()
	key := "k_" + strconv.FormatInt(now.Unix(), 10)
	hit := func() {
		t.Helper()
		do(t, s, now, store.Batch{Ops: []store.Op{windowOp("k_", store.Spend, 100, time.Second, 1)}})
	}
	hit()
	if got, ok := a.Get(key); !ok || got != "1" {
		t.Fatalf("the server the SRV record names: got %q (found %v), want \"1\"", got, ok)
	}
	t.Run("a refresh moves to the servers the record names now", func(t *testing.T) {
		dns.SetSRV(memcachetest.SRVFor(b))
		waitFor(t, func() bool { hit(); _, ok := b.Get(key); return ok })
	})
	t.Run("a failed lookup keeps the servers", func(t *testing.T) {
		dns.SetSRV()
		time.Sleep(100 * time.Millisecond) // several refreshes
		before, _ := b.Get(key)
		hit()
		if after, _ := b.Get(key); after == before {
			t.Fatalf("got count %s after a hit, want more than %s", after, before)
		}
	})
	t.Run("a record naming no server fails New", func(t *testing.T) {
		_, err := memcache.New(context.Background(), memcache.Options{SRV: "_memcache._tcp.cache.test", Resolver: dns.Resolver()})
		if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "look up SRV") {
			t.Fatalf("got %v, want an SRV lookup error wrapping store.ErrUnavailable", err)
		}
	})
}

// waitFor polls cond for up to 5 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met after 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestTLS(t *testing.T) {
	srv := memcachetest.StartTLS(t)
	s := newStore(t, memcache.Options{Addrs: []string{srv.Addr}, TLS: srv.TLS.ClientConfig()})
	now := storetest.Base()
	for i, want := range []bool{true, true, false} {
		if r := do(t, s, now, store.Batch{Ops: []store.Op{windowOp("tls_", store.Spend, 2, time.Minute, 1)}})[0]; r.Allowed != want {
			t.Fatalf("hit %d over TLS: got allowed=%v, want %v", i+1, r.Allowed, want)
		}
	}
	t.Run("a client without TLS is not served", func(t *testing.T) {
		_, err := memcache.New(context.Background(), memcache.Options{Addrs: []string{srv.Addr}, Timeout: 300 * time.Millisecond})
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("got %v, want an error wrapping store.ErrUnavailable", err)
		}
	})
}

// metric returns the value of the counter name{kind=kind} gathered from
// reg.
func metric(t *testing.T, reg *prometheus.Registry, name, kind string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == kind {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{kind=%q} gathered", name, kind)
	return 0
}

func TestContentionIsCounted(t *testing.T) {
	srv := memcachetest.Start(t)
	reg := prometheus.NewRegistry()
	s := newStore(t, memcache.Options{Addrs: []string{srv.Addr}, Registerer: reg})
	storetestConcurrent(t, s)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var conflicts, calls float64
	for _, mf := range mfs {
		switch mf.GetName() {
		case "sluice_memcache_conflicts_total":
			conflicts = mf.GetMetric()[0].GetCounter().GetValue()
		case "sluice_memcache_call_duration_seconds":
			calls = float64(mf.GetMetric()[0].GetHistogram().GetSampleCount())
		}
	}
	if calls != 64*5 {
		t.Fatalf("sluice_memcache_call_duration_seconds: got %v samples, want %d", calls, 64*5)
	}
	if conflicts == 0 {
		t.Fatal("sluice_memcache_conflicts_total: got 0 after 64 racing callers, want some")
	}
}

// storetestConcurrent spends one GCRA bucket from 64 goroutines, 5 times
// each, and checks that exactly its burst of 50 was admitted.
func storetestConcurrent(t *testing.T, s store.Store) {
	t.Helper()
	op := gcraOp("race", store.Spend, gcra.Limit{Burst: 50, Count: 1, Period: time.Hour}, 1)
	now := storetest.Base()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			out := make([]store.Result, 1)
			for range 5 {
				if err := s.Do(context.Background(), now, store.Batch{Ops: []store.Op{op}}, out); err != nil {
					t.Errorf("Do: %v", err)
					return
				}
				if out[0].Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got := admitted.Load(); got != 50 {
		t.Fatalf("got %d admitted, want exactly 50", got)
	}
}

func TestExpiry(t *testing.T) {
	srv := memcachetest.Start(t)
	now := storetest.Base()
	start := strconv.FormatInt(now.Truncate(time.Minute).Unix(), 10)
	tests := []struct {
		name           string
		jitter         time.Duration
		wantLo, wantHi int
		wantSpread     bool
	}{
		{name: "a window expires after its length", wantLo: 58, wantHi: 60},
		{name: "a jitter adds up to its length", jitter: 100 * time.Second, wantLo: 58, wantHi: 160, wantSpread: true},
	}
	for k, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, memcache.Options{Addrs: []string{srv.Addr}, ExpirationJitter: tt.jitter, KeyPrefix: strconv.Itoa(k) + ":"})
			spread := false
			for i := range 20 {
				key := "w" + strconv.Itoa(i) + "_"
				do(t, s, now, store.Batch{Ops: []store.Op{windowOp(key, store.Spend, 5, time.Minute, 1)}})
				// Meta get with the t flag: the seconds left to live.
				lines, err := srv.Do("mg " + strconv.Itoa(k) + ":" + key + start + " t")
				if err != nil || len(lines) != 1 || !strings.HasPrefix(lines[0], "HD t") {
					t.Fatalf("mg: got %q (error %v), want HD t<seconds>", lines, err)
				}
				ttl, err := strconv.Atoi(strings.TrimPrefix(lines[0], "HD t"))
				if err != nil || ttl < tt.wantLo || ttl > tt.wantHi {
					t.Fatalf("window %d: got a TTL of %q, want %d to %d seconds", i, lines[0], tt.wantLo, tt.wantHi)
				}
				spread = spread || ttl > 61
			}
			if spread != tt.wantSpread {
				t.Fatalf("got TTLs past the window's length: %v, want %v", spread, tt.wantSpread)
			}
		})
	}
}
