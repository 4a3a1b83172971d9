package server

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/descriptors"
)

// TestTopKKeepsSpaceSavingsGuarantees feeds a skewed stream of keys to a
// topK and checks what space saving promises against the exact counts:
// at most hotKeysCap keys kept; every kept count at least the key's true
// count and at most err above it; every key counted more often than the
// stream's length over hotKeysCap kept; and the least count at the root,
// where a new key looks for it.
func TestTopKKeepsSpaceSavingsGuarantees(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			zipf := rand.NewZipf(rng, 1.2, 1, 999)
			tk := newTopK()
			exact := map[string]uint64{}
			const n = 20000
			for range n {
				k := "k" + strconv.FormatUint(zipf.Uint64(), 10)
				w := uint64(1 + rng.IntN(3))
				tk.add(k, w, 0)
				exact[k] += w
			}
			var total uint64
			for _, c := range exact {
				total += c
			}
			if len(tk.counts) != hotKeysCap || len(tk.at) != hotKeysCap {
				t.Fatalf("kept %d counts indexed by %d keys, want %d", len(tk.counts), len(tk.at), hotKeysCap)
			}
			for i, c := range tk.counts {
				if tk.at[c.key] != i {
					t.Errorf("%s at %d, indexed at %d", c.key, i, tk.at[c.key])
				}
				if c.hits < exact[c.key] || c.hits-c.err > exact[c.key] {
					t.Errorf("%s: counted %d (overestimate at most %d), true count %d", c.key, c.hits, c.err, exact[c.key])
				}
				if c.hits < tk.counts[0].hits {
					t.Errorf("root holds %d hits, %s fewer: %d", tk.counts[0].hits, c.key, c.hits)
				}
			}
			heavy := 0
			for k, c := range exact {
				if c > total/hotKeysCap {
					heavy++
					if _, ok := tk.at[k]; !ok {
						t.Errorf("%s, counted %d of %d, was dropped", k, c, total)
					}
				}
			}
			if heavy == 0 {
				t.Fatal("no key above total/cap: the stream does not test the guarantee")
			}
		})
	}
}

// TestTopKCountsFewKeysExactly: below the cap, nothing is estimated.
func TestTopKCountsFewKeysExactly(t *testing.T) {
	tk := newTopK()
	for i := range 10 {
		for range i + 1 {
			tk.add("k"+strconv.Itoa(i), 8, 8)
		}
	}
	if len(tk.counts) != 10 {
		t.Fatalf("kept %d keys, want 10", len(tk.counts))
	}
	for _, c := range tk.counts {
		i, _ := strconv.Atoi(c.key[1:])
		if want := uint64(8 * (i + 1)); c.hits != want || c.over != want || c.err != 0 {
			t.Errorf("%s: %+v, want %d hits, %d over, no error", c.key, c, want, want)
		}
	}
}

// TestAHotKeyIsAtMostHotKeyMaxBytes sends descriptors with long values, as
// --max-descriptor-entry-bytes allows: the dashboard keeps each key's first
// hotKeyMaxBytes, cut before a character, and keys alike that far count
// as one.
func TestAHotKeyIsAtMostHotKeyMaxBytes(t *testing.T) {
	h := newHotKeys()
	clk := clock.New()
	rule := &descriptors.Rule{Domain: "edge"}
	long := strings.Repeat("é", 40<<10) // two bytes each: the cut must not split one
	for i := range 2 * hotKeysSample {
		h.add(clk, &check{rule: rule, hits: 1, entries: []descriptors.Entry{
			{Key: "path", Value: long + strconv.Itoa(i)},
			{Key: "user", Value: long},
		}}, false)
	}
	top := h.top(clk.Now())
	if len(top) != 1 {
		t.Fatalf("got %d keys, want the 2 sampled as one", len(top))
	}
	k := top[0].Key
	if len(k) > hotKeyMaxBytes+len("…") || !strings.HasPrefix(k, "edge path=éé") || !strings.HasSuffix(k, "…") || !utf8.ValidString(k) {
		t.Errorf("got a key of %d bytes, %.30q…%q, want at most %d valid bytes of its start and a final …", len(k), k, k[max(0, len(k)-8):], hotKeyMaxBytes+len("…"))
	}
	if top[0].Hits != 2*hotKeysSample {
		t.Errorf("got %d hits, want %d", top[0].Hits, 2*hotKeysSample)
	}
}
