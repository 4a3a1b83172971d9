package fallback_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/fallback"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/redis/redistest"
	"github.com/sluice-rl/sluice/store/storetest"
)

var now = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

var lim = gcra.Limit{Burst: 2, Count: 1, Period: time.Hour}

// flaky is a primary store that can be switched off: while down, every
// call fails with an error wrapping store.ErrUnavailable. Up, it is a
// memory store.
type flaky struct {
	store.Store
	down  atomic.Bool
	calls atomic.Int64
	pings atomic.Int64
}

func newFlaky() *flaky { return &flaky{Store: memory.New(memory.Options{})} }

func (f *flaky) Do(ctx context.Context, now time.Time, b store.Batch, out []store.Result) error {
	f.calls.Add(1)
	if f.down.Load() {
		return fmt.Errorf("%w: flaky is down", store.ErrUnavailable)
	}
	return f.Store.Do(ctx, now, b, out)
}

func (f *flaky) Ping(ctx context.Context) error {
	f.pings.Add(1)
	if f.down.Load() {
		return fmt.Errorf("%w: flaky is down", store.ErrUnavailable)
	}
	return nil
}

func spend(key string) store.Batch {
	return store.Batch{Ops: []store.Op{
		{Key: key, Algorithm: store.GCRA, Kind: store.Spend, Limit: lim, Cost: 1},
		{Key: key + "w_", Algorithm: store.FixedWindow, Kind: store.Spend, Window: store.Window{Limit: 7, Length: time.Minute}, Cost: 1},
	}}
}

func TestPolicies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		policy  fallback.Policy
		wantErr bool
		want    []store.Result
	}{
		{name: "error returns an unavailable error", policy: fallback.Error, wantErr: true},
		{name: "allow allows with a full bucket", policy: fallback.Allow, want: []store.Result{
			{Allowed: true, Remaining: 2}, {Allowed: true, Remaining: 7},
		}},
		{name: "deny denies for a second", policy: fallback.Deny, want: []store.Result{
			{RetryIn: time.Second, ResetIn: time.Second}, {RetryIn: time.Second, ResetIn: time.Second},
		}},
		{name: "local decides with the local store", policy: fallback.Local, want: []store.Result{
			{Allowed: true, Remaining: 1, ResetIn: time.Hour, Applied: true},
			{Allowed: true, Remaining: 6, ResetIn: time.Minute, Count: 1, Applied: true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				p := newFlaky()
				reg := prometheus.NewRegistry()
				s, err := fallback.New(p, tc.policy, memory.New(memory.Options{}), fallback.Options{Registerer: reg})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				out := make([]store.Result, 2)
				if err := s.Do(context.Background(), now, spend("a"), out); err != nil || !out[0].Allowed {
					t.Fatalf("primary up: got %v %+v, want allowed", err, out)
				}

				p.down.Store(true)
				for round := range 2 {
					// The first call finds the primary down; the second is
					// answered without asking it.
					calls := p.calls.Load()
					err = s.Do(context.Background(), now, spend("b"), out)
					if tc.wantErr {
						if !errors.Is(err, store.ErrUnavailable) {
							t.Fatalf("round %d: got %v, want ErrUnavailable", round, err)
						}
					} else if err != nil {
						t.Fatalf("round %d: %v", round, err)
					} else if round == 0 {
						for i := range tc.want {
							if out[i] != tc.want[i] {
								t.Errorf("op %d: got %+v, want %+v", i, out[i], tc.want[i])
							}
						}
					}
					if s.Healthy() {
						t.Errorf("round %d: Healthy is true with the primary down", round)
					}
					if round == 1 && p.calls.Load() != calls {
						t.Error("a call went to the primary while it was marked down")
					}
				}
				if got := metricValue(t, reg, "sluice_store_fallback_answers_total"); got != 2 {
					t.Errorf("fallback answers: got %v, want 2", got)
				}
				if got := metricValue(t, reg, "sluice_store_primary_up"); got != 0 {
					t.Errorf("primary up: got %v, want 0", got)
				}

				// The probe finds the primary back within a probe interval.
				p.down.Store(false)
				time.Sleep(fallback.DefaultProbeInterval + time.Millisecond)
				synctest.Wait()
				if !s.Healthy() {
					t.Fatal("not healthy one probe interval after the primary came back")
				}
				calls := p.calls.Load()
				if err := s.Do(context.Background(), now, spend("c"), out); err != nil {
					t.Fatal(err)
				}
				if p.calls.Load() != calls+1 {
					t.Error("the call after the recovery did not go to the primary")
				}
			})
		})
	}
}

