package limiter_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/store/memory"
)

// callersTxns returns n transactions of zero Kind, the default, as a
// caller builds them.
func callersTxns(n int) []limiter.Transaction {
	lim := gcra.Limit{Burst: 10, Count: 10, Period: time.Minute}
	txns := make([]limiter.Transaction, n)
	for i := range txns {
		txns[i] = limiter.Transaction{Key: fmt.Sprint("b", i), Limit: lim, Cost: 2}
	}
	return txns
}

// TestCallsLeaveTheCallersTransactions: Batch, Refund and ResetAll leave
// the caller's transactions as they were, for batches within and past
// the calls' own stack copy, so that the same transactions can be spent,
// refunded and spent again (before, Refund made them refunds and the next
// Batch refused them).
func TestCallsLeaveTheCallersTransactions(t *testing.T) {
	for _, n := range []int{1, 3, 8, 9, 20} {
		l := limiter.New(memory.New(memory.Options{}), clock.NewFake(time.Unix(1_700_000_000, 0)))
		ctx := context.Background()
		txns := callersTxns(n)
		want := callersTxns(n)
		unchanged := func(after string) {
			t.Helper()
			for i := range txns {
				if txns[i] != want[i] {
					t.Fatalf("%d transactions, after %s: transaction %d is %+v, was %+v", n, after, i, txns[i], want[i])
				}
			}
		}
		for round := range 2 {
			d, each, err := l.Batch(ctx, txns)
			if err != nil || !d.Allowed || len(each) != n || each[n-1].Remaining != 8 {
				t.Fatalf("%d transactions, round %d: Batch %+v, %d decisions, %v; want allowed, 8 remaining", n, round, d, len(each), err)
			}
			unchanged("Batch")
			d, each, err = l.Refund(ctx, txns...)
			if err != nil || !d.Allowed || len(each) != n || d.Remaining != 10 {
				t.Fatalf("%d transactions, round %d: Refund %+v, %v; want allowed, 10 remaining", n, round, d, err)
			}
			unchanged("Refund")
		}
		if _, _, err := l.Batch(ctx, txns); err != nil {
			t.Fatal(err)
		}
		d, _, err := l.ResetAll(ctx, txns...)
		if err != nil || d.Remaining != 10 {
			t.Fatalf("%d transactions: ResetAll %+v, %v; want 10 remaining", n, d, err)
		}
		unchanged("ResetAll")
	}
}

// TestCallsShareTransactions: goroutines may pass the same transactions
// to Batch and Refund at once; under the race detector, a call writing
// to them (as Batch did, making a zero Kind CheckAndSpend) fails.
func TestCallsShareTransactions(t *testing.T) {
	l := limiter.New(memory.New(memory.Options{}), clock.New())
	ctx := context.Background()
	txns := callersTxns(3)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				if _, _, err := l.Batch(ctx, txns); err != nil {
					t.Error(err)
					return
				}
				if _, _, err := l.Refund(ctx, txns...); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestBatchAndRefundAllocateOnlyTheirDecisions: the copies Batch, Refund
// and ResetAll work on stay on their stack for batches of up to 8: each
// call allocates only the decisions it returns.
func TestBatchAndRefundAllocateOnlyTheirDecisions(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops items on purpose (make allocs runs this without it)")
	}
	l := limiter.New(memory.New(memory.Options{}), clock.New())
	ctx := context.Background()
	for _, n := range []int{1, 8} {
		txns := callersTxns(n)
		for name, call := range map[string]func() error{
			"Batch":    func() error { _, _, err := l.Batch(ctx, txns); return err },
			"Refund":   func() error { _, _, err := l.Refund(ctx, txns...); return err },
			"ResetAll": func() error { _, _, err := l.ResetAll(ctx, txns...); return err },
		} {
			if err := call(); err != nil {
				t.Fatal(err)
			}
			if allocs := testing.AllocsPerRun(200, func() { _ = call() }); allocs != 1 {
				t.Errorf("%s of %d: %.1f allocations, want 1 (the decisions)", name, n, allocs)
			}
		}
	}
}
