package memory

import (
	"testing"
	"unsafe"
)

// TestWideLayout checks what a wide bucket's layout promises: its slot
// and its rest in two whole cache lines, the key one run of bytes from
// the slot's key on into the rest, room past the longest key for a
// window, and every table of them, from the smallest on Go's heap to
// ones in the arena, aligned to 128 bytes, so that the two lines share a
// 128-byte block.
func TestWideLayout(t *testing.T) {
	var w wide
	if size := unsafe.Sizeof(w); size != 128 {
		t.Errorf("a wide bucket is %d bytes, want 128", size)
	}
	if at := unsafe.Offsetof(w.rest); at != 64 || unsafe.Offsetof(w.key)+inlineKey != at {
		t.Errorf("rest at byte %d, the slot's key ends at %d; want both at 64", at, unsafe.Offsetof(w.key)+inlineKey)
	}
	if end := maxWideKey - inlineKey; end > wideWindowAt || wideWindowAt+16 != wideRest {
		t.Errorf("the longest key ends at byte %d of rest, the window at %d to %d of %d", end, wideWindowAt, wideWindowAt+16, wideRest)
	}
	mem := newArena()
	for _, a := range []*arena{nil, mem} {
		var ws wides
		for size := minWide; size <= 1<<16; size *= 2 {
			ws.resize(a, size)
			if at := uintptr(unsafe.Pointer(unsafe.SliceData(ws.e))); at%128 != 0 {
				t.Errorf("arena %v: a table of %d wide buckets at %#x, not aligned to 128", a != nil, size, at)
			}
		}
		freeEntries(a, ws.e)
	}
}
