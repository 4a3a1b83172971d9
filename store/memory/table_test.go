package memory

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/sluice-rl/sluice/internal/keybuf"
)

// fnv is the FNV-1a hash of k with its low bit set, as the table wants;
// when crowd is set, only its top three bits vary, over homes values, so
// that runs of buckets are long and wrap around the table's end, and its
// low four, so that some keys share their whole hash and others do not.
func fnv(k string, crowd bool, homes uint64) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(k); i++ {
		h = (h ^ uint64(k[i])) * 1099511628211
	}
	if crowd {
		h = (h%homes)<<61 | h&0xf
	}
	return h | 1
}

// Where a bucket's key is kept.
const (
	inSlot = "slot"
	inWide = "wide bucket"
	inLong = "long keys"
)

// placeFor returns where a bucket under a key of n bytes, of the kind
// given, is kept.
func placeFor(n int, window bool) string {
	switch {
	case wideFor(n, window):
		return inWide
	case n > inlineLen(window):
		return inLong
	}
	return inSlot
}

// placeOf returns where the key of the bucket at ref r is kept.
func placeOf(tab *table, r int) string {
	switch {
	case r&wideRef != 0:
		return inWide
	case tab.at(r).isLong():
		return inLong
	}
	return inSlot
}

// FuzzTableAgreesWithAMap reads each input byte as an operation on one
// of 64 keys — the top two bits: set the key's bucket (inserting it if
// missing; half the keys make GCRA buckets and half FixedWindow ones, as
// a bucket keeps its kind), remove it (then shrink), or look it up; a
// quarter of the keys make wide buckets, a quarter fit a GCRA bucket's
// slot but make a FixedWindow bucket a wide one, and a quarter are longer
// than a wide bucket holds — with hashes crowded onto four homes, and
// some shared, when the first byte is odd, and checks the table against
// a map after each one, and entry by entry at the end.
func FuzzTableAgreesWithAMap(f *testing.F) {
	f.Add([]byte{1, 0x01, 0x41, 0x81, 0x02, 0xc2, 0x42})
	f.Add([]byte{0, 0x00, 0x01, 0x02, 0x03, 0x40, 0x41, 0x00})
	f.Add([]byte{1, 0x04, 0x44, 0xc4, 0x04, 0xc4, 0x47, 0x07, 0x84, 0xc7})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) == 0 {
			return
		}
		crowd := ops[0]&1 == 1
		hash := func(k string) uint64 { return fnv(k, crowd, 4) }
		tab := newTable(nil)
		type bucket struct {
			v      int64
			window bool
			place  string // where its key is kept
		}
		want := map[string]bucket{}
		for step, op := range ops[1:] {
			n := int(op & 63)
			k := strconv.Itoa(n)
			switch n % 4 {
			case 0:
				k += strings.Repeat("L", inlineKey)
			case 1:
				k += strings.Repeat("M", inlineWindowKey+1)
			case 3:
				k += strings.Repeat("X", maxWideKey)
			}
			// A key's bucket keeps its kind: the store hashes a key's
			// buckets of each kind apart (Store.opHash).
			window := (n>>2)&1 == 1
			h := hash(k)
			i, ok := -1, false
			if _, in := want[k]; in {
				if i, ok = tab.find(h, k, window); !ok {
					t.Fatalf("step %d: %q (window %v) not found", step, k, window)
				}
			} else {
				for _, window := range []bool{false, true} {
					if _, found := tab.find(h, k, window); found {
						t.Fatalf("step %d: %q found as window %v, not held", step, k, window)
					}
				}
			}
			switch op >> 6 {
			case 0, 1:
				// A key is kept where its length and its bucket's kind
				// keep it.
				if !ok {
					i = tab.insert(h, k, window)
				}
				tab.at(i).exp = int64(step)
				if window {
					tab.setWindow(i, int64(step)+1, int64(step)+2)
				}
				want[k] = bucket{int64(step), window, placeFor(len(k), window)}
			case 2:
				if ok {
					tab.remove(i)
					delete(want, k)
					tab.shrink()
					tab.wide.shrink(nil)
				}
			default:
				if ok {
					checkBucket(t, &tab, i, k, want[k].v, want[k].window, want[k].place)
				}
			}
			if tab.count() != len(want) {
				t.Fatalf("step %d: table holds %d, want %d", step, tab.count(), len(want))
			}
		}
		for k, b := range want {
			i, ok := tab.find(hash(k), k, b.window)
			if !ok {
				t.Fatalf("at the end: %q not found, want it with %d", k, b.v)
			}
			checkBucket(t, &tab, i, k, b.v, b.window, b.place)
		}
		checkLong(t, &tab)
		checkWide(t, &tab)
		if live := len(tab.long.buf) - tab.long.dead; len(tab.long.buf) > live+live/8+compactAt {
			t.Errorf("crowd %v: %d bytes of buffer left for %d of records", crowd, len(tab.long.buf), live)
		}
	})
}

