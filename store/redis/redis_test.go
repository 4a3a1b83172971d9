package redis_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/redis/redistest"
)

// slack is what a call may take beyond its timeout in the fault tests. It is
// generous because CI runs them under the race detector on 2 busy cores; a
// hung call would exceed any slack.
const slack = 1500 * time.Millisecond

// base is the fake clock's start: in the future, so nothing the tests
// write is mistaken for the past by a Redis on the real clock.
var base = time.Date(2030, 1, 2, 3, 4, 5, 123456789, time.UTC)

func newStore(t testing.TB, o redis.Options) *redis.Store {
	t.Helper()
	if o.Timeout == 0 {
		// Generous: the race detector and parallel tests slow things down.
		o.Timeout = 2 * time.Second
	}
	s, err := redis.New(context.Background(), o)
	if err != nil {
		t.Fatalf("redis.New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func single(t testing.TB, o redis.Options) (*redistest.Server, *redis.Store) {
	t.Helper()
	srv := redistest.StartSingle(t)
	o.Addrs = []string{srv.Addr}
	return srv, newStore(t, o)
}

func do(t testing.TB, s store.Store, now time.Time, b store.Batch) []store.Result {
	t.Helper()
	out := make([]store.Result, len(b.Ops))
	if err := s.Do(context.Background(), now, b, out); err != nil {
		t.Fatalf("Do: %v", err)
	}
	return out
}

func TestGCRATimeline(t *testing.T) {
	t.Parallel()
	_, s := single(t, redis.Options{KeyPrefix: "t:"})
	lim := gcra.Limit{Burst: 3, Count: 1, Period: time.Second}
	op := func(a store.Kind, cost int64) store.Batch {
		return store.Batch{Ops: []store.Op{{Key: "k", Algorithm: store.GCRA, Kind: a, Limit: lim, Cost: cost}}}
	}
	steps := []struct {
		name          string
		at            time.Duration
		action        store.Kind
		cost          int64
		wantAllowed   bool
		wantRemaining int64
		wantRetryIn   time.Duration
	}{
		{name: "a first spend is allowed", action: store.Spend, cost: 1, wantAllowed: true, wantRemaining: 2},
		{name: "a check does not spend", action: store.Check, cost: 2, wantAllowed: true, wantRemaining: 0, wantRetryIn: 2 * time.Second},
		{name: "spending the rest empties the bucket", action: store.Spend, cost: 2, wantAllowed: true, wantRemaining: 0, wantRetryIn: 2 * time.Second},
		{name: "an empty bucket denies", action: store.Spend, cost: 1, wantAllowed: false, wantRemaining: 0, wantRetryIn: time.Second},
		{name: "a token comes back after the emission interval", at: time.Second, action: store.Spend, cost: 1, wantAllowed: true, wantRemaining: 0, wantRetryIn: time.Second},
		{name: "a refund gives it back", at: time.Second, action: store.Refund, cost: 1, wantAllowed: true, wantRemaining: 1},
		{name: "a reset fills the bucket", at: time.Second, action: store.Reset, wantAllowed: true, wantRemaining: 3},
		{name: "a refund on a full bucket does nothing", at: time.Second, action: store.Refund, cost: 1, wantAllowed: false, wantRemaining: 3},
	}
	for _, st := range steps {
		r := do(t, s, base.Add(st.at), op(st.action, st.cost))[0]
		if r.Allowed != st.wantAllowed || r.Remaining != st.wantRemaining || r.RetryIn != st.wantRetryIn {
			t.Errorf("%s: got allowed %v remaining %d retryIn %s, want %v %d %s",
				st.name, r.Allowed, r.Remaining, r.RetryIn, st.wantAllowed, st.wantRemaining, st.wantRetryIn)
		}
	}
}

func TestRejectsBadBatches(t *testing.T) {
	t.Parallel()
	_, s := single(t, redis.Options{})
	lim := gcra.Limit{Burst: 1, Count: 1, Period: time.Second}
	for _, tc := range []struct {
		name string
		b    store.Batch
		out  int
	}{
		{name: "a repeated bucket", b: store.Batch{Ops: []store.Op{
			{Key: "a", Algorithm: store.GCRA, Kind: store.Spend, Limit: lim},
			{Key: "a", Algorithm: store.GCRA, Kind: store.Check, Limit: lim},
		}}, out: 2},
		{name: "a short output slice", b: store.Batch{Ops: []store.Op{{Key: "a", Algorithm: store.GCRA, Kind: store.Spend, Limit: lim}}}},
		{name: "an unknown algorithm", b: store.Batch{Ops: []store.Op{{Key: "a", Kind: store.Spend, Limit: lim}}}, out: 1},
		{name: "an invalid limit", b: store.Batch{Ops: []store.Op{{Key: "a", Algorithm: store.GCRA, Kind: store.Spend}}}, out: 1},
		{name: "a negative cost", b: store.Batch{Ops: []store.Op{{Key: "a", Algorithm: store.GCRA, Kind: store.Spend, Limit: lim, Cost: -1}}}, out: 1},
		{name: "a fractional window", b: store.Batch{Ops: []store.Op{{Key: "a", Algorithm: store.FixedWindow, Kind: store.Spend, Window: store.Window{Limit: 1, Length: 1500 * time.Millisecond}}}}, out: 1},
	} {
		err := s.Do(context.Background(), base, tc.b, make([]store.Result, tc.out))
		if !errors.Is(err, store.ErrBadBatch) {
			t.Errorf("%s: got %v, want ErrBadBatch", tc.name, err)
		}
	}
}

// limits the property test draws from: ordinary ones, a 1ns emission
// interval, a period/count that truncates, and burst offsets far beyond
// 2^53 ns (where doubles would lose nanoseconds).
var propLimits = []gcra.Limit{
	{Burst: 5, Count: 5, Period: time.Second},
	{Burst: 3, Count: 7, Period: 7},
	{Burst: 20, Count: 7, Period: time.Hour},
	{Burst: 10, Count: 1, Period: 365 * 24 * time.Hour},
	{Burst: 33, Count: 1, Period: 3 * 365 * 24 * time.Hour}, // 99 years, near gcra.MaxBurstOffset
	{Burst: 4, Count: 3, Period: 1000000007},
}

var propWindows = []store.Window{
	{Limit: 3, Length: time.Second},
	{Limit: 10, Length: time.Minute},
	{Limit: 1000, Length: 7 * 24 * time.Hour},
}

// randomBatch draws a batch of 1 to 4 operations on distinct keys.
func randomBatch(rng *rand.Rand, envoy bool) store.Batch {
	n := 1 + rng.IntN(4)
	keys := rng.Perm(7)[:n]
	b := store.Batch{AllOrNothing: rng.IntN(2) == 0}
	for _, k := range keys {
		op := store.Op{Kind: store.Kind(1 + rng.IntN(5))}
		if k < 4 {
			op.Key = "g" + strconv.Itoa(k)
			op.Algorithm = store.GCRA
			op.Limit = propLimits[rng.IntN(len(propLimits))]
			op.Cost = rng.Int64N(op.Limit.Burst + 2)
			if rng.IntN(4) == 0 {
				op.Cost = 1
			}
		} else {
			// A window key always has the same length: its state is
			// per window.
			op.Key = "w" + strconv.Itoa(k) + "_"
			op.Algorithm = store.FixedWindow
			op.Window = propWindows[k-4]
			op.Window.Limit += rng.Int64N(3) // limits may change between calls
			op.Cost = rng.Int64N(op.Window.Limit/2 + 2)
			if envoy && op.Cost == 0 {
				// envoyproxy/ratelimit creates the key on a 0-hit INCRBY;
				// the model does not.
				op.Cost = 1
			}
		}
		b.Ops = append(b.Ops, op)
	}
	return b
}

// randomStep moves the fake clock: often not at all, else by a nanosecond
// up to a few hours.
func randomStep(rng *rand.Rand) time.Duration {
	switch rng.IntN(6) {
	case 0, 1:
		return 0
	case 2:
		return time.Duration(rng.Int64N(1000))
	case 3:
		return time.Duration(rng.Int64N(int64(2 * time.Second)))
	case 4:
		return time.Duration(rng.Int64N(int64(time.Minute)))
	}
	return time.Duration(rng.Int64N(int64(3 * time.Hour)))
}

// propertyCheck runs random batches against s and the model and fails on
// the first difference.
func propertyCheck(t *testing.T, s store.Store, seed uint64, steps int, envoy bool) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	m := newModel()
	now := base
	for step := range steps {
		now = now.Add(randomStep(rng))
		b := randomBatch(rng, envoy)
		want := m.do(now, b)
		got := do(t, s, now, b)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("seed %d step %d at %s, batch %+v, op %d:\ngot  %+v\nwant %+v",
					seed, step, now.Format(time.RFC3339Nano), b, i, got[i], want[i])
			}
		}
	}
}

