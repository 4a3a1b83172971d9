// Package peers compares Sluice's Go library — limiter.Spend over the
// memory store, and the README's path, limiter.SpendFor — with the
// in-process limiters Go users pick today, on the same 1,048,576 keys in
// one run:
// sethvargo/go-limiter's memorystore, golang.org/x/time/rate with one
// limiter per key in a sync.Map, and throttled/v2's GCRA over its
// memstore. It is its own module so that Sluice never depends on them.
//
//	cd bench/peers && go test -run '^$' -bench . -benchmem
//
// Every limiter is given a limit no call reaches (a burst of 100,000, refilled
// at one an hour, so that no bucket expires during a run), and every
// bucket is made before timing: each call is one allowed decision on a
// live bucket, and what is measured is the cost of deciding. Each is timed
// serial and parallel, with the keys its buckets were made with and with
// fresh ones (see fresh), the buckets made in calling order and, with
// fresh keys, in another (see apart), and with longer keys (see long and
// longer).
// BenchmarkFloor is the least any of them must do, and BenchmarkFloorTail
// how much work may wait on a decision's bucket before one decision keeps
// the next from starting.
// BenchmarkCreationOrder times them with the keys asked for in the order
// their buckets were made, and BenchmarkNotInlined what limiter.Spend
// costs a caller that calls it through an interface.
// TestMemoryPerBucket reports the heap each keeps per live bucket, with
// short keys and with 57-byte ones, and how much of Sluice's tables the
// kernel holds in huge pages.
package peers

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	"golang.org/x/time/rate"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/store/memory"
)

// nKeys is how many buckets every benchmark spreads over.
const nKeys = 1 << 20

const burst = 100_000

// keys are the bucket keys in the order calls ask for them: a fixed
// shuffle, so that calls land on buckets all over each limiter's memory
// as a service's traffic does, rather than in the order they were made
// (which a limiter allocating a bucket per key would serve from memory
// laid out in that very order).
var keys = func() []string {
	k := make([]string, nKeys)
	for i := range k {
		k[i] = "3:" + strconv.Itoa(i)
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(k), func(i, j int) { k[i], k[j] = k[j], k[i] })
	return k
}()

// fresh are the keys again, in calling order, copied one after the other
// into one string: the key of each call is then a string other than the
// one its bucket was made with, its bytes at hand, as in a service that
// builds each request's key anew from the request. (With keys, the string
// a bucket was made with comes back, cold: a store keeping that string
// compares it by its address, and every limiter waits on the key's bytes.)
var fresh = copied(keys)

// copied returns keys copied one after the other into one string.
func copied(keys []string) []string {
	var sb strings.Builder
	for _, k := range keys {
		sb.WriteString(k)
	}
	all := sb.String()
	f := make([]string, len(keys))
	off := 0
	for i, k := range keys {
		f[i] = all[off : off+len(k)]
		off += len(k)
	}
	return f
}

// apart is the order in which the "made apart" variants make their
// buckets: another shuffle than the calls'. Made in calling order, a
// limiter that allocates something per bucket finds those allocations
// laid out in the order the calls then ask for them, which a service,
// whose clients come back in no such order, does not.
var apart = rand.New(rand.NewPCG(3, 4)).Perm(nKeys)

// long are keys of 36 bytes, random UUIDs' text, in calling order, each
// its own string: as long as many services' keys (longer than the 24
// bytes Sluice's memory store kept in a bucket's slot until d89bebe; a
// GCRA bucket's slot now keeps up to 40). Their buckets are made apart,
// with these strings, and the calls pass copies (longFresh), as with
// fresh keys.
//
// Each string is allocated in the order its bucket is made (apart), as a
// service allocates the key a limiter keeps when the key's first request
// comes, not in calling order. Until session 27 they were allocated in
// calling order: a limiter keeping the caller's string (a map's key) then
// read the kept keys' bytes in the order they lay in memory, which the
// made-apart variants exist to rule out; sethvargo/go-limiter took less
// time with these keys than with the 9-byte ones.
var long = func() []string {
	r := rand.New(rand.NewPCG(5, 6))
	words := make([][4]uint32, nKeys)
	for i := range words {
		words[i] = [4]uint32{r.Uint32(), r.Uint32() & 0xffff, r.Uint32() & 0xfff, r.Uint32() & 0xfff}
	}
	k := make([]string, nKeys)
	for _, i := range apart {
		w := &words[i]
		// The last field is i, so that no two keys are the same.
		k[i] = fmt.Sprintf("%08x-%04x-4%03x-a%03x-%012x", w[0], w[1], w[2], w[3], i)
	}
	return k
}()

