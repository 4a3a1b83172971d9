package gcra_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/gcra"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// step is one row of a timeline: at an offset from t0, spend (or refund)
// cost and expect the decision.
type step struct {
	at            time.Duration
	refund        bool
	cost          int64
	wantAllowed   bool
	wantRemaining int64
	wantRetryIn   time.Duration
	wantResetIn   time.Duration
}

func runTimeline(t *testing.T, l gcra.Limit, steps []step) {
	t.Helper()
	var tat time.Time
	for i, s := range steps {
		now := t0.Add(s.at)
		var d gcra.Decision
		if s.refund {
			d = gcra.Refund(now, l, tat, s.cost)
		} else {
			d = gcra.Spend(now, l, tat, s.cost)
		}
		if d.Allowed != s.wantAllowed || d.Remaining != s.wantRemaining || d.RetryIn != s.wantRetryIn || d.ResetIn != s.wantResetIn {
			t.Fatalf("step %d (at %s, cost %d, refund %v): got allowed=%v remaining=%d retryIn=%s resetIn=%s, want allowed=%v remaining=%d retryIn=%s resetIn=%s",
				i, s.at, s.cost, s.refund, d.Allowed, d.Remaining, d.RetryIn, d.ResetIn, s.wantAllowed, s.wantRemaining, s.wantRetryIn, s.wantResetIn)
		}
		if d.Allowed {
			tat = d.TAT
		}
	}
}

// The seed's worked example: 20 per second with a burst of 20.
var twentyPerSecond = gcra.Limit{Burst: 20, Count: 20, Period: time.Second}

func TestSeedExampleFirstRequestLeavesNineteen(t *testing.T) {
	t.Parallel()
	d := gcra.Spend(t0, twentyPerSecond, time.Time{}, 1)
	if !d.Allowed || d.Remaining != 19 || d.ResetIn != 50*time.Millisecond || d.RetryIn != 0 {
		t.Fatalf("got %+v, want allowed, 19 remaining, reset in 50ms, no retry", d)
	}
	if want := t0.Add(50 * time.Millisecond); !d.TAT.Equal(want) {
		t.Fatalf("got TAT %v, want %v", d.TAT, want)
	}
}

func TestSeedExampleBurstThenSteadyRate(t *testing.T) {
	t.Parallel()
	var steps []step
	// Twenty requests at one instant are all allowed...
	for i := int64(1); i <= 20; i++ {
		s := step{cost: 1, wantAllowed: true, wantRemaining: 20 - i, wantResetIn: time.Duration(i) * 50 * time.Millisecond}
		if i == 20 {
			s.wantRetryIn = 50 * time.Millisecond // the bucket is now empty
		}
		steps = append(steps, s)
	}
	// ...and the 21st is denied until one token has dripped back.
	steps = append(steps, step{cost: 1, wantRemaining: 0, wantRetryIn: 50 * time.Millisecond, wantResetIn: time.Second})
	// After that, one request every 50ms is allowed, indefinitely, and a
	// second one in the same instant is not.
	for k := 1; k <= 100; k++ {
		at := time.Duration(k) * 50 * time.Millisecond
		steps = append(steps,
			step{at: at, cost: 1, wantAllowed: true, wantRemaining: 0, wantRetryIn: 50 * time.Millisecond, wantResetIn: time.Second},
			step{at: at, cost: 1, wantRemaining: 0, wantRetryIn: 50 * time.Millisecond, wantResetIn: time.Second},
		)
	}
	runTimeline(t, twentyPerSecond, steps)
}

