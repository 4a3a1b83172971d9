package memory

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/keybuf"
)

// fnv is the FNV-1a hash of k with its low bit set, as the table wants;
// when crowd is set, only its top three bits vary, over homes values, so
// that runs of buckets are long and wrap around the table's end.
func fnv(k string, crowd bool, homes uint64) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(k); i++ {
		h = (h ^ uint64(k[i])) * 1099511628211
	}
	if crowd {
		h = (h % homes) << 61
	}
	return h | 1
}

// FuzzTableAgreesWithAMap reads each input byte as an operation on one
// of 64 keys — the top two bits: insert, remove (then shrink), or look
// up; a third of the keys are longer than a slot holds — with hashes
// crowded onto four home slots when the first byte is odd, and checks the
// table against a map after each one and slot by slot at the end.
func FuzzTableAgreesWithAMap(f *testing.F) {
	f.Add([]byte{1, 0x01, 0x41, 0x81, 0x02, 0xc2, 0x42})
	f.Add([]byte{0, 0x00, 0x01, 0x02, 0x03, 0x40, 0x41, 0x00})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) == 0 {
			return
		}
		crowd := ops[0]&1 == 1
		hash := func(k string) uint64 { return fnv(k, crowd, 4) }
		tab := newTable()
		want := map[string]int64{}
		for step, op := range ops[1:] {
			n := int(op & 63)
			k := strconv.Itoa(n)
			if n%3 == 0 {
				k += strings.Repeat("L", inlineKey)
			}
			h := hash(k)
			i, ok := tab.find(h, k)
			if _, in := want[k]; ok != in {
				t.Fatalf("step %d: find(%q) = %v, want %v", step, k, ok, in)
			}
			switch op >> 6 {
			case 0, 1:
				if !ok {
					i = tab.insert(h, k)
				}
				tab.slots[i].val = int64(step)
				want[k] = int64(step)
			case 2:
				if ok {
					tab.remove(i)
					delete(want, k)
					tab.shrink()
				}
			default:
				if ok && tab.slots[i].val != want[k] {
					t.Fatalf("step %d: %q holds %d, want %d", step, k, tab.slots[i].val, want[k])
				}
			}
			if tab.n != len(want) {
				t.Fatalf("step %d: table holds %d, want %d", step, tab.n, len(want))
			}
		}
		for k, v := range want {
			if i, ok := tab.find(hash(k), k); !ok || tab.slots[i].val != v {
				t.Fatalf("at the end: %q found %v, want it with %d", k, ok, v)
			}
		}
		checkLong(t, &tab)
	})
}

// TestTableAgreesWithAMap runs random inserts, lookups and removals, with
// short and long keys and hashes crowded onto few home slots (so that runs
// are long and wrap around the table's end), against a Go map, and checks
// after every step that each key the map holds is found with its value and
// that the table holds nothing else.
func TestTableAgreesWithAMap(t *testing.T) {
	for _, crowd := range []uint64{0, 0xFFFF_0000_0000_0000} {
		r := rand.New(rand.NewPCG(7, crowd))
		// hash gives keys few distinct hashes when crowd is set: only the
		// top bits (the home slot) vary, over a few values.
		hash := func(k string) uint64 {
			h := uint64(len(k))*0x9E3779B97F4A7C15 ^ uint64(k[len(k)-1])<<32
			for i := 0; i < len(k); i++ {
				h = h*31 + uint64(k[i])
			}
			if crowd != 0 {
				h = (h % 5) << 61
			}
			return h | 1
		}
		tab := newTable()
		want := map[string]int64{}
		key := func() string {
			k := strconv.Itoa(r.IntN(300))
			if r.IntN(3) == 0 {
				k += strings.Repeat("x", inlineKey) // kept in table.long
			}
			return k
		}
		for step := range 20_000 {
			k := key()
			h := hash(k)
			i, ok := tab.find(h, k)
			if _, in := want[k]; ok != in {
				t.Fatalf("crowd %x, step %d: find(%q) = %v, want %v", crowd, step, k, ok, in)
			}
			switch {
			case !ok:
				i = tab.insert(h, k)
				tab.slots[i].val = int64(step)
				want[k] = int64(step)
			case r.IntN(2) == 0:
				tab.remove(i)
				delete(want, k)
			default:
				if got := tab.slots[i].val; got != want[k] {
					t.Fatalf("crowd %x, step %d: %q holds %d, want %d", crowd, step, k, got, want[k])
				}
			}
			if tab.n != len(want) {
				t.Fatalf("crowd %x, step %d: table holds %d, want %d", crowd, step, tab.n, len(want))
			}
			if step%500 == 0 {
				n := 0
				for j := range tab.slots {
					s := &tab.slots[j]
					if s.hash == 0 {
						continue
					}
					n++
					k := tab.keyOf(s)
					if v, in := want[k]; !in || v != s.val {
						t.Fatalf("crowd %x, step %d: slot %d holds %q = %d, want %v %d", crowd, step, j, k, s.val, in, v)
					}
				}
				if n != len(want) {
					t.Fatalf("crowd %x, step %d: %d slots taken, want %d", crowd, step, n, len(want))
				}
			}
		}
		checkLong(t, &tab)
	}
}

