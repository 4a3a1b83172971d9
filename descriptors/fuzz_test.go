package descriptors

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseStopsExponentialAliases(t *testing.T) {
	t.Parallel()
	// Each list holds two descriptors nesting the previous list, so the
	// last one expands to 2^30 descriptors while the file stays small.
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n  - key: l0\n    descriptors: &l0\n      - {key: a}\n      - {key: b}\n")
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&b, "  - key: l%d\n    descriptors: &l%d\n      - {key: a, descriptors: *l%d}\n      - {key: b, descriptors: *l%d}\n", i, i, i-1, i-1)
	}
	_, err := Parse("bomb.yaml", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "aliases expand to too many nodes") {
		t.Errorf("got %v, want an error about aliases", err)
	}
}

func FuzzParse(f *testing.F) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("domain: d\ndescriptors: &l\n  - key: a\n    descriptors: *l\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - {key: k, value: 'a*b*', rate_limit: {unit: second, requests_per_unit: 1}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Parse("fuzz.yaml", data)
		if err != nil {
			if d != nil {
				t.Fatalf("Parse returned a domain with error %v", err)
			}
			if strings.TrimSpace(err.Error()) == "" {
				t.Fatal("Parse returned an empty error")
			}
			return
		}
		// A valid domain must build, list and match without panicking.
		c, err := New(d)
		if err != nil {
			t.Fatalf("New of one domain: %v", err)
		}
		_ = c.String()
		for _, r := range c.Rules() {
			es := make([]Entry, r.Depth)
			for i := range es {
				es[i] = Entry{Key: r.levels[i].key, Value: "v"}
			}
			if m := c.Match(d.Name(), es); m != nil {
				_ = m.CacheKey(es)
				_ = m.MetricKey(es)
			}
		}
	})
}
