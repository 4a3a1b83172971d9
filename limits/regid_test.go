package limits

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// TestAppendRegIDAgreesWithParsing checks appendRegID's copy of a plain
// id against parsing it and formatting the number, for ids around every
// edge: empty, leading zeros, 19 and 20 digits, the largest 64-bit number
// and one past it, and other bytes among the digits.
func TestAppendRegIDAgreesWithParsing(t *testing.T) {
	ids := []string{"", "0", "00", "007", "7", "1234567890123456789", "9999999999999999999",
		"18446744073709551615", "18446744073709551616", "99999999999999999999", "012345678901234567890",
		"12a", "-1", "+1", " 1", "1 ", "١٢"}
	r := rand.New(rand.NewPCG(5, 6))
	for range 20000 {
		var b strings.Builder
		for range r.IntN(23) {
			if r.IntN(30) == 0 {
				b.WriteByte(byte(r.IntN(256)))
			} else {
				b.WriteByte(byte('0' + r.IntN(10)))
			}
		}
		ids = append(ids, b.String())
	}
	for _, id := range ids {
		want, wantRule := []byte("p:"), ""
		if n, rule := naturalRegID(id); rule != "" {
			wantRule = rule
		} else {
			want = strconv.AppendUint(want, n, 10)
		}
		got, rule := appendRegID([]byte("p:"), id)
		if string(got) != string(want) || rule != wantRule {
			t.Fatalf("id %q: got %q, %q; want %q, %q", id, got, rule, want, wantRule)
		}
	}
}
