package descriptors

import (
	"fmt"
	"strings"
	"testing"
)

// thousandRules is a domain of 1,000 rules three levels deep: 10 services,
// each with 10 users and a wildcard user, each with 10 methods (and a
// keyed default), plus a keyed default per level.
func thousandRules() string {
	var b strings.Builder
	b.WriteString("domain: bench\ndescriptors:\n")
	for s := 0; s < 10; s++ {
		fmt.Fprintf(&b, "  - key: service\n    value: svc-%d\n    descriptors:\n", s)
		for u := 0; u < 10; u++ {
			fmt.Fprintf(&b, "      - key: user\n        value: user-%d\n        descriptors:\n", u)
			for m := 0; m < 9; m++ {
				fmt.Fprintf(&b, "          - key: method\n            value: M%d\n            rate_limit: {unit: second, requests_per_unit: %d}\n", m, 10+m)
			}
			b.WriteString("          - key: method\n            rate_limit: {unit: second, requests_per_unit: 5}\n")
		}
	}
	return b.String()
}

func BenchmarkMatch(b *testing.B) {
	c := configOf(b, thousandRules(), shareYAML)
	if n := len(c.Domain("bench").Rules()); n != 1000 {
		b.Fatalf("got %d rules, want 1000", n)
	}
	cases := []struct {
		name    string
		domain  string
		entries []Entry
	}{
		{name: "exact", domain: "bench", entries: entries("service", "svc-7", "user", "user-3", "method", "M8")},
		{name: "keyed fallback", domain: "bench", entries: entries("service", "svc-7", "user", "user-3", "method", "DELETE")},
		{name: "no match", domain: "bench", entries: entries("service", "svc-7", "user", "nobody", "method", "M1")},
		{name: "wildcard", domain: "share", entries: entries("org", "eu-west-prod", "user", "ann")},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					c.Match(tc.domain, tc.entries)
				}
			})
		})
	}
	b.Run("match and append cache key", func(b *testing.B) {
		es := cases[0].entries
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			buf := make([]byte, 0, 128)
			for pb.Next() {
				buf = c.Match("bench", es).AppendCacheKey(buf[:0], es)
			}
		})
	})
}

func TestMatchDoesNotAllocate(t *testing.T) {
	c := configOf(t, thousandRules(), shareYAML)
	es := entries("service", "svc-7", "user", "user-3", "method", "M8")
	wild := entries("org", "eu-west-prod", "user", "ann")
	buf := make([]byte, 0, 128)
	allocs := testing.AllocsPerRun(100, func() {
		if c.Match("bench", es) == nil || c.Match("share", wild) == nil {
			t.Fatal("no match")
		}
		buf = c.Match("bench", es).AppendCacheKey(buf[:0], es)
	})
	if allocs != 0 {
		t.Errorf("got %v allocations per match, want 0", allocs)
	}
}
