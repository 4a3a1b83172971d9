//go:build (linux || darwin) && !race

package memory

import (
	"math"
	"syscall"
	"testing"
)

// TestLongKeysRefuseToPassMaxLongWords: longKeys.add fills its buffer up
// to maxLongWords words (a slot's kref is a uint32 offset in words, 32
// GiB of keys) and refuses the key that would pass it, adding nothing,
// and table.insert then answers -1. The buffer is 32 GiB of address
// space mapped with no access, but for its last pages: it takes no
// memory, and a write anywhere else crashes the test. (Not with the race
// detector, whose shadow memory does not cover such a mapping.)
func TestLongKeysRefuseToPassMaxLongWords(t *testing.T) {
	if math.MaxInt < 1<<36 {
		t.Skip("32 GiB of address space needs a 64-bit int")
	}
	words := uint64(maxLongWords) // a variable, for 32-bit builds
	limit := int(words * 8)       // bytes
	page := syscall.Getpagesize()
	// The limit, and a page past it: without the guard, a record past the
	// limit would be written there, not crash the test.
	size := (limit/page + 2) * page
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
	if err != nil {
		t.Skipf("no 32 GiB of address space to map: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(mem) })
	if err := syscall.Mprotect(mem[(limit/page-1)*page:], syscall.PROT_READ|syscall.PROT_WRITE); err != nil {
		t.Fatalf("opening the last pages: %v", err)
	}

	const key = "a key of forty bytes, more than a slot.." // a record of 48 bytes
	// The buffer as if full of records but the last 48 bytes below the
	// limit: the next record fits exactly.
	l := longKeys{buf: mem[: limit-recordSize(len(key)) : size]}
	w, ok := l.add(0xabcd<<32, key)
	if !ok || int(w) != (limit-recordSize(len(key)))/8 {
		t.Fatalf("the last record that fits: word %d, added %v; want %d, true", w, ok, (limit-recordSize(len(key)))/8)
	}
	if len(l.buf) != limit || !l.is(w, len(key), key) {
		t.Fatalf("the last record: buffer of %d bytes (want %d), key held %v", len(l.buf), limit, l.is(w, len(key), key))
	}
	if w, ok := l.add(0xef01<<32, "another key of forty bytes, past it...."); ok {
		t.Fatalf("a record past %d words added at word %d", words, w)
	}
	if len(l.buf) != limit {
		t.Fatalf("the buffer grew from %d to %d bytes for a refused key", limit, len(l.buf))
	}

	// The table answers -1 for a bucket whose key finds no room, and
	// holds it nowhere.
	tab := newTable(nil)
	tab.long = l
	long := "a key of ninety bytes, longer than any line keeps, so kept in the long keys' buffer......."
	h := uint64(0x9e3779b97f4a7c15) | 1
	if i := tab.insert(h, long, false); i != -1 {
		t.Fatalf("insert past the long keys' limit: slot %d, want -1", i)
	}
	if tab.n != 0 {
		t.Fatalf("the table holds %d buckets after a refused insert, want 0", tab.n)
	}
	if _, found := tab.find(h, long, false); found {
		t.Fatal("the refused key is found")
	}
}