func TestMatchesThePureFunctions(t *testing.T) {
	t.Parallel()
	srv := redistest.StartSingle(t)
	steps := 1500
	if testing.Short() {
		steps = 300
	}
	for _, tc := range []struct {
		name  string
		envoy bool
	}{
		{name: "scripted"},
		{name: "envoy compatible", envoy: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(3) {
				prefix := fmt.Sprintf("prop:%s:%d:", tc.name, seed)
				s := newStore(t, redis.Options{Addrs: []string{srv.Addr}, KeyPrefix: prefix, EnvoyCompatible: tc.envoy})
				propertyCheck(t, s, seed, steps, tc.envoy)
			}
		})
	}
}

func TestMatchesThePureFunctionsOnACluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	reg := prometheus.NewRegistry()
	s := newStore(t, redis.Options{Addrs: cl.Addrs(), Mode: redis.Cluster, KeyPrefix: "prop:", Registerer: reg})
	steps := 1500
	if testing.Short() {
		steps = 300
	}
	propertyCheck(t, s, 42, steps, false)
	if n := counterValue(t, reg, "sluice_redis_compensations_total"); n == 0 {
		t.Error("no multi-slot batch was compensated: the test did not exercise cross-slot all-or-nothing")
	}
}

func counterValue(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// hammer runs 64 goroutines spending 1 from one GCRA bucket and one
// window, at a fixed now, until each has tried tries times, and returns
// how many of each were admitted.
func hammer(t *testing.T, s store.Store, burst, limit int64) (gcraAdmitted, windowAdmitted int64) {
	t.Helper()
	const workers, tries = 64, 20
	lim := gcra.Limit{Burst: burst, Count: burst, Period: time.Hour}
	var g, w atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]store.Result, 1)
			for range tries {
				if err := s.Do(context.Background(), base, store.Batch{Ops: []store.Op{
					{Key: "hot", Algorithm: store.GCRA, Kind: store.Spend, Limit: lim, Cost: 1},
				}}, out); err != nil {
					errs <- err
					return
				}
				if out[0].Allowed {
					g.Add(1)
				}
				if err := s.Do(context.Background(), base, store.Batch{Ops: []store.Op{
					{Key: "hotw_", Algorithm: store.FixedWindow, Kind: store.Spend, Window: store.Window{Limit: limit, Length: time.Hour}, Cost: 1},
				}}, out); err != nil {
					errs <- err
					return
				}
				if out[0].Allowed {
					w.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return g.Load(), w.Load()
}

func TestConcurrentSpendsNeverOverAdmit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) store.Store
	}{
		{name: "single node", store: func(t *testing.T) store.Store {
			_, s := single(t, redis.Options{})
			return s
		}},
		{name: "single node, envoy compatible", store: func(t *testing.T) store.Store {
			_, s := single(t, redis.Options{EnvoyCompatible: true})
			return s
		}},
		{name: "cluster", store: func(t *testing.T) store.Store {
			cl := redistest.StartCluster(t, 3)
			return newStore(t, redis.Options{Addrs: cl.Addrs(), Mode: redis.Cluster})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := tc.store(t)
			const burst, limit = 100, 150
			g, w := hammer(t, s, burst, limit)
			if g != burst {
				t.Errorf("GCRA: got %d admitted, want exactly %d", g, burst)
			}
			if w != limit {
				t.Errorf("window: got %d admitted, want exactly %d", w, limit)
			}
		})
	}
}

