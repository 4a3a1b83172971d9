package gcra

import (
	"math"
	"testing"
	"time"
)

// TestFillsTooSlowlyIsTheDivision checks the multiplication Valid uses
// against the division it stands for, around the bound and at extremes.
func TestFillsTooSlowlyIsTheDivision(t *testing.T) {
	max := int64(MaxBurstOffset)
	intervals := []int64{1, 2, 3, 7, 1000, 999_999_937, int64(time.Hour), max / 3, max - 1, max, max + 1, math.MaxInt64}
	for _, e := range intervals {
		q := max / e
		for _, b := range []int64{1, 2, q - 1, q, q + 1, q + 2, math.MaxInt64 / 2, math.MaxInt64} {
			if b <= 0 {
				continue
			}
			want := b > q
			if got := fillsTooSlowly(b, time.Duration(e)); got != want {
				t.Errorf("burst %d, interval %d: got %v, want %v", b, e, got, want)
			}
		}
	}
}
