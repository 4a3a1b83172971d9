package gcra_test

import (
	"fmt"
	"time"

	"github.com/sluice-rl/sluice/gcra"
)

func ExampleSpend() {
	limit := gcra.Limit{Burst: 20, Count: 20, Period: time.Second}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	// The first request finds no bucket (a zero TAT): it is full.
	d := gcra.Spend(now, limit, time.Time{}, 1)
	fmt.Println(d.Allowed, d.Remaining, d.ResetIn)

	// Keep the new TAT as the bucket's state for the next call.
	d = gcra.Spend(now.Add(5*time.Millisecond), limit, d.TAT, 1)
	fmt.Println(d.Allowed, d.Remaining, d.ResetIn)
	// Output:
	// true 19 50ms
	// true 18 95ms
}

func ExampleRefund() {
	limit := gcra.Limit{Burst: 10, Count: 10, Period: time.Second}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d := gcra.Spend(now, limit, time.Time{}, 4)
	d = gcra.Refund(now, limit, d.TAT, 3)
	fmt.Println(d.Allowed, d.Remaining)
	// Output:
	// true 9
}