var longFresh = copied(long)

// longer are keys of 57 bytes, a tenant and a user's UUID
// ("tenant-1a2b3c4d/user-" and a key of long), made and called as long
// are, each string allocated in the order its bucket is made: longer than
// any slot of Sluice's memory store keeps, so that each decision also
// reads the key's rest in a second cache line (in a line of the shard's
// since fdbd455, asked for with the slot; before, in the shard's buffer of
// long keys, read after it).
var longer = func() []string {
	r := rand.New(rand.NewPCG(7, 8))
	tenants := make([]uint32, nKeys)
	for i := range tenants {
		tenants[i] = r.Uint32()
	}
	k := make([]string, nKeys)
	for _, i := range apart {
		k[i] = fmt.Sprintf("tenant-%08x/user-%s", tenants[i], long[i])
	}
	return k
}()

var longerFresh = copied(longer)

// readmePath names the README's path among the peers, and spendPath
// limiter.Spend over the memory store.
const (
	readmePath = "sluice README path (SpendFor)"
	spendPath  = "sluice limiter.Spend"
)

// peer is one limiter under test: take reports whether key may go ahead.
type peer struct {
	name string
	new  func(tb testing.TB) (take func(key string) bool)
}

var peers = []peer{
	{spendPath, func(tb testing.TB) func(string) bool {
		// The README's library path.
		l := limiter.New(sluiceStore(tb), clock.New())
		lim := gcra.Limit{Burst: burst, Count: 1, Period: time.Hour}
		ctx := context.Background()
		return func(key string) bool {
			d, err := l.Spend(ctx, limiter.Transaction{Key: key, Limit: lim, Cost: 1})
			return err == nil && d.Allowed
		}
	}},
	{readmePath, func(tb testing.TB) func(string) bool {
		// The README's whole path: the limit and bucket key of an account
		// id from a Set, and the spend, in limiter.SpendFor. The keys here
		// are account ids.
		l := limiter.New(sluiceStore(tb), clock.New())
		set := readmeSet(tb)
		ctx := context.Background()
		return func(key string) bool {
			id := key[2:] // "3:12345" -> the account id 12345
			d, err := l.SpendFor(ctx, set, limits.NewOrdersPerAccount, id, 1)
			return err == nil && d.Allowed
		}
	}},
	{"sethvargo/go-limiter memorystore", func(tb testing.TB) func(string) bool {
		// Its buckets are fixed windows refilled at each tick of Interval:
		// one long tick keeps the burst for the whole run.
		s, err := memorystore.New(&memorystore.Config{Tokens: burst, Interval: 1000 * time.Hour})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = s.Close(context.Background()) })
		ctx := context.Background()
		return func(key string) bool {
			_, _, _, ok, err := s.Take(ctx, key)
			return err == nil && ok
		}
	}},
	{"x/time/rate per key in a sync.Map", func(tb testing.TB) func(string) bool {
		var m sync.Map
		return func(key string) bool {
			v, ok := m.Load(key)
			if !ok {
				v, _ = m.LoadOrStore(key, rate.NewLimiter(rate.Every(time.Hour), burst))
			}
			return v.(*rate.Limiter).Allow()
		}
	}},
	{"throttled/v2 GCRA memstore", func(tb testing.TB) func(string) bool {
		st, err := memstore.NewCtx(2 * nKeys)
		if err != nil {
			tb.Fatal(err)
		}
		rl, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerHour(1), MaxBurst: burst})
		if err != nil {
			tb.Fatal(err)
		}
		ctx := context.Background()
		return func(key string) bool {
			limited, _, err := rl.RateLimitCtx(ctx, key, 1)
			return err == nil && !limited
		}
	}},
}