func TestTimelines(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	tests := []struct {
		name  string
		limit gcra.Limit
		steps []step
	}{
		{
			name:  "a peek with cost 0 on a new bucket sees it full and takes nothing",
			limit: twentyPerSecond,
			steps: []step{
				{cost: 0, wantAllowed: true, wantRemaining: 20},
				{cost: 0, wantAllowed: true, wantRemaining: 20},
				{cost: 1, wantAllowed: true, wantRemaining: 19, wantResetIn: 50 * ms},
				{cost: 0, wantAllowed: true, wantRemaining: 19, wantResetIn: 50 * ms},
			},
		},
		{
			name:  "a peek on an empty bucket is allowed with nothing remaining",
			limit: gcra.Limit{Burst: 2, Count: 2, Period: time.Second},
			steps: []step{
				// The retry is for another request of the same cost.
				{cost: 2, wantAllowed: true, wantRemaining: 0, wantRetryIn: time.Second, wantResetIn: time.Second},
				{cost: 0, wantAllowed: true, wantRemaining: 0, wantResetIn: time.Second},
			},
		},
		{
			name:  "a refund gives tokens back but never past a full bucket",
			limit: gcra.Limit{Burst: 10, Count: 10, Period: time.Second},
			steps: []step{
				{cost: 5, wantAllowed: true, wantRemaining: 5, wantResetIn: 500 * ms},
				{refund: true, cost: 2, wantAllowed: true, wantRemaining: 7, wantResetIn: 300 * ms},
				// Only 3 tokens are missing; refunding 10 fills the bucket.
				{refund: true, cost: 10, wantAllowed: true, wantRemaining: 10},
			},
		},
		{
			name:  "a refund on a full bucket is not allowed",
			limit: twentyPerSecond,
			steps: []step{
				{cost: 1, wantAllowed: true, wantRemaining: 19, wantResetIn: 50 * ms},
				// 60ms later the bucket has refilled.
				{at: 60 * ms, refund: true, cost: 1, wantAllowed: false, wantRemaining: 20},
			},
		},
		{
			name:  "a cost larger than what is left is denied with the wait for the missing tokens",
			limit: gcra.Limit{Burst: 10, Count: 10, Period: time.Second},
			steps: []step{
				{cost: 8, wantAllowed: true, wantRemaining: 2, wantRetryIn: 600 * ms, wantResetIn: 800 * ms},
				{cost: 5, wantAllowed: false, wantRemaining: 2, wantRetryIn: 300 * ms, wantResetIn: 800 * ms},
				{at: 300 * ms, cost: 5, wantAllowed: true, wantRemaining: 0, wantRetryIn: 500 * ms, wantResetIn: time.Second},
			},
		},
		{
			name:  "a slow rate with a large burst floors the remaining tokens",
			limit: gcra.Limit{Burst: 300, Count: 300, Period: 180 * time.Minute},
			steps: []step{
				{cost: 1, wantAllowed: true, wantRemaining: 299, wantResetIn: 36 * time.Second},
				// 35s later not a whole token has come back.
				{at: 35 * time.Second, cost: 0, wantAllowed: true, wantRemaining: 299, wantResetIn: time.Second},
				{at: 36 * time.Second, cost: 0, wantAllowed: true, wantRemaining: 300},
			},
		},
		{
			name:  "an emission interval that does not divide evenly uses integer nanoseconds",
			limit: gcra.Limit{Burst: 3, Count: 3, Period: time.Second},
			steps: []step{
				{cost: 1, wantAllowed: true, wantRemaining: 2, wantResetIn: 333333333},
				{cost: 2, wantAllowed: true, wantRemaining: 0, wantRetryIn: 666666666, wantResetIn: 999999999},
				{cost: 1, wantAllowed: false, wantRemaining: 0, wantRetryIn: 333333333, wantResetIn: 999999999},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			runTimeline(t, tt.limit, tt.steps)
		})
	}
}

func TestDeniedSpendLeavesTATUnchanged(t *testing.T) {
	t.Parallel()
	l := gcra.Limit{Burst: 1, Count: 1, Period: time.Second}
	first := gcra.Spend(t0, l, time.Time{}, 1)
	second := gcra.Spend(t0, l, first.TAT, 1)
	if second.Allowed {
		t.Fatalf("got allowed, want denied")
	}
	if !second.TAT.Equal(first.TAT) {
		t.Fatalf("got TAT %v, want unchanged %v", second.TAT, first.TAT)
	}
}