func TestOneScriptCallPerBatch(t *testing.T) {
	t.Parallel()
	srv, s := single(t, redis.Options{})
	lim := gcra.Limit{Burst: 10, Count: 10, Period: time.Minute}
	b := store.Batch{AllOrNothing: true}
	for i := range 5 {
		b.Ops = append(b.Ops, store.Op{Key: "k" + strconv.Itoa(i), Algorithm: store.GCRA, Kind: store.Spend, Limit: lim, Cost: 1})
	}
	b.Ops = append(b.Ops, store.Op{Key: "w_", Algorithm: store.FixedWindow, Kind: store.Spend, Window: store.Window{Limit: 5, Length: time.Minute}, Cost: 1})
	do(t, s, base, b) // loads the script
	before := srv.CommandCalls()
	const batches = 10
	for i := range batches {
		do(t, s, base.Add(time.Duration(i)*time.Millisecond), b)
	}
	after := srv.CommandCalls()
	if got := after["evalsha"] - before["evalsha"]; got != batches {
		t.Errorf("EVALSHA: got %d calls for %d batches, want %d", got, batches, batches)
	}
	// (commandstats also counts the commands scripts run, so GET, SET and
	// INCRBY show up, and the client's connection set-up and keep-alive:
	// HELLO, CLIENT, PING. No other command may come from the client.)
	for c, n := range after {
		switch c {
		case "evalsha", "get", "set", "incrby", "expire", "info", "hello", "client|setname", "client|setinfo", "client", "ping":
			continue
		}
		if got := n - before[c]; got != 0 {
			t.Errorf("%s: got %d calls, want 0", c, got)
		}
	}
}