// checkBucket fails t unless the bucket at ref i holds key k, kept in
// place, with v in exp and, for a FixedWindow bucket, v+1 and v+2 as its
// window.
func checkBucket(t *testing.T, tab *table, i int, k string, v int64, window bool, place string) {
	t.Helper()
	s := tab.at(i)
	if s.exp != v || s.isWindow() != window || placeOf(tab, i) != place || tab.keyOf(i) != k {
		t.Fatalf("ref %#x holds %q = %d, window %v, in %s; want %q = %d, window %v, in %s", i, tab.keyOf(i), s.exp, s.isWindow(), placeOf(tab, i), k, v, window, place)
	}
	if start, count := tab.window(i); window && (start != v+1 || count != v+2) {
		t.Fatalf("ref %#x, %q: window %d, %d, want %d, %d", i, k, start, count, v+1, v+2)
	}
}

// checkLong fails t unless tab.long holds exactly the records of the
// long keys in tab's slots, and removed ones within the bound remove
// keeps: under compactAt bytes, or under an eighth of the buffer.
func checkLong(t *testing.T, tab *table) {
	t.Helper()
	live := 0
	for i := range tab.slots {
		if s := &tab.slots[i]; s.hash != 0 && s.isLong() {
			live += recordSize(s.keyLen())
		}
	}
	l := &tab.long
	if got := len(l.buf) - l.dead; got != live {
		t.Errorf("long keys: %d bytes in live records, want %d (the slots' long keys)", got, live)
	}
	if l.dead >= compactAt && l.dead*8 >= len(l.buf) {
		t.Errorf("long keys: %d of %d bytes removed, want fewer than %d or an eighth", l.dead, len(l.buf), compactAt)
	}
}

// checkWide fails t unless tab.wide counts the buckets it holds, each
// under a key of a wide bucket's length for its kind, found where it is
// by its key,
// within the table's bounds: no more than three quarters full.
func checkWide(t *testing.T, tab *table) {
	t.Helper()
	w := &tab.wide
	held := 0
	for i := range w.e {
		e := &w.e[i]
		if e.hash == 0 {
			continue
		}
		held++
		k := tab.keyOf(i | wideRef)
		if !wideFor(len(k), e.isWindow()) {
			t.Errorf("wide bucket %d: a key of %d bytes, window %v", i, len(k), e.isWindow())
		}
		if j, ok := w.find(e.hash, k); !ok || j != i {
			t.Errorf("wide bucket %d, %q: found at %d, %v", i, k, j, ok)
		}
	}
	if held != w.n {
		t.Errorf("wide buckets: %d held, counted %d", held, w.n)
	}
	if size := len(w.e); size > 0 && held*4 > size*3 {
		t.Errorf("wide buckets: %d in a table of %d", held, size)
	}
}

// keyOf returns the key of the bucket at ref r (for the tests: the store
// needs only its length).
func (t *table) keyOf(r int) string {
	s := t.at(r)
	n := s.keyLen()
	switch {
	case r&wideRef != 0:
		return string(unsafe.Slice(&s.key[0], n))
	case s.isLong():
		return string(t.long.key(s.kref, n))
	}
	return string(s.key[:n])
}

// TestTableShrinks fills tables, removes most of their buckets, shrinks
// them, and checks every bucket left is found with its value, that the
// table is as small as it may be (not under minShrunk), and that it grows
// again.
func TestTableShrinks(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, crowd := range []bool{false, true} {
		for _, keep := range []int{0, 1, 7, 100, 600} {
			hash := func(k string) uint64 { return fnv(k, crowd, 7) }
			tab := newTable(nil)
			want := map[string]int64{}
			for i := range 5000 {
				k := strconv.Itoa(i)
				if i%4 == 0 {
					k += strings.Repeat("L", maxWideKey) // in tab.long
				}
				tab.at(tab.insert(hash(k), k, false)).exp = int64(i)
				want[k] = int64(i)
			}
			for k := range want {
				if len(want) == keep {
					break
				}
				i, ok := tab.find(hash(k), k, false)
				if !ok {
					t.Fatalf("crowd %v: %q not found before removal", crowd, k)
				}
				tab.remove(i)
				delete(want, k)
			}
			before := len(tab.slots)
			shrunk := tab.shrink()
			size := len(tab.slots)
			if shrunk != (size < before) || size < minShrunk || (size > minShrunk && keep*8 < size) || keep*4 >= size {
				t.Fatalf("crowd %v, %d kept: %d slots -> %d (shrunk %v), want the fewest slots at least %d with %d kept under a quarter full",
					crowd, keep, before, size, shrunk, minShrunk, keep)
			}
			if tab.count() != keep {
				t.Fatalf("crowd %v: holds %d, want %d", crowd, tab.count(), keep)
			}
			for k, v := range want {
				if i, ok := tab.find(hash(k), k, false); !ok || tab.at(i).exp != v {
					t.Fatalf("crowd %v, %d kept: %q found %v, want it with %d", crowd, keep, k, ok, v)
				}
			}
			for i := range 2000 {
				k := "again" + strconv.Itoa(i+r.IntN(3)*10000)
				if _, ok := tab.find(hash(k), k, false); !ok {
					tab.insert(hash(k), k, false)
				}
			}
			if tab.n*4 > len(tab.slots)*3 {
				t.Fatalf("crowd %v: %d buckets in %d slots after growing again", crowd, tab.n, len(tab.slots))
			}
		}
	}
}