// readmeSet is the README path's limits: NewOrdersPerAccount's default,
// the benchmarks' limit, and no overrides.
func readmeSet(tb testing.TB) *limits.Set {
	defaults, err := limits.ParseDefaults("defaults.yaml", []byte(fmt.Sprintf("NewOrdersPerAccount: {burst: %d, count: 1, period: 1h}\n", burst)))
	if err != nil {
		tb.Fatal(err)
	}
	set, err := limits.New(defaults, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return set
}

// sluiceStore returns a memory store with room for every bucket a run
// makes, which fails tb, at its end, if it refused any. (The default
// MaxBytes, 256 MiB, holds fewer than nKeys buckets of keys of 41 to 80
// bytes, and a refused bucket is answered as a fresh one: the run would
// time that, not decisions on live buckets.)
func sluiceStore(tb testing.TB) *memory.Store {
	s := memory.New(memory.Options{MaxBytes: 1 << 30})
	if sluiceStores != nil {
		*sluiceStores = append(*sluiceStores, s)
	}
	tb.Cleanup(func() {
		if n := s.Refused(); n > 0 {
			tb.Errorf("the memory store refused %d buckets: what was timed was not decisions on live buckets", n)
		}
		s.Close()
	})
	return s
}

// sluiceStores, while TestMemoryPerBucket runs, gathers the stores
// sluiceStore makes, whose tables held outside Go's heap
// (memory.Store.Mapped) it counts. (Nil otherwise: kept, the benchmarks'
// stores would never be collected.)
var sluiceStores *[]*memory.Store

// warm makes the bucket of every key live before timing, as in a busy
// service: in calling order, or in the order given.
func warm(tb testing.TB, take func(string) bool, keys []string, order []int) {
	for i := range keys {
		k := keys[i]
		if order != nil {
			k = keys[order[i]]
		}
		if !take(k) {
			tb.Fatalf("the first call for %s was refused", k)
		}
	}
}

// variant is a way of calling the limiters: the keys the buckets are
// made with, in calling order, the order they are made in (nil: calling
// order), the keys the calls pass, and whether they are keys, not
// account ids (the README path takes only account ids).
type variant struct {
	suffix string
	made   []string
	order  []int
	calls  []string
	notIDs bool
}

var variants = []variant{
	{"", keys, nil, keys, false},
	{"-fresh-keys", keys, nil, fresh, false},
	{"-fresh-keys-made-apart", keys, apart, fresh, false},
	{"-long-keys", long, apart, longFresh, true},
	{"-longer-keys", longer, apart, longerFresh, true},
}

func BenchmarkPeers(b *testing.B) {
	for _, p := range peers {
		for _, v := range variants {
			if v.notIDs && p.name == readmePath {
				continue
			}
			b.Run(p.name+"/serial"+v.suffix, func(b *testing.B) { serial(b, p, v) })
			b.Run(p.name+"/parallel"+v.suffix, func(b *testing.B) { parallel(b, p, v) })
		}
	}
}

// serial times one caller's decisions, keys asked in turn.
func serial(b *testing.B, p peer, v variant) {
	keys := v.calls
	take := p.new(b)
	warm(b, take, v.made, v.order)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if !take(keys[i&(nKeys-1)]) {
			b.Fatal("refused")
		}
	}
}

// parallel times GOMAXPROCS callers' decisions, each asking keys in turn
// from its own starting point.
func parallel(b *testing.B, p peer, v variant) {
	keys := v.calls
	take := p.new(b)
	warm(b, take, v.made, v.order)
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1)) * 7919
		for pb.Next() {
			if !take(keys[i&(nKeys-1)]) {
				b.Error("refused")
				return
			}
			i++
		}
	})
}

