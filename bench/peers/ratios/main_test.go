package main

import (
	"strings"
	"testing"
)

// Two rounds in make bench-peers' format, trimmed to two key kinds: in
// the second, the peer "b" is the faster on the fresh keys in parallel
// on 2 cores; some figures are exactly 2x, one just under it.
const round1 = `cd bench/peers && go test ... | grep -E '^(Benchmark|memory per)'
memory per live bucket: sluice x: 128.1 B
memory per live bucket, 57-byte keys: sluice x: 256.1 B
memory per live bucket: a: 117.3 B
BenchmarkPeers
BenchmarkPeers/sluice_x/serial
BenchmarkPeers/sluice_x/serial         	 1000	       200.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkPeers/sluice_x/serial-2       	 1000	       250.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkPeers/sluice_x/parallel       	 1000	       210.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkPeers/sluice_x/parallel-2     	 1000	       100.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkPeers/sluice_x/serial-fresh-keys         	 1000	       150.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkPeers/sluice_x/parallel-fresh-keys-2     	 1000	       100.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkPeers/a/serial                	 1000	       300.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkPeers/a/serial-2              	 1000	       487.5 ns/op	       0 B/op	       0 allocs/op
BenchmarkPeers/a/parallel              	 1000	       420.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkPeers/a/parallel-2            	 1000	       150.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkPeers/a/serial-fresh-keys     	 1000	       450.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkPeers/a/parallel-fresh-keys-2 	 1000	       300.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkPeers/b/serial                	 1000	       900.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkPeers/b/parallel-fresh-keys-2 	 1000	       400.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkCachedBuckets/sluice_x        	 1000	       100.0 ns/op	       0 B/op	       0 allocs/op
`

const round2 = `memory per live bucket: sluice x: 128.2 B
BenchmarkPeers/sluice_x/serial         	 1000	       250.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkPeers/sluice_x/serial-2       	 1000	       200.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkPeers/sluice_x/parallel       	 1000	       200.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkPeers/sluice_x/parallel-2     	 1000	       100.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkPeers/sluice_x/serial-fresh-keys         	 1000	       100.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkPeers/sluice_x/parallel-fresh-keys-2     	 1000	       100.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkPeers/a/serial                	 1000	       400.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkPeers/a/serial-2              	 1000	       400.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkPeers/a/parallel              	 1000	       400.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkPeers/a/parallel-2            	 1000	       250.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkPeers/a/serial-fresh-keys     	 1000	       300.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkPeers/a/parallel-fresh-keys-2 	 1000	       400.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkPeers/b/parallel-fresh-keys-2 	 1000	       180.0 ns/op	       0 B/op	       0 allocs/op
`

func mustParse(t *testing.T, s string) round {
	t.Helper()
	rd, err := parse(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return rd
}

func TestParse(t *testing.T) {
	rd := mustParse(t, round1)
	for f, want := range map[figure]float64{
		{"sluice x", "", serial1}:              200,
		{"sluice x", "", serial2}:              250,
		{"sluice x", "", parallel1}:            210,
		{"sluice x", "", parallel2}:            100,
		{"sluice x", "-fresh-keys", serial1}:   150,
		{"sluice x", "-fresh-keys", parallel2}: 100,
		{"b", "-fresh-keys", parallel2}:        400,
		{"a", "", serial2}:                     487.5,
	} {
		if got, ok := rd.ns[f]; !ok || got != want {
			t.Errorf("%+v: %v (found %v), want %v", f, got, ok, want)
		}
	}
	if len(rd.ns) != 14 {
		t.Errorf("%d figures, want 14 (CachedBuckets is not BenchmarkPeers)", len(rd.ns))
	}
	if want := []string{"sluice x", "a", "b"}; !equal(rd.limiters, want) {
		t.Errorf("limiters %q, want %q", rd.limiters, want)
	}
	if want := []string{"", "-fresh-keys"}; !equal(rd.kinds, want) {
		t.Errorf("kinds %q, want %q", rd.kinds, want)
	}
	if got := rd.heap["sluice x, 57-byte keys"]; len(got) != 1 || got[0] != 256.1 {
		t.Errorf("heap with 57-byte keys: %v, want [256.1]", got)
	}
}

func equal(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

func TestParseRefuses(t *testing.T) {
	for name, in := range map[string]string{
		"no results": "memory per live bucket: a: 1.0 B\n",
		"-cpu 4":     "BenchmarkPeers/a/serial-4 \t 1000\t 200.0 ns/op\n",
	} {
		if _, err := parse(strings.NewReader(in)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestReport(t *testing.T) {
	var b strings.Builder
	report(&b, []round{mustParse(t, round1), mustParse(t, round2)})
	out := b.String()
	for _, want := range []string{
		// ns over the rounds; serial covers -cpu 1 and 2.
		"| sluice x | 200–250 | 200–210 | 100 |",
		"| a | 300–488 | 400–420 | 150–250 |",
		// Same keys: a's ns over Sluice's, round 1 then 2: serial 1.5,
		// 1.6; at -cpu 2 1.95, 2.0; parallel 2.0, 2.0; on 2 cores 1.5,
		// 2.5. b's 900 in round 1's serial is not the best.
		"| sluice x, same keys | 1.50–1.60x | 1.95–2.00x | 2.00x | 1.50–2.50x | 4 of 8 |",
		// Fresh keys on 2 cores: round 1's best is a (300), round 2's
		// is b (180): 3.0 and 1.8.
		"| sluice x, fresh keys | 3.00x |  |  | 1.80–3.00x | 3 of 4 |",
		"a in 11 of 12; b in 1 of 12;",
		"- sluice x: 128.1–128.2 B",
		"- sluice x, 57-byte keys: 256.1 B",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "| a, same keys") {
		t.Errorf("a peer's own row is compared:\n%s", out)
	}
}
