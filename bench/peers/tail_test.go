package peers

import (
	"hash/maphash"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/gcra"
)

// sinkTail keeps BenchmarkFloorTail's results alive.
var sinkTail int64

// BenchmarkFloorTail is BenchmarkFloor's decision (hash, prefetch, clock,
// lock, line) followed by work that waits on the line: a chain of n links,
// each a shift, an exclusive or and an add on the value read from the line
// ("chain=n"), or a GCRA spend's arithmetic on it taken as the bucket's
// TAT ("gcra": gcra.Params.SpendValues, the new TAT written back). It
// measures how much work can wait on one decision's bucket before that
// decision keeps the next one's loads from starting. While the line is
// on its way, the processor can run ahead into the next call (its key,
// hash and prefetch), presumably only as long as it has room for the
// instructions waiting on the line. Each variant runs without a clock (a
// count, so that the line is still written each time) and with Sluice's
// clock, with the rounds' keys (keys) and with fresh copies (fresh),
// serially.
//
//	cd bench/peers && go test -run '^$' -bench FloorTail -cpu 1
func BenchmarkFloorTail(b *testing.B) {
	f := newFloor()
	seed, lines, mask, locks := f.seed, f.lines, f.mask, &f.locks
	p := gcra.Limit{Burst: burst, Count: 1, Period: time.Hour}.Params()
	var n int64
	noClock := func() int64 { n++; return n }
	sluiceClock := clock.New()
	sluiceNow := func() int64 { return clock.UnixNano(sluiceClock) }
	type keyKind struct {
		name string
		keys []string
	}
	for _, clk := range []struct {
		name string
		now  func() int64
	}{{"no-clock", noClock}, {"sluice-clock", sluiceNow}} {
		for _, links := range []int{0, 4, 8, 16, 32, -1} {
			tail := "chain=" + strconv.Itoa(links)
			if links < 0 {
				tail = "gcra"
			}
			for _, k := range []keyKind{{"same-keys", keys}, {"fresh-keys", fresh}} {
				b.Run(clk.name+"/"+tail+"/"+k.name, func(b *testing.B) {
					keys, now := k.keys, clk.now
					var acc int64
					for i := 0; b.Loop(); i++ {
						h := maphash.String(seed, keys[i&(nKeys-1)])
						l := &lines[(h>>8)&mask]
						prefetch(uintptr(unsafe.Pointer(l)))
						t := now()
						mu := &locks[h&255]
						mu.Lock()
						v := l[0]
						if links < 0 {
							ok, rem, _, _, next := p.SpendValues(t, v, 1)
							if ok {
								l[0] = next
							}
							v = rem
						} else {
							for j := range links {
								v += int64(j) ^ v>>3
							}
							if v < t {
								l[0] = t
							}
						}
						mu.Unlock()
						acc += v
					}
					sinkTail = acc
				})
			}
		}
	}
}
