package replay_test

import (
	"bytes"
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/descriptors"
	"github.com/sluice-rl/sluice/internal/replay"
)

// benchConfig has four rules: per client per second, per minute and per
// hour under three keys, and one shadow-mode rule.
const benchConfig = `domain: edge
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 20}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 600}
  - key: path
    value: /login
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 500}
    shadow_mode: true
`

// benchLog is n single-descriptor requests over 10,000 client values and
// the three other keys, one every microsecond of log time (a million
// requests a second of traffic).
func benchLog(n int) []byte {
	var b bytes.Buffer
	start := time.Date(2026, 11, 23, 15, 0, 0, 0, time.UTC)
	for i := range n {
		at := start.Add(time.Duration(i) * time.Microsecond).Format(time.RFC3339Nano)
		var key, value string
		switch i % 4 {
		case 0, 1:
			key, value = "client", fmt.Sprintf("10.0.%d.%d", i/7%40, i/3%250)
		case 2:
			key, value = "user", fmt.Sprintf("user-%d", i%1000)
		default:
			key, value = "path", []string{"/login", "/api", "/static"}[i%3]
		}
		fmt.Fprintf(&b, `{"time":%q,"domain":"edge","descriptors":[{"entries":[{"key":%q,"value":%q}]}]}`+"\n", at, key, value)
	}
	return b.Bytes()
}

func loadBenchConfig(tb testing.TB) *descriptors.Config {
	tb.Helper()
	d, err := descriptors.Parse("edge.yaml", []byte(benchConfig))
	if err != nil {
		tb.Fatal(err)
	}
	cfg, err := descriptors.New(d)
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}

// BenchmarkReplaySingleDescriptor replays a generated log of
// single-descriptor requests; req/s is lines of log per second of CPU.
// The target is 1,000,000 req/s on one core:
//
//	GOMAXPROCS=1 go test -run '^$' -bench Replay -benchmem ./internal/replay
func BenchmarkReplaySingleDescriptor(b *testing.B) {
	const lines = 200_000
	log := benchLog(lines)
	cfg := loadBenchConfig(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(log)) / lines)
	ctx := context.Background()
	var cpu time.Duration // the process's CPU time in Replay
	b.ResetTimer()
	for done := 0; done < b.N; done += lines {
		// Each pass of the log starts on a new replayer: the log does not
		// go back in time.
		b.StopTimer()
		chunk := log
		if left := b.N - done; left < lines {
			chunk = log[:lineEnd(log, left)]
		}
		r := replay.New(cfg, replay.Options{})
		before := cpuTime()
		b.StartTimer()
		if err := r.Replay(ctx, "bench.log", bytes.NewReader(chunk)); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		cpu += cpuTime() - before
		if s := r.Summary(); s.Lines != int64(bytes.Count(chunk, []byte{'\n'})) {
			b.Fatalf("replayed %d lines, want %d", s.Lines, bytes.Count(chunk, []byte{'\n'}))
		}
		r.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
	// CPU time, rather than wall time, for a figure that other processes
	// on the machine change less.
	b.ReportMetric(float64(b.N)/cpu.Seconds(), "req/cpu-s")
}

// cpuTime is the CPU time (user and system) the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// lineEnd is the offset just past the n-th line of log.
func lineEnd(log []byte, n int) int {
	off := 0
	for range n {
		off += bytes.IndexByte(log[off:], '\n') + 1
	}
	return off
}
