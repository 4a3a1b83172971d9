package memory

import (
	"encoding/binary"
	"math/bits"
	"unsafe"
)

// wideRest is the bytes a wide bucket has past its slot, and maxWideKey
// the longest key a wide bucket keeps: its slot's inlineKey bytes and all
// of the rest but the 16 that a FixedWindow bucket's window takes
// (wideWindowAt).
const (
	wideRest     = 64
	wideWindowAt = wideRest - 16
	maxWideKey   = inlineKey + wideWindowAt
)

// wideFor reports whether the bucket of a key of n bytes, of the kind
// given (a FixedWindow bucket when window), is a wide one: a key longer
// than that kind's slot keeps (inlineLen) and at most maxWideKey bytes.
// It follows from the length and the kind, so that a lookup knows which
// of its shard's tables to look in before it finds the bucket; it is the
// one rule for where wide buckets are used: in which table a bucket is,
// what it counts (cost), which lines a decision prefetches.
func wideFor(n int, window bool) bool { return n > inlineLen(window) && n <= maxWideKey }

// isWide is wideFor for a GCRA bucket.
func isWide(n int) bool { return wideFor(n, false) }

// wide is a bucket whose key is longer than a GCRA bucket's slot keeps
// and at most maxWideKey bytes: a slot, then the rest, two adjacent cache
// lines in an entry of 128 bytes, aligned to 128 (TestWideLayout), so
// that a decision that asks for both finds them in one page, and most
// often one row of memory. Kept apart, in two tables, the second line
// cost about 70 ns a decision more with 57-byte keys, though asked for
// together with the slot (BENCHMARKS.md, "A bucket of two adjacent lines
// for keys of 41 to 88 bytes"). A FixedWindow bucket's key of 25 to 40
// bytes makes a wide bucket too: its slot has no room for the window
// past it, and the long keys' buffer, read after the slot, took about
// 380 ns a decision against about 250 (BENCHMARKS.md, the same
// section, "Fixed windows of 25 to 40 bytes wide too").
//
// The key runs from the slot's key on into rest, one run of bytes; a
// FixedWindow bucket's window takes the last 16 bytes of rest, past any
// key (the slot's field window is not used), so that a bucket of a key of
// 41 to 88 bytes that changes kind moves nothing. slot.kref is not used.
type wide struct {
	slot
	rest [wideRest]byte
}

// keyIs reports whether w, a bucket held, holds key, whose hash is h.
func (w *wide) keyIs(h uint64, key string) bool {
	return w.hash == h && w.keyLen() == len(key) && string(unsafe.Slice(&w.key[0], len(key))) == key
}

// window returns a FixedWindow bucket's first Unix second and count.
func (w *wide) window() (start, count int64) {
	return int64(binary.LittleEndian.Uint64(w.rest[wideWindowAt:])), int64(binary.LittleEndian.Uint64(w.rest[wideWindowAt+8:]))
}

// setWindow stores a FixedWindow bucket's first Unix second and count.
func (w *wide) setWindow(start, count int64) {
	binary.LittleEndian.PutUint64(w.rest[wideWindowAt:], uint64(start))
	binary.LittleEndian.PutUint64(w.rest[wideWindowAt+8:], uint64(count))
}

// wides is a shard's table of wide buckets, beside its slots: open
// addressing with linear probing, grown by doubling when three quarters
// full and shrunk by halving, when swept, while less than an eighth full,
// removal with no tombstones, as table's slots.
type wides struct {
	e      []wide
	shift  uint // 64 - log2(len(e))
	n      int  // buckets held
	cursor int  // where the next sweep starts
	moved  bool // moved since the shard last published them
}

const minWide = 8

func (w *wides) home(h uint64) int { return int(h >> w.shift) }

// find returns the index of the bucket holding key, whose hash is h, and
// true; or -1 and false.
func (w *wides) find(h uint64, key string) (int, bool) {
	if w.n == 0 {
		return -1, false
	}
	m := len(w.e) - 1
	for i := w.home(h); ; i = (i + 1) & m {
		e := &w.e[i]
		if e.hash == 0 {
			return -1, false
		}
		if e.keyIs(h, key) {
			return i, true
		}
	}
}

// insert adds key, with hash h, which w does not hold and whose bucket is
// wide (wideFor), and returns its index. It may grow the table, moving
// every bucket.
func (w *wides) insert(mem *arena, h uint64, key string, window bool) int {
	if (w.n+1)*4 > len(w.e)*3 {
		w.resize(mem, max(minWide, 2*len(w.e)))
	}
	m := len(w.e) - 1
	i := w.home(h)
	for w.e[i].hash != 0 {
		i = (i + 1) & m
	}
	e := &w.e[i]
	e.klen = uint32(len(key))
	if window {
		e.klen |= windowBit
	}
	copy(unsafe.Slice(&e.key[0], maxWideKey), key)
	e.hash = h
	w.n++
	return i
}

// remove deletes the bucket at i. Buckets after it in its run may move
// back, into i among others.
func (w *wides) remove(i int) {
	w.e[closeHole(w.e, i, w.shift)] = wide{}
	w.n--
}

// shrink halves the table while it is less than an eighth full and longer
// than minShrunk, as table.shrink does, and reports whether it did.
func (w *wides) shrink(mem *arena) bool {
	size := len(w.e)
	for size > minShrunk && w.n*8 < size {
		size /= 2
	}
	if size == len(w.e) {
		return false
	}
	w.resize(mem, size)
	return true
}

// resize moves every bucket into a new table of size buckets, a power of
// two.
func (w *wides) resize(mem *arena, size int) {
	old := w.e
	w.e = makeEntries[wide](mem, size)
	w.shift = uint(64 - bits.TrailingZeros(uint(size)))
	rehash(w.e, old, w.shift)
	freeEntries(mem, old)
	w.cursor = 0
	w.moved = true
}

// hashed is a slot or a wide bucket: an entry of a table with linear
// probing, whose home is given by the top bits of its hash, 0 when it is
// empty. (A wide bucket's is its slot's.)
type hashed[E any] interface {
	*E
	hashOf() uint64
}

func (s *slot) hashOf() uint64 { return s.hash }

// closeHole fills the hole left at i in a, a table whose homes are its
// entries' hashes shifted right by shift, by moving the entries after it
// back as far as their homes let them, and returns the place left empty,
// for the caller to clear: removal with no tombstones.
func closeHole[E any, P hashed[E]](a []E, i int, shift uint) int {
	m := len(a) - 1
	for j := (i + 1) & m; P(&a[j]).hashOf() != 0; j = (j + 1) & m {
		if !fills(i, j, int(P(&a[j]).hashOf()>>shift)) {
			continue
		}
		a[i] = a[j]
		i = j
	}
	return i
}

// rehash puts each entry of old that is not empty into a, empty, at its
// home (its hash shifted right by shift) or the first free place after.
func rehash[E any, P hashed[E]](a, old []E, shift uint) {
	m := len(a) - 1
	for k := range old {
		h := P(&old[k]).hashOf()
		if h == 0 {
			continue
		}
		i := int(h >> shift)
		for P(&a[i]).hashOf() != 0 {
			i = (i + 1) & m
		}
		a[i] = old[k]
	}
}

// fills reports whether, in a table with linear probing, the entry in j,
// whose home is k, may move back into the hole at i: when k is not
// cyclically within (i, j], it is found by a probe that passes i.
func fills(i, j, k int) bool {
	if i <= j {
		return k <= i || j < k
	}
	return k <= i && j < k
}