// TestLongKeysStayCompact churns through keys longer than a slot holds,
// of 25 to 300 bytes, with hashes spread or crowded onto five homes, and
// checks every key and value against a Go map and the long keys' buffer
// (checkLong) as it goes: removed keys' bytes must be given back, by
// compactLong, which moves the records of the keys kept and points their
// slots at their new places. It also fails if the buffer grows past what
// the keys held need by more than a quarter and compactAt.
func TestLongKeysStayCompact(t *testing.T) {
	for _, crowd := range []bool{false, true} {
		r := rand.New(rand.NewPCG(7, 8))
		tab := newTable()
		want := map[string]int64{}
		most := 0 // the most bytes of live records at any step
		for step := range 60_000 {
			n := r.IntN(2000)
			k := strconv.Itoa(n) + ":" + strings.Repeat("k", 24+n%277)
			h := fnv(k, crowd, 5)
			i, ok := tab.find(h, k)
			if _, in := want[k]; ok != in {
				t.Fatalf("crowd %v, step %d: find(%.10q…) = %v, want %v", crowd, step, k, ok, in)
			}
			drain := step >= 30_000 // the second half: the table empties
			switch {
			case !ok && drain && r.IntN(20) > 0:
			case !ok:
				if i = tab.insert(h, k); i < 0 {
					t.Fatalf("crowd %v, step %d: insert(%.10q…) refused", crowd, step, k)
				}
				tab.slots[i].val = int64(step)
				want[k] = int64(step)
			case drain || r.IntN(3) > 0:
				tab.remove(i)
				delete(want, k)
				tab.shrink()
			case tab.slots[i].val != want[k]:
				t.Fatalf("crowd %v, step %d: %.10q… holds %d, want %d", crowd, step, k, tab.slots[i].val, want[k])
			}
			live := len(tab.long.buf) - tab.long.dead
			most = max(most, live)
			if step%1000 == 0 {
				checkLong(t, &tab)
				for j := range tab.slots {
					if s := &tab.slots[j]; s.hash != 0 {
						if v, in := want[tab.keyOf(s)]; !in || v != s.val {
							t.Fatalf("crowd %v, step %d: slot %d holds %.10q… = %d, want %v %d", crowd, step, j, tab.keyOf(s), s.val, in, v)
						}
					}
				}
			}
			if limit := most + most/4 + compactAt; cap(tab.long.buf) > limit {
				t.Fatalf("crowd %v, step %d: %d bytes of buffer for at most %d of records, want at most %d", crowd, step, cap(tab.long.buf), most, limit)
			}
		}
		checkLong(t, &tab)
		if len(want) > 100 {
			t.Fatalf("crowd %v: %d keys left, want the table emptied to check the buffer shrinks", crowd, len(want))
		}
		if live := len(tab.long.buf) - tab.long.dead; len(tab.long.buf) > live+live/8+compactAt {
			t.Errorf("crowd %v: %d bytes of buffer left for %d of records", crowd, len(tab.long.buf), live)
		}
	}
}

// checkLong fails t unless tab.long holds exactly the records of the
// long keys in tab's slots, and removed ones within the bound remove
// keeps: under compactAt bytes, or under an eighth of the buffer.
func checkLong(t *testing.T, tab *table) {
	t.Helper()
	live := 0
	for i := range tab.slots {
		if s := &tab.slots[i]; s.hash != 0 && s.keyLen() > inlineKey {
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

// keyOf returns the key held in s (for the tests: the store needs only
// its length).
func (t *table) keyOf(s *slot) string {
	n := s.keyLen()
	if n <= inlineKey {
		return string(s.key[:n])
	}
	off := int(s.kref)*8 + 8
	return string(t.long.buf[off : off+n])
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
			tab := newTable()
			want := map[string]int64{}
			for i := range 5000 {
				k := strconv.Itoa(i)
				if i%4 == 0 {
					k += strings.Repeat("L", inlineKey)
				}
				tab.slots[tab.insert(hash(k), k)].val = int64(i)
				want[k] = int64(i)
			}
			for k := range want {
				if len(want) == keep {
					break
				}
				i, ok := tab.find(hash(k), k)
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
			if tab.n != keep {
				t.Fatalf("crowd %v: holds %d, want %d", crowd, tab.n, keep)
			}
			for k, v := range want {
				if i, ok := tab.find(hash(k), k); !ok || tab.slots[i].val != v {
					t.Fatalf("crowd %v, %d kept: %q found %v, want it with %d", crowd, keep, k, ok, v)
				}
			}
			for i := range 2000 {
				k := "again" + strconv.Itoa(i+r.IntN(3)*10000)
				if _, ok := tab.find(hash(k), k); !ok {
					tab.insert(hash(k), k)
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
	tab := newTable()
	held := map[string]bool{}
	hits := 0
	for step := range 20_000 {
		k := key()
		h := hash(k)
		i, ok := tab.find(h, k)
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
					i, _ := tab.find(hash(old), old)
					tab.remove(i)
					delete(held, old)
					break
				}
			}
			tab.insert(h, k)
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
// 24 bytes (hashInline) that differ only in their last 8 bytes.
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
	for n := keybuf.Max + 1; n <= inlineKey; n++ {
		for range 200 {
			k := make([]byte, n+1)
			for i := range k {
				k[i] = byte('a' + r.IntN(26))
			}
			h, _ := s.hash(string(k[:n]))
			if n < inlineKey {
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