// TestMemoryPerBucket reports the heap each limiter holds per live bucket
// (keys excluded: they exist before and after, and a limiter that keeps
// a copy counts it), with the keys of BenchmarkPeers and with its 57-byte
// ones (longer), and checks that every peer answers. Sluice's tables held
// outside Go's heap, mapped with huge pages on Linux, count as heap.
func TestMemoryPerBucket(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a million buckets per peer")
	}
	var stores []*memory.Store
	sluiceStores = &stores
	defer func() { sluiceStores = nil }()
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		n := m.HeapAlloc
		for _, s := range stores {
			n += uint64(s.Mapped())
		}
		return n
	}
	for _, v := range []variant{variants[0], variants[len(variants)-1]} {
		kind := ""
		if v.suffix != "" {
			kind = fmt.Sprintf(", %d-byte keys", len(v.made[0]))
		}
		for _, p := range peers {
			if v.notIDs && p.name == readmePath {
				continue
			}
			before := heap()
			made := len(stores)
			asked0, huge0, ok := hugePages()
			take := p.new(t)
			warm(t, take, v.made, nil)
			after := heap()
			per := float64(int64(after)-int64(before)) / nKeys
			t.Logf("%-34s %6.1f bytes per live bucket%s", p.name, per, kind)
			fmt.Printf("memory per live bucket%s: %s: %.1f B\n", kind, p.name, per)
			if asked1, huge1, ok1 := hugePages(); ok && ok1 && len(stores) > made {
				reportHugePages(t, p.name, kind, stores[made:], asked1-asked0, huge1-huge0)
			}
			runtime.KeepAlive(take)
		}
	}
}

// reportHugePages prints how much of the tables that Sluice's stores
// hold outside Go's heap the kernel keeps in huge pages: of the memory
// mapped since the peer's store was made with huge pages asked for
// (asked), the bytes in huge pages (huge). Whether the kernel grants them
// depends on the machine (its transparent huge page settings, and free
// memory in 2 MiB pieces), so that is reported, not checked; but every
// byte of the tables must lie in memory that asked for them.
func reportHugePages(t *testing.T, name, kind string, stores []*memory.Store, asked, huge uint64) {
	var tables uint64
	for _, s := range stores {
		tables += uint64(s.Mapped())
	}
	if asked < tables {
		t.Errorf("%s%s: %d bytes of tables outside Go's heap, but only %d bytes mapped with huge pages asked for", name, kind, tables, asked)
	}
	const mib = 1 << 20
	fmt.Printf("huge pages%s: %s: %.1f MiB of tables, %.1f MiB mapped asking for huge pages, %.1f MiB in them\n",
		kind, name, float64(tables)/mib, float64(asked)/mib, float64(huge)/mib)
}

// BenchmarkCachedBuckets asks every limiter for 1,024 buckets in turn,
// few enough to stay in the processor's caches: nothing to wait for from
// memory, so what it times is each limiter's own work per decision, the
// clock read included. (1,024 buckets of a burst of 100,000 last for a
// hundred million allowed decisions, more than a run makes.)
func BenchmarkCachedBuckets(b *testing.B) {
	for _, p := range peers {
		b.Run(p.name, func(b *testing.B) {
			take := p.new(b)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if !take(keys[i&1023]) {
					b.Fatal("refused")
				}
			}
		})
	}
}

// floor is the table of lines, and the locks, that BenchmarkFloor and
// BenchmarkFloorTail decide on: two lines for every key, 128 MiB, in
// Go's heap.
type floor struct {
	seed  maphash.Seed
	lines [][8]int64
	mask  uint64
	locks [256]struct {
		sync.Mutex
		_ [56]byte
	}
}

// newFloor returns a floor with its lines zeroed.
func newFloor() *floor {
	f := &floor{seed: maphash.MakeSeed(), lines: make([][8]int64, 2*nKeys)}
	f.mask = uint64(len(f.lines) - 1)
	return f
}

