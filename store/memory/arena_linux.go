//go:build linux && !race

package memory

import (
	"math/bits"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePage is the size of a transparent huge page on Linux's common
// platforms (amd64, and arm64 with 4 KiB pages): a chunk's size and
// alignment.
const hugePage = 2 << 20

// blockClasses counts the arena's block sizes: minBlock, twice it, and
// so on below hugePage.
const blockClasses = 5

const _ = uint(hugePage - minBlock<<blockClasses) // hugePage is minBlock<<blockClasses

// arena holds a store's larger tables (slots and wide buckets) outside
// Go's heap, in memory mapped on Linux with transparent huge pages asked
// for (madvise MADV_HUGEPAGE). A decision over a store larger than the CPU's
// caches costs one or two memory accesses, each of which with the
// kernel's 4 KiB pages also misses the TLB and walks the page tables;
// with 2 MiB pages the TLB covers gigabytes and the walk is gone (in a
// virtual machine, whose walks are two-dimensional, most of all).
//
// A table of hugePage bytes or more has a mapping of its own, aligned to
// hugePage. A smaller one, of minBlock bytes or more, is a block of a
// chunk: a mapping of hugePage bytes, aligned, holding blocks of one size,
// so that the tables of a store's shards, which grow together, share huge
// pages. A smaller table still is taken from Go's heap: a store's small
// tables together fit the TLB without huge pages.
//
// The memory holds no pointers, and needs no zeroing: a new mapping reads
// as zeros, and a freed block that is not unmapped with its chunk is given
// back to the kernel (MADV_DONTNEED), so that it reads as zeros again and
// the process keeps no memory that no table holds, past the chunks' blocks
// not handed out yet. (That splits the chunk's huge page: its remaining
// tables go on in 4 KiB pages until they are freed too.) If the kernel
// refuses a mapping, the table comes from Go's heap, as does every table
// in a build with the race detector, which does not see memory outside
// Go's heap.
//
// A table is freed when replaced (resize), when its store is closed, and
// with every table of a store no longer reachable (release, through the
// cleanup New registers). No decision reads a table without its shard's
// lock, so none reads a freed one; prefetchSlot's loads without it are
// prefetches, which never fault. The collector, which finds the stores no
// longer reachable, runs as Go's heap grows, and these mappings are not
// in it: a program that makes and drops large stores without closing
// them, allocating little else, would pile up their tables until the
// runtime's collection every two minutes. So every gcEvery bytes newly
// mapped, over all arenas, start a collection (see grown).
type arena struct {
	mu     sync.Mutex
	chunks [blockClasses][]*chunk // by class, log2(size/minBlock)
	held   map[uintptr]*chunk     // the chunks by their base's address
	own    map[unsafe.Pointer]int // the tables with mappings of their own: base to length
	inUse  int                    // bytes handed out and not freed
}

// chunk is a mapping of hugePage bytes cut into blocks of one size.
type chunk struct {
	base  unsafe.Pointer
	class int
	used  uint32 // bit i set: block i is handed out
}

func newArena() *arena {
	return &arena{held: make(map[uintptr]*chunk), own: make(map[unsafe.Pointer]int)}
}

// alloc returns size bytes of zeroed memory, aligned to 64 bytes, or nil
// when the table is to come from Go's heap: for a nil arena, a size below
// minBlock, or a mapping refused. size is a power of two.
func (a *arena) alloc(size int) unsafe.Pointer {
	if a == nil || size < minBlock {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if size >= hugePage {
		p := mapTable(size)
		if p != nil {
			a.own[p] = size
			a.inUse += size
		}
		return p
	}
	class := bits.TrailingZeros(uint(size / minBlock))
	full := uint32(1)<<(hugePage/size) - 1
	var c *chunk
	for _, k := range a.chunks[class] {
		if k.used != full {
			c = k
			break
		}
	}
	if c == nil {
		p := mapTable(hugePage)
		if p == nil {
			return nil
		}
		c = &chunk{base: p, class: class}
		a.chunks[class] = append(a.chunks[class], c)
		a.held[uintptr(p)] = c
	}
	i := bits.TrailingZeros32(^c.used)
	c.used |= 1 << i
	a.inUse += size
	return unsafe.Add(c.base, i*size)
}

// free gives back the size bytes at p, if alloc returned them: memory of
// Go's heap is left to the collector.
func (a *arena) free(p unsafe.Pointer, size int) {
	if a == nil || size < minBlock || p == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if n, ok := a.own[p]; ok {
		delete(a.own, p)
		unmapTable(p, n)
		a.inUse -= n
		return
	}
	c, ok := a.held[uintptr(p)&^(hugePage-1)]
	if !ok {
		return
	}
	a.inUse -= size
	c.used &^= 1 << ((uintptr(p) - uintptr(c.base)) / uintptr(size))
	if c.used != 0 {
		_ = unix.Madvise(unsafe.Slice((*byte)(p), size), unix.MADV_DONTNEED)
		return
	}
	delete(a.held, uintptr(c.base))
	a.chunks[c.class] = slices.DeleteFunc(a.chunks[c.class], func(k *chunk) bool { return k == c })
	unmapTable(c.base, hugePage)
}

// release unmaps every table the arena holds. requires no table of them
// used again.
func (a *arena) release() {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for p, n := range a.own {
		unmapTable(p, n)
	}
	for _, c := range a.held {
		unmapTable(c.base, hugePage)
	}
	a.chunks = [blockClasses][]*chunk{}
	clear(a.held)
	clear(a.own)
	a.inUse = 0
}

// mapped returns the bytes the arena holds mapped: its chunks' and the
// tables' of their own.
func (a *arena) mapped() int {
	if a == nil {
		return 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	n := len(a.held) * hugePage
	for _, m := range a.own {
		n += m
	}
	return n
}

// used returns the bytes of the tables the arena holds (Store.Mapped):
// those of its chunks' blocks handed out, and the tables' mappings of
// their own. The process may hold up to a chunk more per block size: the
// blocks of the latest chunk not handed out yet, which its first use
// brings in whole as a huge page. (A block freed in a chunk still in use
// is given back to the kernel.)
func (a *arena) used() int {
	if a == nil {
		return 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.inUse
}

// gcEvery is how many bytes newly mapped by the arenas start a garbage
// collection (see arena). A store that grows to gigabytes starts one per
// 256 MiB, while it grows: little beside the work of moving as many
// bytes of buckets.
var gcEvery int64 = 256 << 20

var (
	// arenasMapped counts the bytes the arenas hold mapped, all of them.
	arenasMapped atomic.Int64
	// sinceGC counts the bytes newly mapped since the last collection
	// grown started.
	sinceGC atomic.Int64
)

// mapTable maps size bytes for a table or a chunk (mapAligned), counts
// them, and starts a collection, without waiting for it, once gcEvery
// bytes have been mapped since the last one started here.
func mapTable(size int) unsafe.Pointer {
	p := mapAligned(size)
	if p == nil {
		return nil
	}
	arenasMapped.Add(int64(size))
	if sinceGC.Add(int64(size)) >= gcEvery {
		sinceGC.Store(0)
		go runtime.GC()
	}
	return p
}

// unmapTable unmaps what mapTable mapped.
func unmapTable(p unsafe.Pointer, n int) {
	unmap(p, n)
	arenasMapped.Add(-int64(n))
}

// mapAligned maps size bytes, a multiple of hugePage, aligned to
// hugePage, asks for huge pages there, and returns their address, or nil
// if the kernel refuses.
func mapAligned(size int) unsafe.Pointer {
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(size+hugePage), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil
	}
	head := int(-uintptr(p) & (hugePage - 1)) // bytes before the first aligned address
	if head > 0 {
		unmap(p, head)
	}
	at := unsafe.Add(p, head)
	unmap(unsafe.Add(at, size), hugePage-head)
	// Asked, not required: with huge pages off (or "never"), the table
	// works in 4 KiB pages.
	_ = unix.Madvise(unsafe.Slice((*byte)(at), size), unix.MADV_HUGEPAGE)
	return at
}

// unmap unmaps the n bytes at p. A failure, which only a bad address
// causes, leaves the memory mapped.
func unmap(p unsafe.Pointer, n int) { _ = unix.MunmapPtr(p, uintptr(n)) }
