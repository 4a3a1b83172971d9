package memory

import "unsafe"

// minBlock is the smallest table, in bytes, an arena holds (arena_linux.go):
// 1,024 slots or 512 wide buckets. A smaller one comes from Go's heap.
const minBlock = 64 << 10

// entry is what a table holds: slots, or wide buckets. Neither may hold a
// pointer: an arena's memory is outside Go's heap, where the collector
// does not look.
type entry interface{ slot | wide }

// makeEntries returns n zeroed entries from a's memory, or from Go's heap
// where a gives none (see arena.alloc). n is a power of two.
func makeEntries[E entry](a *arena, n int) []E {
	if p := a.alloc(n * int(unsafe.Sizeof(*new(E)))); p != nil {
		return unsafe.Slice((*E)(p), n)
	}
	return make([]E, n)
}

// freeEntries gives back es, which makeEntries returned from a, to a.
// requires es no longer used.
func freeEntries[E entry](a *arena, es []E) {
	a.free(unsafe.Pointer(unsafe.SliceData(es)), len(es)*int(unsafe.Sizeof(*new(E))))
}
