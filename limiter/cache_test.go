package limiter_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/memcache"
	"github.com/sluice-rl/sluice/store/memcache/memcachetest"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/redis/redistest"
	"github.com/sluice-rl/sluice/store/storetest"
)

// withCache is the option that turns the local cache on, at its smallest.
var withCache = limiter.Options{LocalCacheBytes: 1 << 20}

// dataCommands sums the calls of the commands that touch keys: everything
// but the connection's own (HELLO, CLIENT, PING) and INFO.
func dataCommands(calls map[string]int64) int64 {
	var n int64
	for c, v := range calls {
		switch c {
		case "info", "hello", "client|setname", "client|setinfo", "client", "ping":
			continue
		}
		n += v
	}
	return n
}

// memcachedCommands sums memcached's counters of the commands that touch
// keys (get, gets, set, add, cas, touch, incr, decr, delete).
func memcachedCommands(t *testing.T, srv *memcachetest.Server) int64 {
	t.Helper()
	lines, err := srv.Do("stats")
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, line := range lines {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "STAT" {
			continue
		}
		switch f[1] {
		case "cmd_get", "cmd_set", "cmd_touch", "incr_hits", "incr_misses", "decr_hits", "decr_misses", "delete_hits", "delete_misses":
			v, _ := strconv.ParseInt(f[2], 10, 64)
			n += v
		}
	}
	return n
}

