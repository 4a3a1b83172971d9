//go:build unix

package memory

import (
	"math"
	"syscall"
	"testing"
	"unsafe"
)

// TestLongKeysRefuseALengthTheHeaderCannotHold: longKeys.add refuses a
// key of 2^31 bytes or more, whose length would run into the header's
// deadBit, and adds nothing. The key is 2 GiB of address space mapped
// read-only, outside Go's heap, and never read: it takes no memory
// unless add copies it, as it would without the guard, and the test
// then fails.
func TestLongKeysRefuseALengthTheHeaderCannotHold(t *testing.T) {
	if math.MaxInt < deadBit {
		t.Skip("no string is 2^31 bytes long where int has 32 bits")
	}
	size := uint64(deadBit) // a variable: the constant overflows a 32-bit int
	n := int(size)
	mem, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		t.Fatalf("mapping %d bytes: %v", n, err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(mem) })
	huge := unsafe.String(unsafe.SliceData(mem), n)

	var l longKeys
	w, ok := l.add(0x1234<<32, "a key of forty bytes, more than a slot..")
	if !ok || w != 0 {
		t.Fatalf("a short key: word %d, added %v; want 0, true", w, ok)
	}
	before := len(l.buf)
	if w, ok := l.add(0x5678<<32, huge); ok {
		t.Fatalf("a key of %d bytes added at word %d", len(huge), w)
	}
	if len(l.buf) != before {
		t.Fatalf("the buffer grew from %d to %d bytes for a refused key", before, len(l.buf))
	}
	if !l.is(0, 40, "a key of forty bytes, more than a slot..") {
		t.Fatal("the short key is no longer held")
	}
}
