//go:build linux && !race

package memory

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/gcra"
)

// TestArenaBlocks hands out and frees blocks of every class: each block
// is aligned to its size, apart from the others, zeroed when handed out
// (again after a free), and a chunk is unmapped once all its blocks are
// free.
func TestArenaBlocks(t *testing.T) {
	for size := minBlock; size < hugePage; size *= 2 {
		t.Run(strconv.Itoa(size>>10)+"KiB", func(t *testing.T) {
			a := newArena()
			defer a.release()
			per := hugePage / size
			var blocks []unsafe.Pointer
			for range per + 1 { // a chunk's worth, and one block of a second chunk
				p := a.alloc(size)
				if p == nil {
					t.Fatal("alloc refused")
				}
				if uintptr(p)%uintptr(size) != 0 {
					t.Fatalf("block at %#x not aligned to its size %d", p, size)
				}
				b := unsafe.Slice((*byte)(p), size)
				for i, c := range b {
					if c != 0 {
						t.Fatalf("new block's byte %d is %d, not 0", i, c)
					}
				}
				for i := range b {
					b[i] = 0xa5
				}
				blocks = append(blocks, p)
			}
			for i, p := range blocks {
				for j, q := range blocks[:i] {
					if p == q {
						t.Fatalf("blocks %d and %d are both at %#x", j, i, p)
					}
				}
			}
			if got := a.mapped(); got != 2*hugePage {
				t.Fatalf("mapped %d bytes for %d blocks of %d, want two chunks, %d", got, per+1, size, 2*hugePage)
			}
			if got := a.used(); got != (per+1)*size {
				t.Fatalf("used %d bytes for %d blocks of %d, want %d", got, per+1, size, (per+1)*size)
			}
			// A block freed in a chunk still in use is zeroed when handed
			// out again.
			a.free(blocks[0], size)
			p := a.alloc(size)
			if p != blocks[0] {
				t.Fatalf("freed block %#x not handed out again: got %#x", blocks[0], p)
			}
			if c := *(*byte)(unsafe.Add(p, size-1)); c != 0 {
				t.Fatalf("block handed out again reads %#x, not 0", c)
			}
			// Freeing every block of the first chunk unmaps it.
			for _, p := range blocks[:per] {
				a.free(p, size)
			}
			if got := a.mapped(); got != hugePage {
				t.Fatalf("mapped %d bytes after the first chunk's blocks were freed, want %d", got, hugePage)
			}
			a.free(blocks[per], size)
			if got, used := a.mapped(), a.used(); got != 0 || used != 0 {
				t.Fatalf("mapped %d bytes, used %d, after every block was freed, want 0", got, used)
			}
		})
	}
}

// TestArenaLargeAndSmall maps a table of hugePage bytes or more on its
// own, aligned to hugePage, and leaves a smaller table than minBlock, and
// any memory it did not hand out, to Go's heap.
func TestArenaLargeAndSmall(t *testing.T) {
	a := newArena()
	defer a.release()
	p := a.alloc(2 * hugePage)
	if p == nil || uintptr(p)%hugePage != 0 {
		t.Fatalf("table of %d bytes at %#x, want a mapping aligned to %d", 2*hugePage, p, hugePage)
	}
	*(*byte)(unsafe.Add(p, 2*hugePage-1)) = 1 // its last byte is there
	if got := a.mapped(); got != 2*hugePage {
		t.Fatalf("mapped %d bytes, want %d", got, 2*hugePage)
	}
	if q := a.alloc(minBlock / 2); q != nil {
		t.Fatalf("table of %d bytes handed out at %#x, want nil (Go's heap)", minBlock/2, q)
	}
	heap := make([]slot, minBlock/64)
	heap[0].hash = 7
	freeEntries(a, heap)
	if heap[0].hash != 7 || a.mapped() != 2*hugePage {
		t.Fatalf("freeing a slice of Go's heap changed it or the arena: hash %d, mapped %d", heap[0].hash, a.mapped())
	}
	a.free(p, 2*hugePage)
	if got := a.mapped(); got != 0 {
		t.Fatalf("mapped %d bytes after the table was freed, want 0", got)
	}
}