func TestReloadsTheScriptAfterAFlush(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	srv, s := single(t, redis.Options{Registerer: reg})
	lim := gcra.Limit{Burst: 2, Count: 1, Period: time.Minute}
	b := store.Batch{Ops: []store.Op{{Key: "k", Algorithm: store.GCRA, Kind: store.Spend, Limit: lim, Cost: 1}}}
	do(t, s, base, b)
	srv.MustDo("SCRIPT", "FLUSH")
	if r := do(t, s, base, b)[0]; !r.Allowed || r.Remaining != 0 {
		t.Fatalf("after SCRIPT FLUSH: got %+v, want allowed with 0 remaining", r)
	}
	if n := counterValue(t, reg, "sluice_redis_script_loads_total"); n < 1 {
		t.Errorf("script loads: got %v, want at least 1", n)
	}
}

func TestClockServer(t *testing.T) {
	t.Parallel()
	srv, s := single(t, redis.Options{ClockServer: true})
	lim := gcra.Limit{Burst: 2, Count: 1, Period: time.Hour}
	// The caller's now is a century off: it must not matter.
	callerNow := time.Date(1990, 1, 1, 0, 0, 0, 0, time.UTC)
	b := store.Batch{Ops: []store.Op{
		{Key: "g", Algorithm: store.GCRA, Kind: store.Spend, Limit: lim, Cost: 1},
		{Key: "w_", Algorithm: store.FixedWindow, Kind: store.Spend, Window: store.Window{Limit: 5, Length: time.Hour}, Cost: 1},
	}}
	before := time.Now()
	r := do(t, s, callerNow, b)
	after := time.Now()
	if !r[0].Allowed || r[0].Remaining != 1 || r[0].ResetIn != time.Hour {
		t.Errorf("GCRA: got %+v, want allowed, 1 remaining, reset in 1h", r[0])
	}
	tat, err := strconv.ParseInt(srv.MustDo("GET", "g").(string), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	// Redis TIME has microseconds; allow for that and for clock reads.
	lo, hi := before.Add(time.Hour-time.Millisecond).UnixNano(), after.Add(time.Hour+time.Millisecond).UnixNano()
	if tat < lo || tat > hi {
		t.Errorf("stored TAT %d not within server now + 1h [%d, %d]", tat, lo, hi)
	}
	start := after.Unix() - after.Unix()%3600
	key := "w_" + strconv.FormatInt(start, 10)
	if v, err := srv.Do("GET", key); err != nil || v != "1" {
		t.Errorf("window key %s: got %v %v, want 1 (window from the server clock)", key, v, err)
	}
	if !r[1].Allowed || r[1].Count != 1 || r[1].ResetIn <= 0 || r[1].ResetIn > time.Hour {
		t.Errorf("window: got %+v, want allowed, count 1, reset within the hour", r[1])
	}
}

func TestEnvoyCompatibleLayout(t *testing.T) {
	t.Parallel()
	srv, s := single(t, redis.Options{EnvoyCompatible: true, KeyPrefix: "ratelimit_"})
	now := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	// As envoyproxy/ratelimit builds it: domain_key_value_..._ then the
	// window start in Unix seconds.
	const descriptor = "mongo_cps_database_users_"
	b := store.Batch{Ops: []store.Op{{Key: descriptor, Algorithm: store.FixedWindow, Kind: store.Spend,
		Window: store.Window{Limit: 500, Length: time.Minute}, Cost: 3}}}
	before := srv.CommandCalls()
	r := do(t, s, now, b)
	after := srv.CommandCalls()
	if !r[0].Allowed || r[0].Count != 3 || r[0].Remaining != 497 || r[0].ResetIn != 51*time.Second {
		t.Errorf("got %+v, want allowed, count 3, remaining 497, reset in 51s", r[0])
	}
	key := "ratelimit_mongo_cps_database_users_" + strconv.FormatInt(now.Unix()-now.Unix()%60, 10)
	if v := srv.MustDo("GET", key); v != "3" {
		t.Errorf("GET %s: got %v, want 3", key, v)
	}
	if ttl := srv.MustDo("TTL", key).(int64); ttl < 59 || ttl > 60 {
		t.Errorf("TTL %s: got %d, want 60 (the unit in seconds)", key, ttl)
	}
	for cmd, want := range map[string]int64{"incrby": 1, "expire": 1, "evalsha": 0, "eval": 0} {
		if got := after[cmd] - before[cmd]; got != want {
			t.Errorf("%s: got %d calls, want %d", cmd, got, want)
		}
	}

	// envoyproxy/ratelimit counts into the same key: both agree.
	srv.MustDo("INCRBY", key, "2")
	r = do(t, s, now, store.Batch{Ops: []store.Op{{Key: descriptor, Algorithm: store.FixedWindow, Kind: store.Check,
		Window: store.Window{Limit: 500, Length: time.Minute}, Cost: 1}}})
	if r[0].Count != 5 || r[0].Remaining != 494 {
		t.Errorf("check after another server's hits: got %+v, want count 5, remaining 494", r[0])
	}
}

func TestGCRAKeyLayout(t *testing.T) {
	t.Parallel()
	srv, s := single(t, redis.Options{KeyPrefix: "sl:"})
	lim := gcra.Limit{Burst: 10, Count: 10, Period: 10 * time.Second} // E = 1s
	do(t, s, base, store.Batch{Ops: []store.Op{{Key: "3:12345", Algorithm: store.GCRA, Kind: store.Spend, Limit: lim, Cost: 4}}})
	want := base.Add(4 * time.Second).UnixNano()
	if v := srv.MustDo("GET", "sl:3:12345"); v != strconv.FormatInt(want, 10) {
		t.Errorf("GET: got %v, want %d (the TAT in Unix ns)", v, want)
	}
	if pttl := srv.MustDo("PTTL", "sl:3:12345").(int64); pttl < 4000 || pttl > 5000 {
		t.Errorf("PTTL: got %d ms, want the 4s to the TAT plus the 1s margin", pttl)
	}
}

func TestAuthAndTLS(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opt  redistest.Option
	}{
		{name: "requirepass", opt: redistest.WithPassword("s3cret")},
		{name: "ACL user", opt: redistest.WithUser("sluice", "s3cret")},
		{name: "TLS", opt: redistest.WithTLS()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartSingle(t, tc.opt)
			o := redis.Options{Addrs: []string{srv.Addr}, Username: srv.Username, Password: srv.Password}
			if srv.TLS != nil {
				c, err := redis.TLSConfig(srv.TLS.CAFile, srv.TLS.ClientCertFile, srv.TLS.ClientKeyFile, srv.TLS.ServerName, false)
				if err != nil {
					t.Fatal(err)
				}
				o.TLS = c
			}
			s := newStore(t, o)
			lim := gcra.Limit{Burst: 1, Count: 1, Period: time.Minute}
			if r := do(t, s, base, store.Batch{Ops: []store.Op{{Key: "k", Algorithm: store.GCRA, Kind: store.Spend, Limit: lim, Cost: 1}}}); !r[0].Allowed {
				t.Errorf("got %+v, want allowed", r[0])
			}

			// The wrong credentials, or none, are refused at New.
			bad := o
			bad.Password = "wrong"
			if srv.TLS != nil {
				bad.TLS = nil
			}
			bad.Timeout = 500 * time.Millisecond
			if s, err := redis.New(context.Background(), bad); err == nil {
				s.Close()
				t.Error("New with wrong credentials or no TLS: got no error")
			}
		})
	}
}

