// Package keybuf appends a short key to a buffer in one 16-byte store, so
// that a hash of the key can read it back at once.
//
// Go's string hash (maphash, and the maps' own) reads a key of up to 16
// bytes with one 16-byte load. A key just appended to a buffer was written
// by several smaller stores (a prefix, then an id, each copied in its own
// moves), and the processor cannot answer a load from several pending
// stores: the load waits until they have reached the cache, which is after
// every older instruction has finished, a cache miss of the previous
// decision included. Written by one store of the same 16 bytes, the key
// is forwarded to the hash from the store buffer, and the next decision's
// lookup waits less for the last one's memory access
// (BenchmarkSpendGCRAKeyInBuffer in store/memory, BENCHMARKS.md).
package keybuf

import (
	"encoding/binary"
	"unsafe"
)

// Max is the longest key Append writes in one store.
const Max = 16

// Append appends a then b to dst, as append(append(dst, a...), b...)
// does. When the two are at most Max bytes together and dst has room for
// Max more bytes, it writes them in one 16-byte store; the bytes of dst's
// spare capacity after the key are written back as they were.
func Append(dst []byte, a, b string) []byte {
	end := len(dst)
	lo, hi, n, ok := Words(a, b)
	if !ok || cap(dst)-end < Max {
		return append(append(dst, a...), b...)
	}
	// Keep what the spare capacity held past the key.
	room := dst[end : end+Max]
	old0 := binary.LittleEndian.Uint64(room)
	old1 := binary.LittleEndian.Uint64(room[8:])
	m0, m1 := masks(n)
	store16(unsafe.SliceData(room), lo|old0&^m0, hi|old1&^m1)
	return dst[:end+n]
}

// Words returns a then b, when at most Max bytes together, as one 128-bit
// little-endian value (lo, hi), the bytes past them zero, and their
// length n, with ok; held in registers, a key need never be written to
// memory and read back. ok is false for a longer key.
func Words(a, b string) (lo, hi uint64, n int, ok bool) {
	n = len(a) + len(b)
	if n > Max {
		return 0, 0, 0, false
	}
	alo, ahi := load(a)
	blo, bhi := load(b)
	lo, hi = Join(alo, ahi, len(a), blo, bhi)
	return lo, hi, n, true
}

// Join returns the words of a key a then b, a of la bytes, given as Load
// gives them, when they are at most Max bytes together.
func Join(alo, ahi uint64, la int, blo, bhi uint64) (lo, hi uint64) {
	// b shifted past a. Go's shifts by 64 or more give 0, which the cases
	// rely on.
	lo, hi = alo, ahi
	if s := uint(la) * 8; s < 64 {
		lo |= blo << s
		hi |= bhi<<s | blo>>(64-s)
	} else {
		hi |= blo << (s - 64)
	}
	return lo, hi
}

// JoinNear is Join for an a of 1 to 7 bytes, which the caller checks: its
// shifts then need no test for 64 or more.
func JoinNear(alo, ahi uint64, la int, blo, bhi uint64) (lo, hi uint64) {
	s := uint(la) * 8 & 63
	return alo | blo<<s, ahi | bhi<<s | blo>>((64-s)&63)
}

// Digits reports whether the n <= Max bytes of the key (lo, hi) are all
// ASCII digits, without a loop: each byte's high nibble is 3 and its low
// one at most 9 (adding 6 to it carries into the high nibble).
func Digits(lo, hi uint64, n int) bool {
	const high, low, six, three = 0xF0F0F0F0F0F0F0F0, 0x0F0F0F0F0F0F0F0F, 0x0606060606060606, 0x3030303030303030
	m0, m1 := masks(n)
	return lo&high&m0 == three&m0 && hi&high&m1 == three&m1 &&
		((lo&low)+six)&high&m0 == 0 && ((hi&low)+six)&high&m1 == 0
}

// Load returns s, at most Max bytes, as Words does; it reads only s's
// own bytes.
func Load(s string) (lo, hi uint64) { return load(s) }

// Load4 is Load for a string of 4 to Max bytes, which the caller checks:
// small enough to be inlined, so that limiter.SpendFor reads an account
// id without a call (Load, for every length, is not). It reads only s's
// own bytes; for a shorter or longer s its answer is not Load's, and it
// may read outside s.
func Load4(s string) (lo, hi uint64) {
	n := len(s)
	p := unsafe.Pointer(unsafe.StringData(s))
	if n >= 8 {
		// As load: the second read ends at s's end.
		lo = binary.LittleEndian.Uint64((*[8]byte)(p)[:])
		hi = binary.LittleEndian.Uint64((*[8]byte)(unsafe.Add(p, n-8))[:]) >> (8 * uint(16-n))
		return lo, hi
	}
	lo = uint64(binary.LittleEndian.Uint32((*[4]byte)(p)[:])) | uint64(binary.LittleEndian.Uint32((*[4]byte)(unsafe.Add(p, n-4))[:]))<<(8*uint(n-4))
	return lo, 0
}

// Trim returns (lo, hi) with their bytes past the first n <= Max zeroed,
// as Words and Load give a key of n bytes.
func Trim(lo, hi uint64, n int) (uint64, uint64) {
	m0, m1 := masks(n)
	return lo & m0, hi & m1
}

// masks returns the masks of the first n <= Max bytes of a 128-bit
// little-endian value.
func masks(n int) (m0, m1 uint64) {
	if n >= 8 {
		return ^uint64(0), 1<<(8*uint(n-8)) - 1
	}
	return 1<<(8*uint(n)) - 1, 0
}

// Equal reports whether the first n <= Max bytes of p, read as Words
// reads a key, are (lo, hi), a key of n bytes from Words or Load; p must
// have Max bytes to read, whatever they hold past n.
func Equal(p *[Max]byte, lo, hi uint64, n int) bool {
	m0, m1 := masks(n)
	return binary.LittleEndian.Uint64(p[:8])&m0 == lo && binary.LittleEndian.Uint64(p[8:])&m1 == hi
}

// Put writes the key (lo, hi), from Words or Load, to p: its bytes, then
// zeros.
func Put(p *[Max]byte, lo, hi uint64) {
	binary.LittleEndian.PutUint64(p[:8], lo)
	binary.LittleEndian.PutUint64(p[8:], hi)
}

// load returns s, at most Max bytes, as a 128-bit little-endian value
// (lo, hi), the bytes past s zero. It reads only s's own bytes.
func load(s string) (lo, hi uint64) {
	n := len(s)
	if n == 0 {
		return 0, 0
	}
	b := unsafe.Slice(unsafe.StringData(s), n)
	switch {
	case n >= 8:
		// Two 8-byte reads, the second ending at s's end; its bytes past
		// the first read's are the top n-8 of it.
		lo = binary.LittleEndian.Uint64(b)
		hi = binary.LittleEndian.Uint64(b[n-8:]) >> (8 * uint(16-n))
	case n >= 4:
		lo = uint64(binary.LittleEndian.Uint32(b)) | uint64(binary.LittleEndian.Uint32(b[n-4:]))<<(8*uint(n-4))
	default:
		lo = uint64(b[0]) | uint64(b[n/2])<<(8*uint(n/2)) | uint64(b[n-1])<<(8*uint(n-1))
	}
	return lo, hi
}