// TestArenaAsksForHugePages finds the arena's mappings in
// /proc/self/smaps flagged for huge pages (MADV_HUGEPAGE's "hg"), which
// the kernel keeps whether or not it has a huge page free to give.
func TestArenaAsksForHugePages(t *testing.T) {
	if _, err := os.Stat("/sys/kernel/mm/transparent_hugepage"); err != nil {
		t.Skip("this kernel has no transparent huge pages:", err)
	}
	a := newArena()
	defer a.release()
	for _, size := range []int{minBlock, hugePage} {
		p := a.alloc(size)
		if p == nil {
			t.Fatal("alloc refused")
		}
		flags, err := vmFlags(uintptr(p))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(" "+flags+" ", " hg ") {
			t.Errorf("table of %d bytes at %#x: VmFlags %q, no hg", size, p, flags)
		}
	}
}

// vmFlags returns the VmFlags line of the mapping holding addr, from
// /proc/self/smaps.
func vmFlags(addr uintptr) (string, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return "", err
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x", &lo, &hi); n == 2 && strings.Contains(strings.Fields(line)[0], "-") {
			in = lo <= addr && addr < hi
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return strings.TrimSpace(strings.TrimPrefix(line, "VmFlags:")), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("no mapping holds %#x", addr)
}

// TestStoreTablesInArena fills one shard past a huge page of slots and
// of wide buckets, with keys that fit a slot and keys that make wide
// buckets, one of each in turn, and checks that the decisions are the
// same as over Go's heap, that the tables are the arena's, and that
// Close, and a store no longer reachable, give the memory back.
func TestStoreTablesInArena(t *testing.T) {
	const n = 40_000 // 20,000 of each: 32,768 slots of 64 bytes, 2 MiB, and as many wide buckets of 128, 4 MiB
	reg := prometheus.NewRegistry()
	s := New(Options{Shards: 1, MaxEntries: n, MaxBytes: 1 << 30, Registerer: reg})
	lim := gcra.Limit{Burst: 5, Count: 1, Period: time.Hour}
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	key := func(i int) string {
		if i%2 == 0 {
			return fmt.Sprintf("tenant-%08d", i)
		}
		return fmt.Sprintf("tenant-%08d/user-0123456789abcdef0123456789abcdef/%05d", i, i%99999)
	}
	if isWide(len(key(0))) || !isWide(len(key(1))) {
		t.Fatalf("keys of %d and %d bytes: want the first in a slot, the second wide", len(key(0)), len(key(1)))
	}
	for round := range 2 {
		for i := range n {
			// Each spend of a key takes one of its five.
			ok, left, _, _ := s.SpendGCRA(clk, key(i), lim.Params(), 1, false)
			if want := lim.Burst - 1 - int64(round); !ok || left != want {
				t.Fatalf("round %d, key %d: allowed %v with %d remaining, want allowed with %d", round, i, ok, left, want)
			}
		}
	}
	sh := &s.shards[0]
	sh.mu.Lock()
	slots, wides := len(sh.tab.slots)*64, len(sh.tab.wide.e)*128
	inArena := s.mem.own[unsafe.Pointer(unsafe.SliceData(sh.tab.slots))] == slots
	widesInArena := s.mem.own[unsafe.Pointer(unsafe.SliceData(sh.tab.wide.e))] == wides
	sh.mu.Unlock()
	if slots < hugePage || !inArena {
		t.Fatalf("slots: %d bytes, in the arena: %v; want at least %d, in it", slots, inArena, hugePage)
	}
	if wides < hugePage || !widesInArena {
		t.Fatalf("wide buckets: %d bytes, in the arena: %v; want at least %d, in it", wides, widesInArena, hugePage)
	}
	if got, want := s.Mapped(), int64(slots+wides); got != want {
		t.Fatalf("Mapped %d, want the tables' %d bytes", got, want)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	gauge := -1.0
	for _, mf := range mfs {
		if mf.GetName() == "sluice_memory_mapped_bytes" {
			gauge = mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	if gauge != float64(slots+wides) {
		t.Fatalf("sluice_memory_mapped_bytes %v, want the tables' %d bytes", gauge, slots+wides)
	}
	// Once every bucket is full again, sweeps remove them and shrink the
	// tables, back to Go's heap, a block of the arena at each halving.
	clk.Advance(2 * time.Hour)
	now := clock.UnixNano(clk)
	for sweeps := 0; s.Mapped() > 0; sweeps++ {
		if sweeps > 2*n {
			t.Fatalf("%d sweeps, still %d buckets, %d bytes mapped", sweeps, s.Len(), s.Mapped())
		}
		sh.mu.Lock()
		sh.sweep(now, sweepBudget)
		sh.publishMoved()
		sh.mu.Unlock()
	}
	// And grow again through the arena, every bucket fresh.
	for i := range n {
		if ok, left, _, _ := s.SpendGCRA(clk, key(i), lim.Params(), 1, false); !ok || left != lim.Burst-1 {
			t.Fatalf("after the sweeps, key %d: allowed %v with %d remaining, want allowed with %d", i, ok, left, lim.Burst-1)
		}
	}
	if s.Mapped() == 0 {
		t.Fatal("grown again, no table in the arena")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got, mapped := s.Mapped(), s.mem.mapped(); got != 0 || mapped != 0 {
		t.Fatalf("Mapped %d, %d bytes still mapped, after Close; want 0", got, mapped)
	}

	// A store dropped without Close gives its tables back once collected.
	mem := func() *arena {
		s := New(Options{Shards: 1, MaxEntries: n, MaxBytes: 1 << 30})
		for i := range n {
			s.SpendGCRA(clk, key(i), lim.Params(), 1, false)
		}
		if s.Mapped() == 0 {
			t.Fatal("no table in the arena")
		}
		return s.mem
	}()
	deadline := time.Now().Add(10 * time.Second)
	for mem.mapped() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a store no longer reachable still holds %d bytes mapped after 10 s", mem.mapped())
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDroppedStoresAreCollected makes stores with a table of their own,
// 4 MiB of slots, and drops them without Close, allocating next to
// nothing on Go's heap: the collection mapTable starts every gcEvery
// bytes mapped finds them, and their tables are unmapped, where Go's
// heap alone would start no collection for minutes.
func TestDroppedStoresAreCollected(t *testing.T) {
	defer func(n int64) { gcEvery = n }(gcEvery)
	gcEvery = 16 << 20
	runtime.GC()
	lim := gcra.Limit{Burst: 5, Count: 1, Period: time.Hour}.Params()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	key := []byte("key-00000000")
	const stores, n = 40, 30_000 // 32,768 slots at 3/4 full: 65,536, 4 MiB
	fill := func() {
		s := New(Options{Shards: 1, MaxEntries: n})
		for i := range n {
			for j, k := len(key)-1, i; j >= 4; j, k = j-1, k/10 {
				key[j] = byte('0' + k%10)
			}
			s.SpendGCRA(clk, unsafe.String(&key[0], len(key)), lim, 1, false)
		}
		if got := s.Mapped(); got != 4<<20 {
			t.Fatalf("store's tables: %d bytes mapped, want 4 MiB", got)
		}
	}
	for range stores {
		fill()
	}
	// The last collection started may still be running, and the
	// cleanups it queued not yet run: wait for them, without starting
	// one here.
	bound := gcEvery + 2*(4<<20)
	deadline := time.Now().Add(5 * time.Second)
	for arenasMapped.Load() > bound {
		if time.Now().After(deadline) {
			t.Fatalf("%d stores of 4 MiB dropped: %d bytes still mapped after 5 s, want at most %d", stores, arenasMapped.Load(), bound)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