func TestSentinel(t *testing.T) {
	t.Parallel()
	st := redistest.StartSentinel(t, 2, redistest.WithPassword("pw"))
	s := newStore(t, redis.Options{Addrs: st.Addrs(), Mode: redis.Sentinel, MasterName: st.MasterName, Password: "pw"})
	lim := gcra.Limit{Burst: 1, Count: 1, Period: time.Minute}
	b := store.Batch{Ops: []store.Op{{Key: "k", Algorithm: store.GCRA, Kind: store.Spend, Limit: lim, Cost: 1}}}
	if r := do(t, s, base, b); !r[0].Allowed {
		t.Errorf("first spend: got %+v, want allowed", r[0])
	}
	if r := do(t, s, base, b); r[0].Allowed {
		t.Errorf("second spend: got %+v, want denied", r[0])
	}
	if v := st.Master.MustDo("EXISTS", "k"); v != int64(1) {
		t.Errorf("the master does not hold the bucket: EXISTS = %v", v)
	}
}

func TestClusterModeRefusesASingleNode(t *testing.T) {
	t.Parallel()
	srv := redistest.StartSingle(t)
	if s, err := redis.New(context.Background(), redis.Options{Addrs: []string{srv.Addr}, Mode: redis.Cluster}); err == nil {
		s.Close()
		t.Fatal("got no error, want one: the node is not a cluster")
	}
}

