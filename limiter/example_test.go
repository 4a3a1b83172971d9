package limiter_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/store/memory"
)

func Example() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := limiter.New(memory.New(memory.Options{}), clk)
	ctx := context.Background()
	perIP := gcra.Limit{Burst: 2, Count: 2, Period: time.Second}

	for range 3 {
		d, _ := l.Spend(ctx, limiter.Transaction{Key: "1:192.0.2.1", Limit: perIP, Cost: 1})
		fmt.Println(d.Allowed, d.Remaining, d.RetryIn)
	}
	clk.Add(500 * time.Millisecond)
	d, _ := l.Spend(ctx, limiter.Transaction{Key: "1:192.0.2.1", Limit: perIP, Cost: 1})
	fmt.Println(d.Allowed, d.Remaining)
	// Output:
	// true 1 0s
	// true 0 500ms
	// false 0 500ms
	// true 0
}

func ExampleLimiter_Batch() {
	l := limiter.New(memory.New(memory.Options{}), clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
	ctx := context.Background()
	account := gcra.Limit{Burst: 300, Count: 300, Period: 3 * time.Hour}
	ip := gcra.Limit{Burst: 1, Count: 1, Period: time.Hour}

	// The IP's only token is gone, so the batch is denied and the account
	// is not charged either.
	_, _ = l.Spend(ctx, limiter.Transaction{Key: "1:192.0.2.1", Limit: ip, Cost: 1})
	d, each, _ := l.Batch(ctx, []limiter.Transaction{
		{Key: "3:12345678", Limit: account, Cost: 1},
		{Key: "1:192.0.2.1", Limit: ip, Cost: 1},
	})
	fmt.Println(d.Allowed, d.Index, d.RetryIn, each[0].Allowed)
	c, _ := l.Check(ctx, limiter.Transaction{Key: "3:12345678", Limit: account})
	fmt.Println(c.Remaining)
	// Output:
	// false 1 1h0m0s true
	// 300
}

// The README's library path: a key-value limit resolved by name and id,
// spent through the limiter.
func ExampleForBucket() {
	defaults, _ := limits.ParseDefaults("defaults.yaml", []byte("NewOrdersPerAccount: {burst: 2, count: 2, period: 1h}\n"))
	set, _ := limits.New(defaults, nil)
	l := limiter.New(memory.New(memory.Options{}), clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
	ctx := context.Background()

	b, _ := set.Resolve(limits.NewOrdersPerAccount, "12345678")
	for range 3 {
		d, _ := l.Spend(ctx, limiter.ForBucket(b, "12345678", 1))
		fmt.Println(b.Key, d.Allowed, d.Remaining, d.RetryIn)
	}
	// Output:
	// 3:12345678 true 1 0s
	// 3:12345678 true 0 30m0s
	// 3:12345678 false 0 30m0s
}

// ExampleLimiter_SpendFor is the README's library path: the limit of an
// account's new orders, from a defaults file, spent three times.
func ExampleLimiter_SpendFor() {
	defaults, _ := limits.ParseDefaults("defaults.yaml", []byte("NewOrdersPerAccount: {burst: 2, count: 2, period: 1h}\n"))
	set, _ := limits.New(defaults, nil)
	l := limiter.New(memory.New(memory.Options{}), clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
	ctx := context.Background()

	for range 3 {
		d, _ := l.SpendFor(ctx, set, limits.NewOrdersPerAccount, "12345678", 1)
		fmt.Println(d.Allowed, d.Remaining, d.RetryIn)
	}
	_, err := l.SpendFor(ctx, set, limits.NewOrdersPerAccount, "not-a-number", 1)
	fmt.Println(limiter.KindOf(err) == limiter.Invalid)
	// Output:
	// true 1 0s
	// true 0 30m0s
	// false 0 30m0s
	// true
}

// ExampleNewWithOptions turns on the local over-limit cache: once a window
// is over its limit, Count answers it from memory until the window ends.
func ExampleNewWithOptions() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := limiter.NewWithOptions(memory.New(memory.Options{}), clk, limiter.Options{LocalCacheBytes: 1 << 20})
	ctx := context.Background()
	twoPerMinute := limiter.Transaction{Key: "edge_remote_address_192.0.2.1_", Window: limiter.Window{Limit: 2, Length: time.Minute}, Cost: 1}

	out := make([]limiter.Decision, 1)
	for range 4 {
		_ = l.Count(ctx, []limiter.Transaction{twoPerMinute}, out)
		fmt.Println(out[0].Allowed, out[0].Cached, out[0].ResetIn)
	}
	clk.Add(time.Minute)
	_ = l.Count(ctx, []limiter.Transaction{twoPerMinute}, out)
	fmt.Println(out[0].Allowed, out[0].Cached)
	// Output:
	// true false 1m0s
	// true false 1m0s
	// false false 1m0s
	// false true 1m0s
	// true false
}