func TestRefundOnMissingBucket(t *testing.T) {
	t.Parallel()
	d := gcra.Refund(t0, twentyPerSecond, time.Time{}, 1)
	if d.Allowed || d.Remaining != 20 || !d.TAT.IsZero() {
		t.Fatalf("got %+v, want not allowed, 20 remaining, zero TAT", d)
	}
}

func TestValidation(t *testing.T) {
	t.Parallel()
	bad := []gcra.Limit{
		{Burst: 0, Count: 1, Period: time.Second},
		{Burst: 1, Count: -1, Period: time.Second},
		{Burst: 1, Count: 1, Period: 0},
		{Burst: 1, Count: 10, Period: 5}, // less than 1ns between tokens
	}
	for _, l := range bad {
		if err := l.Valid(); !errors.Is(err, gcra.ErrInvalidLimit) {
			t.Errorf("Valid(%+v): got %v, want ErrInvalidLimit", l, err)
		}
	}
	if err := twentyPerSecond.Valid(); err != nil {
		t.Errorf("Valid(20/s): got %v, want nil", err)
	}
	for _, c := range []int64{-1, 21} {
		if err := twentyPerSecond.ValidCost(c); !errors.Is(err, gcra.ErrInvalidCost) {
			t.Errorf("ValidCost(%d): got %v, want ErrInvalidCost", c, err)
		}
	}
	for _, c := range []int64{0, 1, 20} {
		if err := twentyPerSecond.ValidCost(c); err != nil {
			t.Errorf("ValidCost(%d): got %v, want nil", c, err)
		}
	}
}

// TestValidParamsAgreesWithValid checks ValidParams against Valid and
// Params on limits at and around every boundary Valid checks, and on
// random ones.
func TestValidParamsAgreesWithValid(t *testing.T) {
	t.Parallel()
	edges := []int64{math.MinInt64, -1, 0, 1, 2, 3, 5, 9, 10, 11, 1000,
		int64(gcra.MaxBurstOffset) - 1, int64(gcra.MaxBurstOffset), int64(gcra.MaxBurstOffset) + 1, math.MaxInt64}
	var limits []gcra.Limit
	for _, b := range edges {
		for _, c := range edges {
			for _, p := range edges {
				limits = append(limits, gcra.Limit{Burst: b, Count: c, Period: time.Duration(p)})
			}
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 100_000 {
		limits = append(limits, gcra.Limit{
			Burst:  rng.Int64N(1<<40) - 10,
			Count:  rng.Int64N(1<<20) - 10,
			Period: time.Duration(rng.Int64N(1<<50) - 10),
		})
	}
	valid := 0
	for _, l := range limits {
		p, ok := l.ValidParams()
		if want := l.Valid() == nil; ok != want {
			t.Fatalf("ValidParams(%+v): ok %v, Valid says %v", l, ok, l.Valid())
		}
		if ok {
			valid++
			if p != l.Params() {
				t.Fatalf("ValidParams(%+v) = %+v, Params %+v", l, p, l.Params())
			}
		}
	}
	if valid == 0 || valid == len(limits) {
		t.Fatalf("%d of %d limits valid: the cases do not cover both answers", valid, len(limits))
	}
}

func BenchmarkSpend(b *testing.B) {
	b.ReportAllocs()
	l := gcra.Limit{Burst: 1000, Count: 1000, Period: time.Second}
	now := t0
	var tat time.Time
	for b.Loop() {
		now = now.Add(time.Millisecond)
		d := gcra.Spend(now, l, tat, 1)
		if d.Allowed {
			tat = d.TAT
		}
	}
}

func BenchmarkParamsSpend(b *testing.B) {
	b.ReportAllocs()
	p := gcra.Limit{Burst: 1000, Count: 1000, Period: time.Second}.Params()
	now := t0.UnixNano()
	var tat int64
	for b.Loop() {
		now += int64(time.Millisecond)
		d := p.Spend(now, tat, 1)
		if d.Allowed {
			tat = d.TAT
		}
	}
}

func TestValidRefusesBucketsThatTakeTooLongToFill(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		limit   gcra.Limit
		wantErr bool
	}{
		{name: "a burst whose fill time overflows int64 is refused", limit: gcra.Limit{Burst: 1 << 40, Count: 1, Period: 1 << 62}, wantErr: true},
		{name: "the largest burst with a 1s interval is refused", limit: gcra.Limit{Burst: 1<<63 - 1, Count: 1, Period: time.Second}, wantErr: true},
		{name: "one token every 2,500,000h is refused", limit: gcra.Limit{Burst: 1, Count: 1, Period: 2500000 * time.Hour}, wantErr: true},
		{name: "a fill time just over the maximum is refused", limit: gcra.Limit{Burst: 2, Count: 1, Period: gcra.MaxBurstOffset/2 + 1}, wantErr: true},
		{name: "a fill time of exactly the maximum is allowed", limit: gcra.Limit{Burst: 2, Count: 1, Period: gcra.MaxBurstOffset / 2}},
		{name: "a million tokens a nanosecond apart are allowed", limit: gcra.Limit{Burst: 1 << 20, Count: 1 << 20, Period: 1 << 20}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.limit.Valid()
			if got := errors.Is(err, gcra.ErrInvalidLimit); got != tt.wantErr {
				t.Fatalf("Valid(%+v): got %v, want error %v", tt.limit, err, tt.wantErr)
			}
		})
	}
}