// metricValue sums the values of the named metric in g.
func metricValue(t *testing.T, g prometheus.Gatherer, name string) float64 {
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
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

func TestOtherErrorsPassThrough(t *testing.T) {
	t.Parallel()
	p := newFlaky()
	s, err := fallback.New(p, fallback.Allow, nil, fallback.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b := spend("a")
	b.Ops[1].Key = b.Ops[0].Key // the same bucket twice
	if err := s.Do(context.Background(), now, b, make([]store.Result, 2)); !errors.Is(err, store.ErrBadBatch) {
		t.Fatalf("got %v, want ErrBadBatch", err)
	}
	if !s.Healthy() {
		t.Error("a bad batch marked the primary down")
	}
}

// slow is a primary that never answers before its context ends.
type slow struct{ flaky }

func (s *slow) Do(ctx context.Context, _ time.Time, _ store.Batch, _ []store.Result) error {
	<-ctx.Done()
	return ctx.Err()
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := &slow{flaky: *newFlaky()}
		s, err := fallback.New(p, fallback.Deny, nil, fallback.Options{Timeout: 50 * time.Millisecond, DenyRetryIn: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()

		// The caller's own deadline: answered by the policy, but the
		// primary is not blamed.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		out := make([]store.Result, 2)
		if err := s.Do(ctx, now, spend("a"), out); err != nil || out[0].Allowed || out[0].RetryIn != 3*time.Second {
			t.Fatalf("caller deadline: got %v %+v, want a denial for 3s", err, out[0])
		}
		cancel()
		if !s.Healthy() {
			t.Error("the caller's deadline marked the primary down")
		}

		// The store's timeout: the primary is too slow, so it is down.
		start := time.Now()
		if err := s.Do(context.Background(), now, spend("a"), out); err != nil || out[0].Allowed {
			t.Fatalf("store timeout: got %v %+v, want a denial", err, out[0])
		}
		if d := time.Since(start); d != 50*time.Millisecond {
			t.Errorf("answered after %s, want the 50ms timeout", d)
		}
		if s.Healthy() {
			t.Error("a primary slower than the timeout is still healthy")
		}
	})
}

func TestParsePolicy(t *testing.T) {
	t.Parallel()
	for _, p := range []fallback.Policy{fallback.Error, fallback.Allow, fallback.Deny, fallback.Local} {
		got, err := fallback.ParsePolicy(p.String())
		if err != nil || got != p {
			t.Errorf("ParsePolicy(%q): got %v %v, want %v", p, got, err, p)
		}
	}
	if _, err := fallback.ParsePolicy("maybe"); err == nil {
		t.Error("ParsePolicy(maybe): got no error")
	}
	if _, err := fallback.New(newFlaky(), fallback.Local, nil, fallback.Options{}); err == nil {
		t.Error("New with the local policy and no local store: got no error")
	}
}

// TestRedisKilledAndRestarted runs the local policy in front of a real
// Redis that dies and comes back on the same port.
func TestRedisKilledAndRestarted(t *testing.T) {
	t.Parallel()
	srv := redistest.StartSingle(t)
	const timeout = 100 * time.Millisecond
	primary, err := redis.New(context.Background(), redis.Options{Addrs: []string{srv.Addr}, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	s, err := fallback.New(primary, fallback.Local, memory.New(memory.Options{}), fallback.Options{ProbeInterval: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(tlog{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out := make([]store.Result, 2)
	do := func(key string) time.Duration {
		t.Helper()
		start := time.Now()
		if err := s.Do(context.Background(), now, spend(key), out); err != nil {
			t.Fatalf("Do: %v", err)
		}
		return time.Since(start)
	}
	do("before")
	if srv.MustDo("EXISTS", "before") != int64(1) {
		t.Fatal("the first spend did not reach Redis")
	}

	srv.Kill()
	for i := range 20 {
		if d := do("during" + strconv.Itoa(i)); d > timeout+300*time.Millisecond {
			t.Errorf("call %d took %s with Redis down, want at most the %s timeout", i, d, timeout)
		}
		if !out[0].Allowed || out[0].Remaining != 1 {
			t.Errorf("call %d: got %+v, want the local store's answer", i, out[0])
		}
	}
	if s.Healthy() {
		t.Error("healthy with Redis down")
	}

	srv.Restart()
	deadline := time.Now().Add(10 * time.Second)
	for !s.Healthy() {
		if time.Now().After(deadline) {
			t.Fatal("not healthy 10s after Redis came back")
		}
		time.Sleep(10 * time.Millisecond)
	}
	do("after")
	if srv.MustDo("EXISTS", "after") != int64(1) {
		t.Error("after the recovery, the spend did not reach Redis")
	}
}

// tlog writes log lines to the test log.
type tlog struct{ t *testing.T }

func (w tlog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestConformance runs the store suite through the wrapper: with the
// primary healthy, batches go to it; with the primary down and the local
// policy, every batch is decided by the local store.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		policy fallback.Policy
		down   bool
	}{
		{name: "primary up", policy: fallback.Error},
		{name: "primary down, local policy", policy: fallback.Local, down: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			storetest.Run(t, func(t *testing.T) store.Store {
				p := newFlaky()
				p.down.Store(tc.down)
				s, err := fallback.New(p, tc.policy, memory.New(memory.Options{}), fallback.Options{})
				if err != nil {
					t.Fatal(err)
				}
				return s
			})
		})
	}
}

// TestBadBatchesAreRefusedWhileDown: a batch no store accepts is refused
// with store.ErrBadBatch by every policy, as the primary would refuse it,
// not allowed, denied or blamed on the primary.
func TestBadBatchesAreRefusedWhileDown(t *testing.T) {
	t.Parallel()
	dup := spend("a")
	dup.Ops[1].Key = dup.Ops[0].Key
	negative := spend("a")
	negative.Ops[0].Cost = -1
	for _, policy := range []fallback.Policy{fallback.Error, fallback.Allow, fallback.Deny, fallback.Local} {
		for _, bad := range []struct {
			name string
			b    store.Batch
		}{
			{name: "a bucket named twice", b: dup},
			{name: "a negative cost", b: negative},
		} {
			t.Run(policy.String()+", "+bad.name, func(t *testing.T) {
				t.Parallel()
				p := newFlaky()
				p.down.Store(true)
				s, err := fallback.New(p, policy, memory.New(memory.Options{}), fallback.Options{})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				for round := range 2 { // finding the primary down, then knowing it
					if err := s.Do(context.Background(), now, bad.b, make([]store.Result, 2)); !errors.Is(err, store.ErrBadBatch) {
						t.Fatalf("round %d: got %v, want ErrBadBatch", round, err)
					}
				}
			})
		}
	}
}

// A caller whose own deadline is too short for a healthy Redis fails
// alone: the primary is not marked down, and the callers after it are
// answered by Redis (issue 17, bug 1: one caller with a 250µs deadline
// made nearly every other caller fail).
func TestACallersShortDeadlineFailsOnlyThatCall(t *testing.T) {
	t.Parallel()
	srv := redistest.StartSingle(t)
	primary, err := redis.New(context.Background(), redis.Options{Addrs: []string{srv.Addr}, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s, err := fallback.New(primary, fallback.Deny, nil, fallback.Options{ProbeInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out := make([]store.Result, 2)
	for i := range 50 {
		// Deadlines from already past to a few microseconds: each one
		// ends before any Redis could answer. The deny policy answers such
		// a call; it never marks the primary down.
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i)*time.Microsecond)
		if err := s.Do(ctx, now, spend("short"+strconv.Itoa(i)), out); err != nil {
			t.Fatalf("call %d: got %v, want an answer (Redis's or the policy's)", i, err)
		}
		cancel()
	}
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Do(cctx, now, spend("cancelled"), out); err != nil {
		t.Fatalf("a cancelled caller: got %v, want an answer", err)
	}
	if !s.Healthy() {
		t.Fatal("the primary was marked down by callers' own deadlines")
	}
	// A normal caller is answered by Redis, not by the deny policy.
	if err := s.Do(context.Background(), now, spend("normal"), out); err != nil || !out[0].Allowed {
		t.Fatalf("a normal caller after them: got %+v, %v, want allowed by Redis", out[0], err)
	}
	if srv.MustDo("EXISTS", "normal") != int64(1) {
		t.Error("the normal caller's spend did not reach Redis")
	}
}