func TestClusterAllOrNothingAcrossSlots(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	s := newStore(t, redis.Options{Addrs: cl.Addrs(), Mode: redis.Cluster})
	// Keys chosen to land on different nodes.
	keys := []string{"a", "b", "c", "d", "e", "f"}
	var ka, kb string
	for _, k := range keys[1:] {
		if cl.NodeFor(t, k) != cl.NodeFor(t, keys[0]) {
			ka, kb = keys[0], k
			break
		}
	}
	if kb == "" {
		t.Fatal("no two keys on different nodes")
	}
	lim := gcra.Limit{Burst: 5, Count: 5, Period: time.Hour}
	one := gcra.Limit{Burst: 1, Count: 1, Period: time.Hour}
	// Empty kb's one-token bucket.
	do(t, s, base, store.Batch{Ops: []store.Op{{Key: kb, Algorithm: store.GCRA, Kind: store.Spend, Limit: one, Cost: 1}}})
	b := store.Batch{AllOrNothing: true, Ops: []store.Op{
		{Key: ka, Algorithm: store.GCRA, Kind: store.Spend, Limit: lim, Cost: 2},
		{Key: kb, Algorithm: store.GCRA, Kind: store.Spend, Limit: one, Cost: 1},
	}}
	r := do(t, s, base, b)
	if !r[0].Allowed || r[0].Applied || r[1].Allowed || r[1].Applied {
		t.Fatalf("got %+v, want the first allowed but not applied, the second denied", r)
	}
	// ka was given back: a peek sees the full bucket.
	peek := do(t, s, base, store.Batch{Ops: []store.Op{{Key: ka, Algorithm: store.GCRA, Kind: store.Check, Limit: lim}}})
	if peek[0].Remaining != 5 {
		t.Errorf("after the compensation: got %d remaining, want 5", peek[0].Remaining)
	}
}

