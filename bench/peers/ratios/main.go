// Command ratios reads the output of make bench-peers, one file per
// round, and prints what BENCHMARKS.md reports of it: each limiter's ns
// per decision over the rounds, and, round by round, how many times
// faster than the best peer each of Sluice's rows was, with how many of
// those figures reach the 2x.
//
//	for r in 1 2 3; do make bench-peers > /tmp/peers-r$r.log; done
//	cd bench/peers && go run ./ratios /tmp/peers-r*.log
//
// A figure is one round's: the fastest peer's ns per decision over
// Sluice's, on the same row (the key kind) and column (serial or
// parallel, at -cpu 1 or 2). A peer is any limiter whose name does not
// begin with "sluice".
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: ratios ROUND.log...  (each the output of one make bench-peers)")
		os.Exit(2)
	}
	var rounds []round
	for _, path := range os.Args[1:] {
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "ratios:", err)
			os.Exit(1)
		}
		r, err := parse(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "ratios: %s: %v\n", path, err)
			os.Exit(1)
		}
		rounds = append(rounds, r)
	}
	report(os.Stdout, rounds)
}

// column is how a row ran: serial or parallel, at -cpu 1 or 2.
type column int

const (
	serial1 column = iota
	serial2
	parallel1
	parallel2
	columns
)

var columnNames = [columns]string{"serial", "serial at -cpu 2", "parallel, 1 core", "parallel, 2 cores"}

// nsColumn is the column of the ns table each column's figures go to:
// serial covers -cpu 1 and 2 alike (one goroutine either way).
var nsColumn = [columns]int{serial1: 0, serial2: 0, parallel1: 1, parallel2: 2}

// figure names one measurement of a round: a limiter's row and column.
type figure struct {
	limiter, kind string
	col           column
}

// round is one make bench-peers run: ns per decision of each figure, the
// heap per live bucket of each limiter (by kind of key), and the order
// limiters and kinds first appear in.
type round struct {
	ns       map[figure]float64
	heap     map[string][]float64 // "limiter" or "limiter, 57-byte keys"
	limiters []string
	kinds    []string
	heaps    []string
}

// peersLine matches a BenchmarkPeers result: the limiter, serial or
// parallel, the key kind's suffix, GOMAXPROCS when more than 1, and ns/op.
var peersLine = regexp.MustCompile(`^BenchmarkPeers/(.+)/(serial|parallel)(.*?)(?:-(\d+))?\s+\d+\s+([0-9.]+) ns/op`)

// heapLine matches the heap per live bucket TestMemoryPerBucket prints.
var heapLine = regexp.MustCompile(`^memory per live bucket(, [^:]+)?: (.+): ([0-9.]+) B$`)

// parse reads one round. A line of neither kind is skipped; a round with
// no BenchmarkPeers result is an error.
func parse(r io.Reader) (round, error) {
	rd := round{ns: map[figure]float64{}, heap: map[string][]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if m := peersLine.FindStringSubmatch(line); m != nil {
			limiter := strings.ReplaceAll(m[1], "_", " ")
			kind := m[3]
			col := serial1
			if m[2] == "parallel" {
				col = parallel1
			}
			switch m[4] {
			case "", "1":
			case "2":
				col++
			default:
				return round{}, fmt.Errorf("line %d: GOMAXPROCS %s (make bench-peers runs -cpu 1,2)", n, m[4])
			}
			v, err := strconv.ParseFloat(m[5], 64)
			if err != nil {
				return round{}, fmt.Errorf("line %d: ns/op %q: %v", n, m[5], err)
			}
			if !slices.Contains(rd.limiters, limiter) {
				rd.limiters = append(rd.limiters, limiter)
			}
			if !slices.Contains(rd.kinds, kind) {
				rd.kinds = append(rd.kinds, kind)
			}
			rd.ns[figure{limiter, kind, col}] = v
			continue
		}
		if m := heapLine.FindStringSubmatch(line); m != nil {
			name := m[2] + m[1]
			v, err := strconv.ParseFloat(m[3], 64)
			if err != nil {
				return round{}, fmt.Errorf("line %d: bytes %q: %v", n, m[3], err)
			}
			if !slices.Contains(rd.heaps, name) {
				rd.heaps = append(rd.heaps, name)
			}
			rd.heap[name] = append(rd.heap[name], v)
		}
	}
	if err := sc.Err(); err != nil {
		return round{}, err
	}
	if len(rd.ns) == 0 {
		return round{}, fmt.Errorf("no BenchmarkPeers results")
	}
	return rd, nil
}

// isPeer reports whether limiter is a peer, not Sluice.
func isPeer(limiter string) bool { return !strings.HasPrefix(limiter, "sluice") }

