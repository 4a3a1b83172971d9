package memory

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

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
		if len(tab.long) > 300 {
			t.Errorf("crowd %x: %d long keys kept for at most 300 live ones: freed entries are not reused", crowd, len(tab.long))
		}
	}
}