// BenchmarkFloor is no limiter: it does, on the same keys in the same
// order, the least an exact limiter must do for a decision — hash the
// key (reading its bytes), then read and write the one 64-byte line that
// holds its bucket in a 128 MiB table — first alone, then with a lock
// held around the line and the clock read (time.Now, or Sluice's
// clock.Real), as every limiter here does for each decision, and last
// with the line prefetched before the clock read, as Sluice's memory
// store does; then, to tell the clock's cost from the lock's, the same
// with no clock read, and with the processor's counter read without the
// ordering the kernel's clock read has. Its figures are the floor the
// peers' are measured against: with a million buckets each decision is
// two memory accesses, the second needing the first (with fresh keys,
// laid out in calling order, the first is nearly free), and the clock
// read (an ordered TSC read) waits for the loads before it. The table is
// in Go's heap, in 4 KiB pages, as the peers' buckets are; the rows
// ending in -huge-pages take it in 2 MiB pages, as Sluice's memory store
// keeps its larger tables on Linux (store/memory/arena_linux.go), which
// spares each access its TLB miss.
func BenchmarkFloor(b *testing.B) {
	f := newFloor()
	seed, lines, mask, locks := f.seed, f.lines, f.mask, &f.locks
	b.Run("hash+line", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			h := maphash.String(seed, keys[i&(nKeys-1)])
			lines[(h>>8)&mask][0]++
		}
	})
	decide := func(keys []string, now func() int64, early bool, lines [][8]int64) func(*testing.B) {
		return func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				h := maphash.String(seed, keys[i&(nKeys-1)])
				l := &lines[(h>>8)&mask]
				if early {
					prefetch(uintptr(unsafe.Pointer(l)))
				}
				now := now()
				mu := &locks[h&255]
				mu.Lock()
				if l[0] < now {
					l[0] = now
				}
				mu.Unlock()
			}
		}
	}
	timeNow := func() int64 { return time.Now().UnixNano() }
	b.Run("hash+clock+lock+line", decide(keys, timeNow, false, lines))
	b.Run("hash+clock+lock+line-fresh-keys", decide(fresh, timeNow, false, lines))
	// Sluice's clock.Real: one clock read instead of time.Now's two.
	sluiceClock := clock.New()
	sluiceNow := func() int64 { return clock.UnixNano(sluiceClock) }
	b.Run("hash+sluice-clock+lock+line", decide(keys, sluiceNow, false, lines))
	b.Run("hash+sluice-clock+lock+line-fresh-keys", decide(fresh, sluiceNow, false, lines))
	// The line asked for before the clock read, as the memory store does:
	// its load no longer waits for the ordered read to end.
	b.Run("hash+prefetch+sluice-clock+lock+line", decide(keys, sluiceNow, true, lines))
	b.Run("hash+prefetch+sluice-clock+lock+line-fresh-keys", decide(fresh, sluiceNow, true, lines))
	if huge := hugePageLines(b, len(lines)); huge != nil {
		b.Run("hash+prefetch+sluice-clock+lock+line-huge-pages", decide(keys, sluiceNow, true, huge))
		b.Run("hash+prefetch+sluice-clock+lock+line-fresh-keys-huge-pages", decide(fresh, sluiceNow, true, huge))
	}
	// What the ordered clock read costs, against the lock: no clock at
	// all (a count, so that the line is still written each time), and the
	// processor's counter read without ordering (not a clock: its ticks
	// are not nanoseconds).
	var n int64
	noClock := func() int64 { n++; return n }
	b.Run("hash+prefetch+lock+line", decide(keys, noClock, true, lines))
	b.Run("hash+prefetch+lock+line-fresh-keys", decide(fresh, noClock, true, lines))
	if haveTicks {
		b.Run("hash+prefetch+unordered-ticks+lock+line", decide(keys, ticks, true, lines))
		b.Run("hash+prefetch+unordered-ticks+lock+line-fresh-keys", decide(fresh, ticks, true, lines))
	}
}
