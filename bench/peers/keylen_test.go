package peers

import (
	"strconv"
	"strings"
	"testing"
)

// keyLengths are the key lengths BenchmarkKeyLengths runs: the account
// ids' keys as they are (3 to 9 bytes, "length 9"), then keys at each
// side of the memory store's ways of hashing and keeping a key: two
// words up to 16 bytes, three up to 24, maphash beyond; a GCRA bucket's
// slot up to 40, a wide bucket up to 88, the long keys' buffer beyond
// (80: where a slot and a line ended, before wide buckets).
var keyLengths = []int{9, 16, 17, 24, 25, 40, 41, 57, 80, 88, 89}

// padded returns keys each made n bytes long by 'x's before it: the
// same buckets, one key length. n is at least 9, the longest key.
func padded(n int) []string {
	k := make([]string, nKeys)
	for i, key := range keys {
		k[i] = strings.Repeat("x", n-len(key)) + key
	}
	return k
}

// BenchmarkKeyLengths times Sluice's limiter.Spend, serially, over
// 1,048,576 fresh keys of each length in keyLengths, their buckets made
// apart, as BenchmarkPeers' fresh keys made apart: what a key's length
// alone costs a decision.
func BenchmarkKeyLengths(b *testing.B) {
	var spend peer
	for _, p := range peers {
		if p.name == spendPath {
			spend = p
		}
	}
	if spend.new == nil {
		b.Fatal("no peer named " + spendPath)
	}
	for _, n := range keyLengths {
		made := keys
		if n > 9 {
			made = padded(n)
		}
		v := variant{"", made, apart, copied(made), true}
		b.Run("length-"+strconv.Itoa(n), func(b *testing.B) { serial(b, spend, v) })
	}
}

// TestPadded: every padded key is n bytes and ends with its account id's
// key, so that the buckets are the same in number at every length.
func TestPadded(t *testing.T) {
	for _, n := range []int{9, 24, 80} {
		p := padded(n)
		seen := make(map[string]bool, len(p))
		for i, k := range p {
			if len(k) != n || !strings.HasSuffix(k, keys[i]) {
				t.Fatalf("padded(%d)[%d] = %q, not %d bytes ending in %q", n, i, k, n, keys[i])
			}
			seen[k] = true
		}
		if len(seen) != nKeys {
			t.Fatalf("padded(%d) has %d distinct keys, want %d", n, len(seen), nKeys)
		}
	}
}