// TestFindShortAsFind: over a table of short keys that share few hashes
// (so that most lookups compare keys byte by byte), many of the same
// length, prefixes of one another, some ending in zero bytes, inserted and removed at random (so
// that slots are reused and keep bytes of longer keys past a shorter
// key's end), findShort finds each key, from its words, where find finds
// it from its bytes.
func TestFindShortAsFind(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	hash := func(k string) uint64 { return uint64(len(k)%3)<<62 | 1 }
	key := func() string {
		// Mostly short, so that keys come back; some up to the most.
		n := r.IntN(4)
		if r.IntN(4) == 0 {
			n = r.IntN(keybuf.Max + 1)
		}
		b := make([]byte, n)
		for i := range b {
			// A zero byte too: "a" and "a\x00" are the same words.
			b[i] = "ab\x00"[r.IntN(3)]
		}
		return string(b)
	}
	tab := newTable(nil)
	held := map[string]bool{}
	hits := 0
	for step := range 20_000 {
		k := key()
		h := hash(k)
		i, ok := tab.find(h, k, false)
		lo, hi := keybuf.Load(k)
		j, sok := tab.findShort(h, lo, hi, len(k))
		if i != j || ok != sok || ok != held[k] {
			t.Fatalf("step %d, key %q: find answered slot %d, %v; findShort slot %d, %v; held %v", step, k, i, ok, j, sok, held[k])
		}
		switch {
		case ok:
			hits++
			if r.IntN(2) == 0 {
				tab.remove(i)
				delete(held, k)
			}
		default:
			if len(held) >= 40 {
				// Make room: drop a held key, any one.
				for old := range held {
					i, _ := tab.find(hash(old), old, false)
					tab.remove(i)
					delete(held, old)
					break
				}
			}
			tab.insert(h, k, false)
			held[k] = true
		}
	}
	if hits < 1000 {
		t.Fatalf("only %d lookups found their key", hits)
	}
}

// TestShortKeysSpread: the keys a service makes, an enum and a number,
// spread over the shards (hash's low bits) and over a table's homes (its
// top bits) within half of even: numbers that differ in their first
// word, longer ones that differ only in their second, and keys of 17 to
// 24 bytes (hash's three words) that differ only in their last 8 bytes.
func TestShortKeysSpread(t *testing.T) {
	for _, prefix := range []string{"3:", "3:12345678", "tenant-7:user:", "tenant:acme:user:"} {
		t.Run(prefix, func(t *testing.T) { spread(t, prefix) })
	}
}

// TestInlineKeysHashEveryByte: for keys of 17 to 24 bytes, changing any
// one byte, or adding one, changes the hash. It fails for a hash that
// leaves out a word.
func TestInlineKeysHashEveryByte(t *testing.T) {
	s := New(Options{})
	r := rand.New(rand.NewPCG(9, 10))
	for n := keybuf.Max + 1; n <= inlineWindowKey; n++ {
		for range 200 {
			k := make([]byte, n+1)
			for i := range k {
				k[i] = byte('a' + r.IntN(26))
			}
			h, _ := s.hash(string(k[:n]))
			if n < inlineWindowKey {
				if h2, _ := s.hash(string(k)); h2 == h {
					t.Fatalf("%q and %q: the same hash %x", k[:n], k, h)
				}
			}
			for p := range n {
				was := k[p]
				k[p] ^= 1 << r.IntN(8)
				if h2, _ := s.hash(string(k[:n])); h2 == h {
					t.Fatalf("%q: byte %d changed, the same hash %x", k[:n], p, h)
				}
				k[p] = was
			}
		}
	}
}

func spread(t *testing.T, prefix string) {
	s := New(Options{Shards: 256})
	const n = 1 << 16
	var shards, homes [256]int
	for i := range n {
		k := prefix + strconv.Itoa(i)
		h, shard := s.hash(k)
		if lo, hi := keybuf.Load(k); len(k) <= keybuf.Max {
			if hh, ss := s.hashShort(lo, hi, len(k)); hh != h || ss != shard {
				t.Fatalf("hash(%q) = %x, %d; hashShort %x, %d", k, h, shard, hh, ss)
			}
		}
		shards[shard]++
		homes[h>>56]++
	}
	// Half of even either way: 8 standard deviations of a random
	// hash's count (16 for 256), as the secrets are random in every run.
	// A third (5.3) failed about once in 500 runs of the four prefixes,
	// hashShort's "3:" among them, with counts of up to 360.
	for i := range 256 {
		if c := shards[i]; c < n/256/2 || c > n/256*3/2 {
			t.Fatalf("shard %d holds %d of %d keys", i, c, n)
		}
		if c := homes[i]; c < n/256/2 || c > n/256*3/2 {
			t.Fatalf("home %d/256 holds %d of %d keys", i, c, n)
		}
	}
}
