package memory

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/internal/keybuf"
)

// fixedClock tells one time: a clock read that costs a call and waits
// for nothing.
type fixedClock struct{ t time.Time }

func (f fixedClock) Now() time.Time { return f.t }

// sinkLookup keeps BenchmarkLookupParts' results alive.
var sinkLookup int64

// BenchmarkLookupParts takes a GCRA decision of the memory store apart,
// over 1,048,576 buckets whose keys are bench/peers' ("3:" and a number,
// shuffled), asked for in that order: with the very strings the buckets
// were made with ("same-keys", whose bytes are cold) and with copies laid
// out in calling order ("fresh-keys"). Each part is a decision cut short
// or changed, in the store's own terms, so that what each step adds shows:
//
//   - home-hash: hash, prefetch, lock, the home slot's hash compared,
//     unlock;
//   - probe-hashes: the slots probed from the home one, hashes only;
//   - findSlot, findShort: the real lookups (findShort compares the key
//     as two words);
//   - findSlot+gcra: the lookup, then the GCRA spend written back;
//     findSlot+gcra+next-line asks for the slot after the home one too
//     (a key not in its home slot is most often in the next);
//   - home+gcra: the home slot taken without a key compared, then the
//     spend (wrong for a quarter of the keys, on purpose: a bound);
//   - two-slots+gcra: the home slot and the next compared in straight-line
//     code, then the spend;
//   - SpendGCRA itself, with a clock that returns a fixed time, and with
//     clock.Real.
//
// The parts run with no clock (the time a count) or, with "+clock",
// reading Sluice's clock after the prefetch as SpendGCRA does. They are
// no limiter; BENCHMARKS.md ("Work that waits on the bucket") reads them.
//
//	go test -run '^$' -bench LookupParts -cpu 1 ./store/memory
func BenchmarkLookupParts(b *testing.B) {
	const n = 1 << 20
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "3:" + strconv.Itoa(i)
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	s := New(Options{MaxBytes: 1 << 30})
	defer s.Close()
	p := gcra.Limit{Burst: 100_000, Count: 1, Period: time.Hour}.Params()
	real := clock.New()
	for _, k := range keys {
		s.SpendGCRA(real, k, p, 1, false)
	}
	away := 0
	for _, k := range keys {
		h, i := s.hash(k)
		if slot, ok := s.shards[i].tab.findSlot(h, k); !ok {
			b.Fatalf("no bucket for %q", k)
		} else if slot != s.shards[i].tab.home(h) {
			away++
		}
	}
	b.Logf("%d of %d keys not in their home slot", away, n)
	var sb strings.Builder
	for _, k := range keys {
		sb.WriteString(k)
	}
	all, off := sb.String(), 0
	fresh := make([]string, n)
	for i, k := range keys {
		fresh[i] = all[off : off+len(k)]
		off += len(k)
	}
	fixed := fixedClock{time.Now()}
	var fixedC clock.Clock = fixed
	base := fixed.t.UnixNano()

	// spend is the GCRA spend on the slot a lookup found (ok) at now.
	spend := func(t *table, slot int, ok bool, now int64) int64 {
		slot, tat := t.gcraTAT(slot, ok, now)
		granted, rem, _, _, next := p.SpendValues(now, tat, 1)
		if granted && slot >= 0 {
			t.setTAT(slot, next)
		}
		return rem
	}
	parts := []struct {
		name string
		f    func(sh *shard, h uint64, k string, now int64) int64
	}{
		{"home-hash", func(sh *shard, h uint64, k string, now int64) int64 {
			if sh.tab.slots[sh.tab.home(h)].hash == h {
				return now
			}
			return 0
		}},
		{"probe-hashes", func(sh *shard, h uint64, k string, now int64) int64 {
			m, j := sh.tab.mask(), sh.tab.home(h)
			for e := &sh.tab.slots[j]; e.hash != h && e.hash != 0; e = &sh.tab.slots[j] {
				j = (j + 1) & m
			}
			return int64(j) + now
		}},
		{"findSlot", func(sh *shard, h uint64, k string, now int64) int64 {
			slot, _ := sh.tab.findSlot(h, k)
			return int64(slot) + now
		}},
		{"findShort", func(sh *shard, h uint64, k string, now int64) int64 {
			lo, hi := keybuf.Load(k)
			slot, _ := sh.tab.findShort(h, lo, hi, len(k))
			return int64(slot) + now
		}},
		{"findSlot+gcra", func(sh *shard, h uint64, k string, now int64) int64 {
			slot, ok := sh.tab.findSlot(h, k)
			return spend(&sh.tab, slot, ok, now)
		}},
		{"findSlot+gcra+next-line", func(sh *shard, h uint64, k string, now int64) int64 {
			slot, ok := sh.tab.findSlot(h, k)
			return spend(&sh.tab, slot, ok, now)
		}},
		{"home+gcra", func(sh *shard, h uint64, k string, now int64) int64 {
			j := sh.tab.home(h)
			return spend(&sh.tab, j, sh.tab.slots[j].hash != 0, now)
		}},
		{"two-slots+gcra", func(sh *shard, h uint64, k string, now int64) int64 {
			lo, hi := keybuf.Load(k)
			t := &sh.tab
			j0 := t.home(h)
			j1 := (j0 + 1) & t.mask()
			e0, e1 := &t.slots[j0], &t.slots[j1]
			ok0 := e0.hash == h && e0.keyLen() == len(k) && keybuf.Equal((*[keybuf.Max]byte)(e0.key[:]), lo, hi, len(k))
			ok1 := e1.hash == h && e1.keyLen() == len(k) && keybuf.Equal((*[keybuf.Max]byte)(e1.key[:]), lo, hi, len(k))
			slot, ok := j1, ok1
			switch {
			case ok0:
				slot, ok = j0, true
			case !ok1:
				slot, ok = t.findShort(h, lo, hi, len(k))
			}
			return spend(t, slot, ok, now)
		}},
	}
	for _, ks := range []struct {
		name string
		keys []string
	}{{"same-keys", keys}, {"fresh-keys", fresh}} {
		keys := ks.keys
		for _, withClock := range []bool{false, true} {
			for _, part := range parts {
				name := part.name
				if withClock {
					name += "+clock"
				}
				// The slot after the home one asked for too.
				f, next := part.f, strings.HasSuffix(part.name, "+next-line")
				b.Run(name+"/"+ks.name, func(b *testing.B) {
					var acc int64
					for i := 0; b.Loop(); i++ {
						k := keys[i&(n-1)]
						h, si := s.hash(k)
						sh := &s.shards[si]
						sh.prefetchSlot(h)
						if next {
							prefetch(sh.slotsAt.Load() + uintptr(h>>sh.slotsShift.Load()+1)*unsafe.Sizeof(slot{}))
						}
						now := base + int64(i)
						if withClock {
							now = clock.UnixNano(real)
						}
						sh.mu.Lock()
						acc += f(sh, h, k, now)
						sh.mu.Unlock()
					}
					sinkLookup = acc
				})
			}
		}
		for _, c := range []struct {
			name string
			clk  clock.Clock
		}{{"SpendGCRA-fixed-clock", fixedC}, {"SpendGCRA", real}} {
			clk := c.clk
			b.Run(c.name+"/"+ks.name, func(b *testing.B) {
				var acc int64
				for i := 0; b.Loop(); i++ {
					_, rem, _, _ := s.SpendGCRA(clk, keys[i&(n-1)], p, 1, false)
					acc += rem
				}
				sinkLookup = acc
			})
		}
	}
}