// kindName is how a key kind's suffix reads: "same keys" for none.
func kindName(kind string) string {
	if kind == "" {
		return "same keys"
	}
	return strings.ReplaceAll(strings.TrimPrefix(kind, "-"), "-", " ")
}

// best returns the fastest peer of a round on a row and column, and its
// ns per decision; ok is false when no peer ran it.
func (rd round) best(kind string, col column) (peer string, ns float64, ok bool) {
	for _, l := range rd.limiters {
		if v, found := rd.ns[figure{l, kind, col}]; found && isPeer(l) && (!ok || v < ns) {
			peer, ns, ok = l, v, true
		}
	}
	return peer, ns, ok
}

// span is the least and greatest of a set of values.
type span struct {
	lo, hi float64
	n      int
}

func (s *span) add(v float64) {
	if s.n == 0 || v < s.lo {
		s.lo = v
	}
	if s.n == 0 || v > s.hi {
		s.hi = v
	}
	s.n++
}

func (s span) format(unit string, prec int) string {
	if s.n == 0 {
		return ""
	}
	lo, hi := strconv.FormatFloat(s.lo, 'f', prec, 64), strconv.FormatFloat(s.hi, 'f', prec, 64)
	if lo == hi {
		return lo + unit
	}
	return lo + "–" + hi + unit
}

// union returns the names of every round, in the order they first appear.
func union(rounds []round, names func(round) []string) []string {
	var all []string
	for _, rd := range rounds {
		for _, n := range names(rd) {
			if !slices.Contains(all, n) {
				all = append(all, n)
			}
		}
	}
	return all
}

// report writes the tables of rounds to w.
func report(w io.Writer, rounds []round) {
	limiters := union(rounds, func(rd round) []string { return rd.limiters })
	kinds := union(rounds, func(rd round) []string { return rd.kinds })

	fmt.Fprintf(w, "%d round(s). ns per decision over the rounds (serial: at -cpu 1 and -cpu 2):\n", len(rounds))
	for _, kind := range kinds {
		fmt.Fprintf(w, "\n%s\n\n| limiter | serial | parallel, 1 core | parallel, 2 cores |\n|---|---|---|---|\n", kindName(kind))
		for _, l := range limiters {
			var cells [3]span
			for _, rd := range rounds {
				for col := range columns {
					if v, ok := rd.ns[figure{l, kind, col}]; ok {
						cells[nsColumn[col]].add(v)
					}
				}
			}
			if cells[0].n+cells[1].n+cells[2].n == 0 {
				continue
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s |\n", l, cells[0].format("", 0), cells[1].format("", 0), cells[2].format("", 0))
		}
	}

	fmt.Fprintf(w, "\nRound by round, the best peer's ns over Sluice's (2x reached: figures at 2x or more, unrounded):\n\n")
	fmt.Fprintf(w, "| | %s | 2x reached |\n|---|---|---|---|---|---|\n", strings.Join(columnNames[:], " | "))
	bestOf := map[string]int{}
	figures := 0
	for _, l := range limiters {
		if isPeer(l) {
			continue
		}
		for _, kind := range kinds {
			var cells [columns]span
			reached, n := 0, 0
			for _, rd := range rounds {
				for col := range columns {
					v, ok := rd.ns[figure{l, kind, col}]
					peer, p, pok := rd.best(kind, col)
					if !ok || !pok {
						continue
					}
					x := p / v
					cells[col].add(x)
					n++
					if x >= 2 {
						reached++
					}
					bestOf[peer]++
					figures++
				}
			}
			if n == 0 {
				continue
			}
			fmt.Fprintf(w, "| %s, %s |", l, kindName(kind))
			for _, c := range cells {
				fmt.Fprintf(w, " %s |", c.format("x", 2))
			}
			fmt.Fprintf(w, " %d of %d |\n", reached, n)
		}
	}
	peers := make([]string, 0, len(bestOf))
	for p := range bestOf {
		peers = append(peers, p)
	}
	slices.Sort(peers)
	fmt.Fprintf(w, "\nThe best peer, figure by figure:")
	for _, p := range peers {
		fmt.Fprintf(w, " %s in %d of %d;", p, bestOf[p], figures)
	}
	fmt.Fprintln(w)

	heaps := union(rounds, func(rd round) []string { return rd.heaps })
	if len(heaps) > 0 {
		fmt.Fprintf(w, "\nHeap per live bucket over the rounds:\n\n")
		for _, h := range heaps {
			var s span
			for _, rd := range rounds {
				for _, v := range rd.heap[h] {
					s.add(v)
				}
			}
			fmt.Fprintf(w, "- %s: %s\n", h, s.format(" B", 1))
		}
	}
}