func TestLocalCacheSparesTheStoreUntilTheWindowEnds(t *testing.T) {
	t.Parallel()
	threePerMinute := limiter.Window{Limit: 3, Length: time.Minute}
	onRedis := func(envoy bool) func(t *testing.T) (store.Store, func() int64) {
		return func(t *testing.T) (store.Store, func() int64) {
			srv := redistest.StartSingle(t)
			s, err := redis.New(context.Background(), redis.Options{Addrs: []string{srv.Addr}, Timeout: 5 * time.Second, EnvoyCompatible: envoy})
			if err != nil {
				t.Fatal(err)
			}
			return s, func() int64 { return dataCommands(srv.CommandCalls()) }
		}
	}
	onMemcached := func(t *testing.T) (store.Store, func() int64) {
		srv := memcachetest.Start(t)
		s, err := memcache.New(context.Background(), memcache.Options{Addrs: []string{srv.Addr}, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return s, func() int64 { return memcachedCommands(t, srv) }
	}
	for _, tt := range []struct {
		name     string
		newStore func(t *testing.T) (store.Store, func() int64)
		txn      limiter.Transaction
	}{
		{name: "a fixed window counted by the Redis script", newStore: onRedis(false), txn: limiter.Transaction{Key: "domain_key_value_", Window: threePerMinute, Cost: 1}},
		{name: "a fixed window counted with envoyproxy/ratelimit's Redis commands", newStore: onRedis(true), txn: limiter.Transaction{Key: "domain_key_value_", Window: threePerMinute, Cost: 1}},
		{name: "a GCRA bucket on Redis", newStore: onRedis(false), txn: limiter.Transaction{Key: "g", Limit: gcra.Limit{Burst: 3, Count: 1, Period: time.Minute}, Cost: 1}},
		{name: "a fixed window on memcached", newStore: onMemcached, txn: limiter.Transaction{Key: "domain_key_value_", Window: threePerMinute, Cost: 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, commands := tt.newStore(t)
			t.Cleanup(func() { _ = s.Close() })
			clk := clock.NewFake(storetest.Base())
			l := limiter.NewWithOptions(s, clk, withCache)
			for i := range 3 {
				if d := count(t, l, tt.txn)[0]; !d.Allowed || d.Cached {
					t.Fatalf("hit %d: got %+v, want allowed from the store", i+1, d)
				}
			}
			first := count(t, l, tt.txn)[0]
			if first.Allowed || first.Cached || first.RetryIn <= 0 {
				t.Fatalf("first over-limit hit: got %+v, want denied by the store", first)
			}
			before := commands()

			// A flood, from several goroutines, while the clock moves on
			// but stays inside the window (or before the retry time).
			const workers, each = 8, 200
			step := first.RetryIn / (workers*each + 1)
			var wrong atomic.Int64
			var wg sync.WaitGroup
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					out := make([]limiter.Decision, 1)
					for range each {
						clk.Advance(step)
						if err := l.Count(context.Background(), []limiter.Transaction{tt.txn}, out); err != nil || out[0].Allowed || !out[0].Cached || out[0].RetryIn <= 0 {
							wrong.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if n := wrong.Load(); n != 0 {
				t.Errorf("flood: got %d answers that were not denied from the cache, want 0", n)
			}
			if got := commands() - before; got != 0 {
				t.Errorf("flood: got %d store commands, want 0", got)
			}
			d := count(t, l, tt.txn)[0]
			wantRetry := first.RetryIn - time.Duration(workers*each)*step
			if tt.txn.Window.Length != 0 {
				// Envoy's whole seconds, rounded down from the window's
				// start: up from its end.
				wantRetry = (wantRetry + time.Second - 1).Truncate(time.Second)
			}
			if !d.Cached || d.ResetIn <= 0 || d.RetryIn != wantRetry {
				t.Errorf("after the flood: got %+v, want cached, retry in %s", d, wantRetry)
			}

			// When the window ends (the retry time comes), Redis is asked
			// again, and the hit goes through.
			clk.Advance(first.RetryIn - time.Duration(workers*each)*step)
			before = commands()
			if d := count(t, l, tt.txn)[0]; !d.Allowed || d.Cached {
				t.Errorf("at the retry time: got %+v, want allowed by the store", d)
			}
			if got := commands() - before; got == 0 {
				t.Errorf("at the retry time: got no store command, want the store asked")
			}
		})
	}
}

// countingStore counts the operations that reach a store.
type countingStore struct {
	store.Store
	ops atomic.Int64
}

func (s *countingStore) Do(ctx context.Context, now time.Time, b store.Batch, out []store.Result) error {
	s.ops.Add(int64(len(b.Ops)))
	return s.Store.Do(ctx, now, b, out)
}

func TestLocalCacheAnswersAsTheStoreDoes(t *testing.T) {
	t.Parallel()
	// Buckets of every sort; the windows get no refunds (with the cache,
	// a window's counter stops at its first over-limit hit, so a refund
	// counts back from there: by design, as envoyproxy/ratelimit's).
	type bucket struct {
		key     string
		limit   gcra.Limit
		window  limiter.Window
		refunds bool
	}
	buckets := []bucket{
		{key: "w1s", window: limiter.Window{Limit: 3, Length: time.Second}},
		{key: "w1m", window: limiter.Window{Limit: 5, Length: time.Minute}},
		{key: "w0", window: limiter.Window{Limit: 0, Length: time.Second}},
		{key: "g2s", limit: gcra.Limit{Burst: 3, Count: 2, Period: time.Second}, refunds: true},
		{key: "g10m", limit: gcra.Limit{Burst: 5, Count: 10, Period: time.Minute}, refunds: true},
	}
	for seed := range uint64(20) {
		t.Run(fmt.Sprintf("random sequence %d", seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 42))
			clk := clock.NewFake(storetest.Base())
			plain := limiter.New(memory.New(memory.Options{}), clk)
			cs := &countingStore{Store: memory.New(memory.Options{})}
			cached := limiter.NewWithOptions(cs, clk, withCache)
			hits := 0
			for step := range 2000 {
				switch rng.IntN(4) {
				case 0:
					clk.Advance(time.Duration(rng.IntN(1500)) * time.Millisecond)
				case 1:
					clk.Advance(time.Duration(rng.IntN(50)) * time.Millisecond)
				}
				n := 1 + rng.IntN(3)
				txns := make([]limiter.Transaction, n)
				for i := range txns {
					b := buckets[rng.IntN(len(buckets))]
					t := limiter.Transaction{Key: b.key, Limit: b.limit, Window: b.window, Cost: int64(rng.IntN(4))}
					switch k := rng.IntN(10); {
					case k < 2:
						t.Kind = limiter.CheckOnly
					case k < 4 && b.refunds:
						t.Kind = limiter.RefundBucket
					}
					txns[i] = t
				}
				want := make([]limiter.Decision, n)
				got := make([]limiter.Decision, n)
				if err := plain.Count(context.Background(), append([]limiter.Transaction(nil), txns...), want); err != nil {
					t.Fatal(err)
				}
				if err := cached.Count(context.Background(), txns, got); err != nil {
					t.Fatal(err)
				}
				for i := range got {
					g, w := got[i], want[i]
					if g.Cached {
						hits++
						g.Count = w.Count
					}
					g.Cached = false
					if g != w {
						t.Fatalf("step %d, transaction %d (%+v): got %+v with the cache, want %+v as without", step, i, txns[i], got[i], w)
					}
				}
			}
			if hits == 0 {
				t.Errorf("got no answer from the cache, want some: the test tests nothing")
			}
		})
	}
}

func TestLocalCacheRules(t *testing.T) {
	t.Parallel()
	threePerMinute := limiter.Window{Limit: 3, Length: time.Minute}
	win := func(hits int64, k limiter.Kind) limiter.Transaction {
		return limiter.Transaction{Key: "w", Window: threePerMinute, Cost: hits, Kind: k}
	}
	setup := func(t *testing.T) (*limiter.Limiter, *countingStore, *clock.Fake) {
		cs := &countingStore{Store: memory.New(memory.Options{})}
		clk := clock.NewFake(storetest.Base())
		return limiter.NewWithOptions(cs, clk, withCache), cs, clk
	}
	// overFromCache checks that the window's next hit is answered over
	// from the cache, at count want, with no store operation.
	overFromCache := func(t *testing.T, l *limiter.Limiter, cs *countingStore, step string, want int64) {
		t.Helper()
		before := cs.ops.Load()
		if d := count(t, l, win(1, 0))[0]; d.Allowed || !d.Cached || d.Count != want {
			t.Fatalf("%s: got %+v, want over from the cache, count %d", step, d, want)
		}
		if n := cs.ops.Load() - before; n != 0 {
			t.Fatalf("%s: got %d store operations, want 0", step, n)
		}
	}
	t.Run("a peek over the limit is answered from the cache", func(t *testing.T) {
		l, cs, _ := setup(t)
		count(t, l, win(4, 0))
		before := cs.ops.Load()
		if d := count(t, l, win(0, limiter.CheckOnly))[0]; d.Allowed || !d.Cached || d.Count != 4 {
			t.Fatalf("got %+v, want over, cached, count 4", d)
		}
		if got := cs.ops.Load() - before; got != 0 {
			t.Fatalf("got %d store operations, want 0", got)
		}
	})
	t.Run("a peek of more hits than fit is not remembered", func(t *testing.T) {
		l, cs, _ := setup(t)
		count(t, l, win(2, 0))
		if d := count(t, l, win(2, limiter.CheckOnly))[0]; d.Allowed || d.Cached {
			t.Fatalf("peek: got %+v, want over from the store", d)
		}
		before := cs.ops.Load()
		if d := count(t, l, win(1, 0))[0]; !d.Allowed || d.Cached || d.Remaining != 0 {
			t.Fatalf("hit: got %+v, want allowed by the store with 0 remaining", d)
		}
		if got := cs.ops.Load() - before; got != 1 {
			t.Fatalf("got %d store operations, want 1", got)
		}
	})
	t.Run("a refund makes the cache forget the bucket", func(t *testing.T) {
		l, _, _ := setup(t)
		count(t, l, win(4, 0))
		if d := count(t, l, win(1, 0))[0]; !d.Cached {
			t.Fatalf("got %+v, want cached", d)
		}
		if d := count(t, l, win(2, limiter.RefundBucket))[0]; !d.Allowed || d.Count != 2 {
			t.Fatalf("refund: got %+v, want allowed with count 2", d)
		}
		if d := count(t, l, win(1, 0))[0]; !d.Allowed || d.Cached || d.Count != 3 {
			t.Fatalf("after the refund: got %+v, want allowed by the store with count 3", d)
		}
	})
	t.Run("a key-value reset makes the cache forget the bucket", func(t *testing.T) {
		l, _, _ := setup(t)
		g := limiter.Transaction{Key: "g", Limit: gcra.Limit{Burst: 1, Count: 1, Period: time.Hour}, Cost: 1}
		count(t, l, g)
		if d := count(t, l, g)[0]; d.Allowed {
			t.Fatalf("second spend: got %+v, want denied", d)
		}
		if d := count(t, l, g)[0]; !d.Cached {
			t.Fatalf("third spend: got %+v, want cached", d)
		}
		if _, err := l.Reset(context.Background(), g); err != nil {
			t.Fatal(err)
		}
		if d := count(t, l, g)[0]; !d.Allowed || d.Cached {
			t.Fatalf("after the reset: got %+v, want allowed by the store", d)
		}
	})
	t.Run("a GCRA peek that fits asks the store and keeps the entry", func(t *testing.T) {
		l, cs, _ := setup(t)
		g := limiter.Transaction{Key: "g", Limit: gcra.Limit{Burst: 2, Count: 1, Period: time.Hour}, Cost: 2}
		count(t, l, g)
		if d := count(t, l, g)[0]; d.Allowed || d.Cached {
			t.Fatalf("second spend: got %+v, want denied by the store", d)
		}
		peek := g
		peek.Kind, peek.Cost = limiter.CheckOnly, 0
		before := cs.ops.Load()
		if d := count(t, l, peek)[0]; !d.Allowed || d.Cached {
			t.Fatalf("peek: got %+v, want allowed by the store", d)
		}
		if d := count(t, l, g)[0]; d.Allowed || !d.Cached {
			t.Fatalf("spend after the peek: got %+v, want denied from the cache", d)
		}
		if n := cs.ops.Load() - before; n != 1 {
			t.Fatalf("got %d store operations, want 1 (the peek)", n)
		}
	})
	t.Run("a request mixing cached and other buckets sends only the others", func(t *testing.T) {
		l, cs, _ := setup(t)
		count(t, l, win(4, 0))
		before := cs.ops.Load()
		other := limiter.Transaction{Key: "other", Window: threePerMinute, Cost: 1}
		got := count(t, l, win(1, 0), other, other)
		if got[0].Allowed || !got[0].Cached || !got[1].Allowed || got[1].Count != 1 || got[2].Count != 2 || got[2].Index != 2 {
			t.Fatalf("got %+v, want the first cached over, the others counted 1 and 2", got)
		}
		if n := cs.ops.Load() - before; n != 2 {
			t.Fatalf("got %d store operations, want 2", n)
		}
	})
	t.Run("another limit for the same key is asked of the store", func(t *testing.T) {
		l, cs, _ := setup(t)
		count(t, l, win(4, 0))
		before := cs.ops.Load()
		more := limiter.Transaction{Key: "w", Window: limiter.Window{Limit: 10, Length: time.Minute}, Cost: 1}
		if d := count(t, l, more)[0]; !d.Allowed || d.Cached {
			t.Fatalf("got %+v, want allowed by the store", d)
		}
		if n := cs.ops.Load() - before; n != 1 {
			t.Fatalf("got %d store operations, want 1", n)
		}
	})
	t.Run("the key asked with another window or limit keeps the entry", func(t *testing.T) {
		// A rule's window and a request's limit overrides of it, on one
		// descriptor: each is an entry of its own, and asking for one
		// never drops another.
		l, cs, _ := setup(t)
		count(t, l, win(4, 0))
		others := []limiter.Transaction{
			{Key: "w", Window: limiter.Window{Limit: 10, Length: time.Minute}, Cost: 1},
			{Key: "w", Window: limiter.Window{Limit: 3, Length: time.Hour}, Cost: 1},
			{Key: "w", Limit: gcra.Limit{Burst: 3, Count: 3, Period: time.Minute}, Cost: 1},
		}
		for _, o := range others {
			if d := count(t, l, o)[0]; !d.Allowed || d.Cached {
				t.Fatalf("%+v: got %+v, want allowed by the store", o, d)
			}
		}
		overFromCache(t, l, cs, "the first window again", 5)
	})
	t.Run("a window named twice that goes over is remembered", func(t *testing.T) {
		// As envoyproxy/ratelimit, whose local cache takes every key a
		// hit of the request took over.
		l, cs, _ := setup(t)
		count(t, l, win(2, 0))
		if got := count(t, l, win(1, 0), win(1, 0)); !got[0].Allowed || got[1].Allowed || got[1].Count != 4 {
			t.Fatalf("the window twice: got %+v, want the first within (3), the second over (4)", got)
		}
		overFromCache(t, l, cs, "next hit", 5)
	})
	t.Run("a window named twice with a refund is not remembered", func(t *testing.T) {
		l, _, _ := setup(t)
		if got := count(t, l, win(4, 0), win(2, limiter.RefundBucket)); got[0].Allowed || got[1].Count != 2 {
			t.Fatalf("got %+v, want over at 4, then 2 after the refund", got)
		}
		if d := count(t, l, win(0, limiter.CheckOnly))[0]; !d.Allowed || d.Cached || d.Count != 2 {
			t.Fatalf("peek: got %+v, want within from the store, count 2", d)
		}
	})
	t.Run("the cache is off by default and with a size of zero", func(t *testing.T) {
		cs := &countingStore{Store: memory.New(memory.Options{})}
		l := limiter.NewWithOptions(cs, clock.NewFake(storetest.Base()), limiter.Options{})
		count(t, l, win(4, 0))
		if d := count(t, l, win(1, 0))[0]; d.Cached || d.Count != 5 {
			t.Fatalf("got %+v, want counted by the store: 5", d)
		}
	})
}

func TestLocalCacheEvictionOnlyCostsAStoreCall(t *testing.T) {
	t.Parallel()
	cs := &countingStore{Store: memory.New(memory.Options{})}
	clk := clock.NewFake(storetest.Base())
	l := limiter.NewWithOptions(cs, clk, limiter.Options{LocalCacheBytes: 512 << 10})
	zero := limiter.Window{Limit: 0, Length: time.Hour}
	key := func(i int) limiter.Transaction {
		return limiter.Transaction{Key: fmt.Sprintf("domain_a_rather_long_descriptor_key_%08d_", i), Window: zero, Cost: 1}
	}
	// Far more over-limit keys than 512 KiB holds.
	const keys = 50000
	out := make([]limiter.Decision, 1)
	for i := range keys {
		if err := l.Count(context.Background(), []limiter.Transaction{key(i)}, out); err != nil {
			t.Fatal(err)
		}
	}
	before := cs.ops.Load()
	evicted := 0
	for i := keys - 1; i >= 0; i-- { // the newest first: those are kept
		d := count(t, l, key(i))[0]
		if d.Allowed {
			t.Fatalf("key %d: got %+v, want over", i, d)
		}
		if !d.Cached {
			evicted++
		}
	}
	if got := cs.ops.Load() - before; got != int64(evicted) || evicted == 0 || evicted == keys {
		t.Fatalf("got %d store operations for %d evicted keys of %d, want as many, and some but not all evicted", got, evicted, keys)
	}
}

func TestStopIncrementWhenOverLimitOnRedis(t *testing.T) {
	t.Parallel()
	onePerHour := limiter.Window{Limit: 1, Length: time.Hour}
	tenPerHour := limiter.Window{Limit: 10, Length: time.Hour}
	strict := limiter.Transaction{Key: "d_strict_", Window: onePerHour, Cost: 1}
	loose := limiter.Transaction{Key: "d_loose_", Window: tenPerHour, Cost: 1}
	for _, tt := range []struct {
		name  string
		opts  limiter.Options
		envoy bool
		// The loose counter after each of three requests of both
		// descriptors, and whether the third is answered from the cache.
		wantLoose  [3]string
		wantCached bool
	}{
		{name: "off, every descriptor is counted", wantLoose: [3]string{"1", "2", "3"}},
		{name: "on, the others are not counted when one would go over", opts: limiter.Options{StopIncrementWhenOverLimit: true}, wantLoose: [3]string{"1", "1", "1"}},
		{name: "on with envoyproxy/ratelimit's commands too", opts: limiter.Options{StopIncrementWhenOverLimit: true}, envoy: true, wantLoose: [3]string{"1", "1", "1"}},
		{name: "on, the others are not counted when one is in the local cache", opts: limiter.Options{StopIncrementWhenOverLimit: true, LocalCacheBytes: 1 << 20}, wantLoose: [3]string{"1", "1", "1"}, wantCached: true},
		{name: "off with the local cache, the others are counted", opts: limiter.Options{LocalCacheBytes: 1 << 20}, wantLoose: [3]string{"1", "2", "3"}, wantCached: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartSingle(t)
			s, err := redis.New(context.Background(), redis.Options{Addrs: []string{srv.Addr}, Timeout: 5 * time.Second, EnvoyCompatible: tt.envoy})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			clk := clock.NewFake(storetest.Base())
			l := limiter.NewWithOptions(s, clk, tt.opts)
			suffix := strconv.FormatInt(clk.Now().Unix(), 10)
			for i, want := range tt.wantLoose {
				got := count(t, l, strict, loose)
				if got[0].Allowed != (i == 0) || !got[1].Allowed {
					t.Fatalf("request %d: got %+v, want the strict descriptor over after the first, the loose one allowed", i+1, got)
				}
				if i == 2 && got[0].Cached != tt.wantCached {
					t.Errorf("request 3: got cached %t, want %t", got[0].Cached, tt.wantCached)
				}
				if n := srv.MustDo("GET", loose.Key+suffix); n != want {
					t.Errorf("request %d: got the loose counter at %v, want %s", i+1, n, want)
				}
				if got[1].Remaining != 10-mustInt(t, srv.MustDo("GET", loose.Key+suffix)) {
					t.Errorf("request %d: got %d remaining for the loose descriptor, want the limit less its counter", i+1, got[1].Remaining)
				}
			}
		})
	}
}

func mustInt(t *testing.T, v any) int64 {
	t.Helper()
	s, _ := v.(string)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("got %v, want an integer", v)
	}
	return n
}

