package keybuf

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestAppendAsAppend compares Append with the two appends it stands for,
// over every pair of lengths to past Max, with room and without, and
// checks that the spare capacity past the key keeps its bytes.
func TestAppendAsAppend(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	text := func(n int) string { return randomText(r, n) }
	for la := 0; la <= Max+2; la++ {
		for lb := 0; lb <= Max+2; lb++ {
			for _, pre := range []int{0, 1, 7} {
				for _, room := range []int{0, Max - 1, Max, Max + 9} {
					a, b := text(la), text(lb)
					buf := []byte(text(pre + room))
					dst := buf[: pre : pre+room]
					want := append(append([]byte(nil), buf[:pre]...), a+b...)
					spare := bytes.Clone(buf)
					got := Append(dst, a, b)
					if !bytes.Equal(got, want) {
						t.Fatalf("Append(%d-byte dst, %d-byte a, %d-byte b) with %d bytes spare = %x, want %x", pre, la, lb, room, got, want)
					}
					if la+lb <= Max && room >= Max {
						if unsafe.SliceData(got) != unsafe.SliceData(buf) {
							t.Fatalf("lengths %d+%d: Append reallocated with room to spare", la, lb)
						}
						if past := pre + la + lb; !bytes.Equal(buf[past:], spare[past:]) {
							t.Fatalf("lengths %d+%d, %d bytes before: spare capacity changed from %x to %x", la, lb, pre, spare[past:], buf[past:])
						}
					}
				}
			}
		}
	}
}

// TestAppendAllocatesNothing: with room, Append writes in place.
func TestAppendAllocatesNothing(t *testing.T) {
	dst := make([]byte, 0, 64)
	if n := testing.AllocsPerRun(100, func() { dst = Append(dst[:0], "12:", "123456789") }); n != 0 {
		t.Fatalf("Append allocated %v times, want 0", n)
	}
	if string(dst) != "12:123456789" {
		t.Fatalf("Append wrote %q", dst)
	}
}

// TestWords: Words gives a then b as the bytes of its two words, for
// every pair of lengths to past Max, and declines a longer key; Put
// writes them back out; Equal holds for the key's own bytes, whatever
// follows them, and fails for any byte changed and for another length.
func TestWords(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	text := func(n int) string { return randomText(r, n) }
	for la := 0; la <= Max+2; la++ {
		for lb := 0; lb <= Max+2; lb++ {
			a, b := text(la), text(lb)
			lo, hi, n, ok := Words(a, b)
			if ok != (la+lb <= Max) {
				t.Fatalf("lengths %d+%d: ok %v", la, lb, ok)
			}
			if !ok {
				continue
			}
			var got [Max]byte
			Put(&got, lo, hi)
			want := [Max]byte{}
			copy(want[:], a+b)
			if n != la+lb || got != want {
				t.Fatalf("lengths %d+%d: Words gave %x, %d bytes; want %x", la, lb, got, n, want)
			}
			if l, h := Load(a + b); l != lo || h != hi {
				t.Fatalf("lengths %d+%d: Load gave %x %x, Words %x %x", la, lb, l, h, lo, hi)
			}
			if n >= 4 { // Load4's lengths
				if l, h := Load4(a + b); l != lo || h != hi {
					t.Fatalf("lengths %d+%d: Load4 gave %x %x, Words %x %x", la, lb, l, h, lo, hi)
				}
			}
			held := want
			for i := n; i < Max; i++ {
				held[i] = byte(r.Uint32()) // not the key's: ignored
			}
			jlo, jhi := Load(string(held[:]))
			if l, h := Trim(jlo, jhi, n); l != lo || h != hi {
				t.Fatalf("lengths %d+%d: Trim gave %x %x, want %x %x", la, lb, l, h, lo, hi)
			}
			if !Equal(&held, lo, hi, n) {
				t.Fatalf("lengths %d+%d: Equal false for the key's own bytes", la, lb)
			}
			for i := 0; i < n; i++ {
				other := held
				other[i] ^= 1 << r.IntN(8)
				if Equal(&other, lo, hi, n) {
					t.Fatalf("lengths %d+%d: Equal true with byte %d changed", la, lb, i)
				}
			}
			if n < Max && Equal(&held, lo, hi, n+1) && held[n] != 0 {
				t.Fatalf("lengths %d+%d: Equal true for a longer key", la, lb)
			}
		}
	}
}

// randomText returns n random bytes.
func randomText(r *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return string(b)
}

// TestDigits: for every length to Max, a key of digits is all digits
// whatever follows it, and any one byte that is not a digit, at any
// place, makes it not; Join puts two keys' words together as Words does.
func TestDigits(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for n := 0; n <= Max; n++ {
		key := make([]byte, Max)
		for i := range key {
			key[i] = byte('0' + r.IntN(10))
		}
		for i := n; i < Max; i++ {
			key[i] = byte(r.Uint32()) // past the key: ignored
		}
		lo, hi := Load(string(key))
		if !Digits(lo, hi, n) {
			t.Fatalf("%d digits %q: Digits false", n, key[:n])
		}
		for i := 0; i < n; i++ {
			for c := 0; c < 256; c++ {
				other := bytes.Clone(key)
				other[i] = byte(c)
				lo, hi := Load(string(other))
				if want := c >= '0' && c <= '9'; Digits(lo, hi, n) != want {
					t.Fatalf("%d bytes %q, byte %d = %#x: Digits %v, want %v", n, other[:n], i, c, !want, want)
				}
			}
		}
		a, b := string(key[:n/2]), string(key[n/2:n])
		alo, ahi := Load(a)
		blo, bhi := Load(b)
		jlo, jhi := Join(alo, ahi, len(a), blo, bhi)
		if wlo, whi, _, _ := Words(a, b); jlo != wlo || jhi != whi {
			t.Fatalf("Join(%q, %q) = %x %x, Words %x %x", a, b, jlo, jhi, wlo, whi)
		}
		// JoinNear, for every split whose first part is 1 to 7 bytes.
		for la := 1; la <= 7 && la <= n; la++ {
			a, b := string(key[:la]), string(key[la:n])
			alo, ahi := Load(a)
			blo, bhi := Load(b)
			jlo, jhi := JoinNear(alo, ahi, la, blo, bhi)
			if wlo, whi, _, _ := Words(a, b); jlo != wlo || jhi != whi {
				t.Fatalf("JoinNear(%q, %q) = %x %x, Words %x %x", a, b, jlo, jhi, wlo, whi)
			}
		}
	}
}
