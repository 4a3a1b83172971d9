package peers

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/limits"
)

// inOrder returns the keys of BenchmarkPeers made one by one in the
// order of their numbers ("3:0", "3:1", ...), each its own string, as a
// benchmark that fills a slice with fmt.Sprintf or strconv does. Built
// on first use, so that the other benchmarks' heap is as it was.
var inOrder = sync.OnceValue(func() []string {
	k := make([]string, nKeys)
	for i := range k {
		k[i] = "3:" + strconv.Itoa(i)
	}
	return k
})

// BenchmarkCreationOrder times every limiter serially with the keys asked
// for in the order their buckets were made and their strings allocated:
// the simplest benchmark one can write, and the one BenchmarkPeers'
// variants leave out on purpose (see keys). A limiter that allocates a
// bucket per key then reads its buckets, and the keys it keeps, in the
// order they lie in memory, which the processor fetches ahead; a hash
// table's slots, as Sluice keeps its buckets, lie in no such order.
func BenchmarkCreationOrder(b *testing.B) {
	calls := inOrder()
	for _, p := range peers {
		b.Run(p.name, func(b *testing.B) {
			take := p.new(b)
			warm(b, take, calls, nil)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if !take(calls[i&(nKeys-1)]) {
					b.Fatal("refused")
				}
			}
		})
	}
}

// spender and spenderFor are the Limiter's methods as an interface, so
// that a call through them cannot be inlined.
type (
	spender interface {
		Spend(context.Context, limiter.Transaction) (limiter.Decision, error)
	}
	spenderFor interface {
		SpendFor(context.Context, *limits.Set, string, string, int64) (limiter.Decision, error)
	}
)

// asInterfaces returns l as a spender and a spenderFor, from a call the
// compiler does not inline: it cannot tell the type behind them, and so
// neither turn a call through them into a direct one nor inline it.
//
//go:noinline
func asInterfaces(l *limiter.Limiter) (spender, spenderFor) { return l, l }

// BenchmarkNotInlined tells what a caller pays when its call to
// limiter.Spend is not inlined: called through an interface, as here,
// or from a closure that the compiler copied while inlining the function
// that made it, whose calls it does not inline again. The caller then
// builds the Transaction in its frame and copies it to the call's
// arguments in 16-byte moves, from the 8-byte stores that built it: a
// copy the processor cannot forward from its store buffer, so that the
// call's key waits for the previous decision to end. SpendFor, whose
// arguments all travel in registers, is timed the same two ways beside
// it. Each pair is interleaved in one process (see interleave), on one
// store, over a million buckets, with the same keys and with fresh ones.
//
//	cd bench/peers && go test -run '^$' -bench NotInlined -benchtime 8000000x -cpu 1
func BenchmarkNotInlined(b *testing.B) {
	s := sluiceStore(b)
	l := limiter.New(s, clock.New())
	lim := gcra.Limit{Burst: burst, Count: 1, Period: time.Hour}
	set := readmeSet(b)
	ctx := context.Background()
	sp, spf := asInterfaces(l)
	spend := []way{
		{"direct", func(k string) bool {
			d, err := l.Spend(ctx, limiter.Transaction{Key: k, Limit: lim, Cost: 1})
			return err == nil && d.Allowed
		}},
		{"interface", func(k string) bool {
			d, err := sp.Spend(ctx, limiter.Transaction{Key: k, Limit: lim, Cost: 1})
			return err == nil && d.Allowed
		}},
	}
	spendFor := []way{
		{"direct", func(k string) bool {
			d, err := l.SpendFor(ctx, set, limits.NewOrdersPerAccount, k[2:], 1)
			return err == nil && d.Allowed
		}},
		{"interface", func(k string) bool {
			d, err := spf.SpendFor(ctx, set, limits.NewOrdersPerAccount, k[2:], 1)
			return err == nil && d.Allowed
		}},
	}
	warm(b, spend[0].one, keys, nil)
	b.Run("Spend/same-keys", func(b *testing.B) { interleave(b, spend, keys, nil) })
	b.Run("Spend/fresh-keys", func(b *testing.B) { interleave(b, spend, fresh, nil) })
	b.Run("SpendFor/same-keys", func(b *testing.B) { interleave(b, spendFor, keys, nil) })
	b.Run("SpendFor/fresh-keys", func(b *testing.B) { interleave(b, spendFor, fresh, nil) })
}