// TestStopIncrementCountsAPeekOverTheLimit: with StopIncrementWhenOverLimit
// a descriptor peeked (Envoy's hits_addend of 0) whose window is already
// over its limit spares the request's other descriptors, as one that
// would go over does: envoyproxy/ratelimit (f2fb157) takes every
// descriptor's count plus its hits, 0 for a peek, past the limit as
// reason to count only those.
func TestStopIncrementCountsAPeekOverTheLimit(t *testing.T) {
	t.Parallel()
	onePerHour := limiter.Window{Limit: 1, Length: time.Hour}
	strict := limiter.Transaction{Key: "d_strict_", Window: onePerHour, Cost: 2}
	peek := limiter.Transaction{Key: "d_strict_", Window: onePerHour, Kind: limiter.CheckOnly}
	loose := limiter.Transaction{Key: "d_loose_", Window: limiter.Window{Limit: 10, Length: time.Hour}, Cost: 1}
	for _, tt := range []struct {
		name string
		opts limiter.Options
		want int64 // the loose window's count after the request
	}{
		{name: "off, the other descriptor is counted", want: 1},
		{name: "on, the other descriptor is only peeked", opts: limiter.Options{StopIncrementWhenOverLimit: true}, want: 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := limiter.NewWithOptions(memory.New(memory.Options{}), clock.NewFake(storetest.Base()), tt.opts)
			if d := count(t, l, strict)[0]; d.Allowed || d.Count != 2 {
				t.Fatalf("2 hits on a limit of 1: got %+v, want over at 2", d)
			}
			got := count(t, l, peek, loose)
			if got[0].Allowed || !got[1].Allowed || got[1].Count != tt.want || got[1].Remaining != 10-tt.want {
				t.Fatalf("got %+v, want the peek over, the loose window allowed at %d", got, tt.want)
			}
			if d := count(t, l, limiter.Transaction{Key: "d_loose_", Window: loose.Window, Kind: limiter.CheckOnly})[0]; d.Count != tt.want {
				t.Fatalf("the loose window afterwards: got count %d, want %d", d.Count, tt.want)
			}
		})
	}
}
