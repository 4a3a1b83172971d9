package server

import (
	"strconv"
	"testing"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/descriptors"
)

// BenchmarkHotKeysAdd is the dashboard's count of one descriptor on the
// serving path, one in hotKeysSample taking the lock: over 1,000
// distinct keys, more than the hotKeysCap kept (as per-address limits
// give), and over 10, all kept.
func BenchmarkHotKeysAdd(b *testing.B) {
	for _, n := range []int{1000, 10} {
		b.Run(strconv.Itoa(n)+"-keys", func(b *testing.B) {
			h := newHotKeys()
			clk := clock.New()
			rule := &descriptors.Rule{Domain: "edge"}
			checks := make([]check, n)
			for i := range checks {
				checks[i] = check{rule: rule, hits: 1, entries: []descriptors.Entry{{Key: "remote_address", Value: "10.0.0." + strconv.Itoa(i)}}}
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				h.add(clk, &checks[i%len(checks)], false)
			}
		})
	}
}