// TestUnavailable kills Redis under load: every call must come back within
// the timeout with an ErrUnavailable error, no goroutine may leak, and the
// same Store must work again once Redis is back on the same port.
func TestUnavailable(t *testing.T) {
	srv := redistest.StartSingle(t)
	const timeout = 200 * time.Millisecond
	goroutines := runtime.NumGoroutine()
	s, err := redis.New(context.Background(), redis.Options{Addrs: []string{srv.Addr}, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	lim := gcra.Limit{Burst: 1000000, Count: 1000, Period: time.Second}
	spend := func(key string) (time.Duration, error) {
		out := make([]store.Result, 2)
		start := time.Now()
		err := s.Do(context.Background(), base, store.Batch{Ops: []store.Op{
			{Key: key, Algorithm: store.GCRA, Kind: store.Spend, Limit: lim, Cost: 1},
			{Key: key + "w_", Algorithm: store.FixedWindow, Kind: store.Spend, Window: store.Window{Limit: 10, Length: time.Minute}, Cost: 1},
		}}, out)
		return time.Since(start), err
	}

	// Load from 16 goroutines while the server dies.
	var stop atomic.Bool
	var wg sync.WaitGroup
	var failed, slow atomic.Int64
	var firstBad atomic.Value
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				d, err := spend(fmt.Sprintf("k%d-%d", w, i%50))
				if d > timeout+slack {
					slow.Add(1)
				}
				if err != nil {
					failed.Add(1)
					if !errors.Is(err, store.ErrUnavailable) {
						firstBad.CompareAndSwap(nil, err)
					}
				}
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	srv.Kill()
	time.Sleep(500 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	if failed.Load() == 0 {
		t.Error("no call failed while Redis was down")
	}
	if v := firstBad.Load(); v != nil {
		t.Errorf("a failure does not wrap ErrUnavailable: %v", v)
	}
	if n := slow.Load(); n > 0 {
		t.Errorf("%d calls took longer than the timeout (%s) plus slack", n, timeout)
	}
	if err := s.Ping(context.Background()); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Ping while down: got %v, want ErrUnavailable", err)
	}

	srv.Restart()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := spend("again"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the store did not recover after the restart: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Close()

	// Goroutines settle: rueidis stops its background loops on Close.
	deadline = time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > goroutines {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d before, %d after\n%s", goroutines, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHungServer pauses Redis (SIGSTOP): connections stay up and nothing
// answers. Calls must give up at the timeout and work again once it
// resumes.
func TestHungServer(t *testing.T) {
	t.Parallel()
	const timeout = 150 * time.Millisecond
	srv, s := single(t, redis.Options{Timeout: timeout})
	b := store.Batch{Ops: []store.Op{{Key: "k", Algorithm: store.GCRA, Kind: store.Spend, Limit: gcra.Limit{Burst: 100, Count: 1, Period: time.Second}, Cost: 1}}}
	do(t, s, base, b)
	const long = 4 * time.Second
	slow := newStore(t, redis.Options{Addrs: []string{srv.Addr}, Timeout: long})
	do(t, slow, base, b)
	srv.Pause()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			err := s.Do(context.Background(), base, b, make([]store.Result, 1))
			if d := time.Since(start); d > timeout+slack {
				t.Errorf("took %s, want at most the %s timeout plus slack", d, timeout)
			}
			if !errors.Is(err, store.ErrUnavailable) {
				t.Errorf("got %v, want ErrUnavailable", err)
			}
		}()
	}
	// A caller's deadline sooner than the timeout bounds the call.
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			err := slow.Do(ctx, base, b, make([]store.Result, 1))
			if d := time.Since(start); d >= long {
				t.Errorf("caller deadline 100ms: took %s, the store's whole %s timeout", d, long)
			}
			if !errors.Is(err, store.ErrUnavailable) {
				t.Errorf("caller deadline 100ms: got %v, want ErrUnavailable", err)
			}
		}()
	}
	wg.Wait()
	srv.Resume()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := s.Do(context.Background(), base, b, make([]store.Result, 1))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recovery after resume: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestNewFailsWhenNothingListens(t *testing.T) {
	t.Parallel()
	redistest.Available(t)
	srv := redistest.StartSingle(t)
	srv.Kill()
	start := time.Now()
	_, err := redis.New(context.Background(), redis.Options{Addrs: []string{srv.Addr}, DialTimeout: 200 * time.Millisecond})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("got %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("New took %s", d)
	}
}

func BenchmarkDecision(b *testing.B) {
	_, s := single(b, redis.Options{})
	lim := gcra.Limit{Burst: 1 << 40, Count: 1 << 20, Period: time.Second}
	var n atomic.Int64
	b.ReportAllocs()
	// Many requests in flight, as in a server: rueidis pipelines them.
	b.SetParallelism(16)
	reportCPU(b, func() {
		b.RunParallel(func(pb *testing.PB) {
			key := "bench" + strconv.FormatInt(n.Add(1), 10)
			out := make([]store.Result, 1)
			batch := store.Batch{Ops: []store.Op{{Key: key, Algorithm: store.GCRA, Kind: store.Spend, Limit: lim, Cost: 1}}}
			for pb.Next() {
				if err := s.Do(context.Background(), base, batch, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

func BenchmarkBatchOfFive(b *testing.B) {
	_, s := single(b, redis.Options{})
	lim := gcra.Limit{Burst: 1 << 40, Count: 1 << 20, Period: time.Second}
	var n atomic.Int64
	b.ReportAllocs()
	// Many requests in flight, as in a server: rueidis pipelines them.
	b.SetParallelism(16)
	reportCPU(b, func() {
		b.RunParallel(func(pb *testing.PB) {
			id := strconv.FormatInt(n.Add(1), 10)
			batch := store.Batch{AllOrNothing: true}
			for i := range 4 {
				batch.Ops = append(batch.Ops, store.Op{Key: "b" + id + "-" + strconv.Itoa(i), Algorithm: store.GCRA, Kind: store.Spend, Limit: lim, Cost: 1})
			}
			batch.Ops = append(batch.Ops, store.Op{Key: "w" + id + "_", Algorithm: store.FixedWindow, Kind: store.Spend, Window: store.Window{Limit: 1 << 40, Length: time.Hour}, Cost: 1})
			out := make([]store.Result, len(batch.Ops))
			for pb.Next() {
				if err := s.Do(context.Background(), base, batch, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// A window count that a hit would carry past the int64 range is saturated:
// the hit is denied and not counted, and the call does not fail.
func TestWindowCountOverflow(t *testing.T) {
	t.Parallel()
	for _, envoy := range []bool{true, false} {
		t.Run(fmt.Sprintf("envoy-keys=%v", envoy), func(t *testing.T) {
			t.Parallel()
			srv, s := single(t, redis.Options{EnvoyCompatible: envoy, KeyPrefix: "ov_"})
			now := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
			op := store.Op{Key: "d_k_v_", Algorithm: store.FixedWindow, Kind: store.Spend,
				Window: store.Window{Limit: 10, Length: time.Hour}, Cost: 1}
			do(t, s, now, store.Batch{Ops: []store.Op{op}})
			keys, ok := srv.MustDo("KEYS", "ov_*").([]any)
			if !ok || len(keys) != 1 {
				t.Fatalf("KEYS ov_*: got %v, want one key", keys)
			}
			key := keys[0].(string)
			near := strconv.FormatInt(math.MaxInt64-2, 10)
			srv.MustDo("SET", key, near)
			op.Cost = 5
			r := do(t, s, now, store.Batch{Ops: []store.Op{op}})
			if r[0].Allowed || r[0].Applied || r[0].Remaining != 0 {
				t.Errorf("hit past the int64 range: got %+v, want denied, not applied, remaining 0", r[0])
			}
			if v := srv.MustDo("GET", key); v != near {
				t.Errorf("GET %s: got %v, want %s unchanged", key, v, near)
			}
		})
	}
}

// Five fixed windows counted as envoyproxy/ratelimit does (INCRBY and
// EXPIRE each, pipelined): the RLS service's 5-descriptor request.
func BenchmarkEnvoyWindowsOfFive(b *testing.B) {
	_, s := single(b, redis.Options{EnvoyCompatible: true})
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16)
	reportCPU(b, func() {
		b.RunParallel(func(pb *testing.PB) {
			id := strconv.FormatInt(n.Add(1), 10)
			var batch store.Batch
			for i := range 5 {
				batch.Ops = append(batch.Ops, store.Op{Key: "bench_k" + strconv.Itoa(i) + "_v" + id + "_", Algorithm: store.FixedWindow,
					Kind: store.Spend, Window: store.Window{Limit: 1 << 30, Length: time.Minute}, Cost: 1})
			}
			out := make([]store.Result, len(batch.Ops))
			for pb.Next() {
				if err := s.Do(context.Background(), base, batch, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// A batch is one round trip to Redis whatever its size: the commands of
// all its operations reach the server in one read.
func TestOneRoundTripPerBatch(t *testing.T) {
	t.Parallel()
	lim := gcra.Limit{Burst: 100, Count: 100, Period: time.Minute}
	win := store.Window{Limit: 100, Length: time.Minute}
	batch := func(n int, alg store.Algorithm, prefix string) store.Batch {
		var b store.Batch
		for i := range n {
			b.Ops = append(b.Ops, store.Op{Key: fmt.Sprintf("%s%d_", prefix, i), Algorithm: alg, Kind: store.Spend, Limit: lim, Window: win, Cost: 1})
		}
		return b
	}
	for _, envoy := range []bool{true, false} {
		t.Run(fmt.Sprintf("envoy-keys=%v", envoy), func(t *testing.T) {
			t.Parallel()
			srv, s := single(t, redis.Options{EnvoyCompatible: envoy})
			for _, tc := range []struct {
				name string
				b    store.Batch
			}{
				{"1 window", batch(1, store.FixedWindow, "w1_")},
				{"5 windows", batch(5, store.FixedWindow, "w5_")},
				{"5 GCRA buckets", batch(5, store.GCRA, "g5_")},
				{"20 windows", batch(20, store.FixedWindow, "w20_")},
			} {
				do(t, s, base, tc.b) // the script loaded, the connection up
				// Another client's (a keep-alive PING's) read can fall in
				// between: the fewest of a few tries counts.
				best := int64(math.MaxInt64)
				for range 5 {
					before := srv.Reads()
					do(t, s, base, tc.b)
					best = min(best, srv.Reads()-before-1)
				}
				if best != 1 {
					t.Errorf("%s: %d reads by Redis, want 1 round trip", tc.name, best)
				}
			}
			// The measure counts round trips: two batches are two.
			b := batch(5, store.FixedWindow, "two_")
			do(t, s, base, b)
			before := srv.Reads()
			do(t, s, base, b)
			do(t, s, base, b)
			if got := srv.Reads() - before - 1; got < 2 {
				t.Errorf("two batches: %d reads by Redis, want at least 2", got)
			}
		})
	}
}