func TestHugeCostsNeverOverflow(t *testing.T) {
	t.Parallel()
	// Stores and the Envoy service pass costs the API edge did not check
	// against the burst; a cost of any size must be denied (a spend) or
	// empty the bucket to full (a refund), never wrap around.
	l := gcra.Limit{Burst: 3, Count: 10, Period: time.Minute} // one token every 6s
	const maxCost = 1<<63 - 1
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "a spend of the largest cost on a full bucket is denied, with the longest retry",
			steps: []step{
				{cost: maxCost, wantRemaining: 3, wantRetryIn: 1<<63 - 1},
			},
		},
		{
			name: "a spend of one more than the burst is denied until it could never fit",
			steps: []step{
				{cost: 4, wantRemaining: 3, wantRetryIn: 6 * time.Second},
			},
		},
		{
			name: "a refund of the largest cost fills the bucket",
			steps: []step{
				{cost: 2, wantAllowed: true, wantRemaining: 1, wantRetryIn: 6 * time.Second, wantResetIn: 12 * time.Second},
				{refund: true, cost: maxCost, wantAllowed: true, wantRemaining: 3},
				{cost: 3, wantAllowed: true, wantRemaining: 0, wantRetryIn: 18 * time.Second, wantResetIn: 18 * time.Second},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			runTimeline(t, l, tt.steps)
		})
	}
}

// TestHandMadeParamsNeverDivideByZero: a Params not built by Limit.Params,
// its emission interval zero or negative, is answered, not a panic.
func TestHandMadeParamsNeverDivideByZero(t *testing.T) {
	t.Parallel()
	now := t0.UnixNano()
	for _, p := range []gcra.Params{{}, {Burst: 5}, {Burst: 5, EmissionInterval: -3, BurstOffset: 10}} {
		for _, cost := range []int64{-1, 0, 1, 6} {
			for _, tat := range []int64{0, now - 1, now + 100} {
				r := p.Spend(now, tat, cost)
				g := p.Refund(now, tat, cost)
				if r.TAT < 0 || g.TAT < 0 {
					t.Fatalf("%+v, cost %d, tat %d: Spend %+v, Refund %+v", p, cost, tat, r, g)
				}
			}
		}
	}
}
