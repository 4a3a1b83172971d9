package server_test

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/descriptors"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/server"
	"github.com/sluice-rl/sluice/store/memory"
)

func TestAppendRequestLineIsWhatJSONTakes(t *testing.T) {
	at := time.Date(2026, 11, 23, 16, 4, 5, 250_000_000, time.FixedZone("CET", 3600))
	tests := []struct {
		name     string
		req      *rlsv3.RateLimitRequest
		wantLine string // "" when only the round trip is checked
	}{
		{name: "one descriptor is the replay's fast shape",
			req: &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
				{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "client", Value: "10.0.0.1"}}}}},
			wantLine: `{"time":"2026-11-23T15:04:05.25Z","domain":"edge","descriptors":[{"entries":[{"key":"client","value":"10.0.0.1"}]}]}` + "\n"},
		{name: "every field of a request",
			req: &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 3, Descriptors: []*rlcommon.RateLimitDescriptor{
				{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "a", Value: "1"}, {Key: "b"}},
					Limit:      &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 7, Unit: typev3.RateLimitUnit_HOUR, UnitMultiplier: wrapperspb.UInt32(2)},
					HitsAddend: wrapperspb.UInt64(0), IsNegativeHits: true},
				{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "c", Value: "3"}}},
			}},
			wantLine: `{"time":"2026-11-23T15:04:05.25Z","domain":"edge","descriptors":[{"entries":[{"key":"a","value":"1"},{"key":"b","value":""}],"limit":{"requests_per_unit":7,"unit":"HOUR","unit_multiplier":2},"hits_addend":0,"is_negative_hits":true},{"entries":[{"key":"c","value":"3"}]}],"hits_addend":3}` + "\n"},
		{name: "strings that need escapes",
			req: &rlsv3.RateLimitRequest{Domain: "e\"d\\g\ne", Descriptors: []*rlcommon.RateLimitDescriptor{
				{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "path", Value: "/é\t\x01😀"}}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(server.AppendRequestLine(nil, at, tt.req))
			if tt.wantLine != "" && got != tt.wantLine {
				t.Errorf("got  %s want %s", got, tt.wantLine)
			}
			if !strings.HasSuffix(got, "\n") || strings.Count(got, "\n") != 1 {
				t.Fatalf("got %q, want one line", got)
			}
			var back rlsv3.RateLimitRequest
			if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(got), &back); err != nil {
				t.Fatalf("/json cannot read %s: %v", got, err)
			}
			if !proto.Equal(&back, tt.req) {
				t.Errorf("got %v back, want %v", &back, tt.req)
			}
		})
	}
}

// logRLS is an RLS over the memory store whose decisions go to l, with a
// fake clock at start.
func logRLS(t *testing.T, l *server.RequestLog, clk clock.Clock) *server.RLS {
	t.Helper()
	d, err := descriptors.Parse("edge.yaml", []byte("domain: edge\ndescriptors:\n  - key: client\n    rate_limit: {unit: second, requests_per_unit: 100}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := descriptors.New(d)
	if err != nil {
		t.Fatal(err)
	}
	rls := server.NewRLS(server.RLSOptions{Limiter: limiter.New(memory.New(memory.Options{}), clk), Clock: clk, RequestLog: l.Record})
	rls.SetConfig(cfg)
	return rls
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

func clientRequest(value string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "client", Value: value}}}}}
}

func TestRequestLogWritesEveryCountedRequestAtItsDecisionTime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "requests.log")
	reg := prometheus.NewRegistry()
	l, err := server.OpenRequestLog(server.RequestLogOptions{Path: path, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 11, 23, 15, 0, 0, 0, time.UTC))
	rls := logRLS(t, l, clk)
	ctx := context.Background()
	for range 3 {
		if _, err := rls.ShouldRateLimit(ctx, clientRequest("a")); err != nil {
			t.Fatal(err)
		}
		clk.Add(1500 * time.Millisecond)
	}
	// A refused request reaches no decision and is not logged.
	if _, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge"}); err == nil {
		t.Fatal("got no error for a request without descriptors")
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`{"time":"2026-11-23T15:00:00Z","domain":"edge","descriptors":[{"entries":[{"key":"client","value":"a"}]}]}`,
		`{"time":"2026-11-23T15:00:01.5Z","domain":"edge","descriptors":[{"entries":[{"key":"client","value":"a"}]}]}`,
		`{"time":"2026-11-23T15:00:03Z","domain":"edge","descriptors":[{"entries":[{"key":"client","value":"a"}]}]}`,
	}
	got := readLines(t, path)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got lines\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := counterValue(t, reg, "sluice_request_log_lines_total"); n != 3 {
		t.Errorf("got sluice_request_log_lines_total %v, want 3", n)
	}
	if l.Written() != 3 || l.Dropped() != 0 {
		t.Errorf("got %d written, %d dropped; want 3, 0", l.Written(), l.Dropped())
	}
}

// counterValue is the value of the named counter on reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func TestRequestLogSamples(t *testing.T) {
	tests := []struct {
		name     string
		sample   float64
		min, max int // lines of 2000
	}{
		{name: "a sample of 1 logs every request", sample: 1, min: 2000, max: 2000},
		{name: "a sample of 0.25 logs about a quarter", sample: 0.25, min: 400, max: 600},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "requests.log")
			l, err := server.OpenRequestLog(server.RequestLogOptions{Path: path, Sample: tt.sample, Buffer: 4000})
			if err != nil {
				t.Fatal(err)
			}
			at := time.Date(2026, 11, 23, 15, 0, 0, 0, time.UTC)
			for range 2000 {
				l.Record(at, clientRequest("a"))
			}
			if err := l.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := len(readLines(t, path)); n < tt.min || n > tt.max {
				t.Errorf("got %d lines, want %d to %d", n, tt.min, tt.max)
			}
		})
	}
}

// stuckLog opens a request log with o on a FIFO nobody reads, which
// blocks the writer at its first flush; it is closed when the test ends.
func stuckLog(t *testing.T, o server.RequestLogOptions) *server.RequestLog {
	t.Helper()
	o.Path = filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(o.Path, 0o600); err != nil {
		t.Skipf("no FIFO: %v", err)
	}
	// Opening a FIFO for writing waits for a reader: hold one open, and
	// read nothing.
	rd, err := os.OpenFile(o.Path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	l, err := server.OpenRequestLog(o)
	if err != nil {
		rd.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rd.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_ = l.Close(ctx) // the writer may be stuck; Close gives up with ctx
	})
	return l
}

func TestRequestLogDropsRatherThanBlocks(t *testing.T) {
	// The buffer of 8 lines fills and every further line is dropped at
	// once.
	l := stuckLog(t, server.RequestLogOptions{Buffer: 8})
	at := time.Date(2026, 11, 23, 15, 0, 0, 0, time.UTC)
	big := clientRequest(strings.Repeat("x", 1<<16)) // each line alone fills the pipe
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 1000 {
			l.Record(at, big)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Record blocked behind a stuck writer")
	}
	if l.Dropped() < 900 {
		t.Errorf("got %d dropped, want at least 900 of 1000", l.Dropped())
	}
}

// The lines waiting for a stuck writer are bounded in bytes too: a line
// holds its request, up to gRPC's 4 MiB, so 8,192 of them could hold
// 32 GiB.
func TestRequestLogBoundsTheBytesWaiting(t *testing.T) {
	l := stuckLog(t, server.RequestLogOptions{BufferBytes: 1 << 20})
	at := time.Date(2026, 11, 23, 15, 0, 0, 0, time.UTC)
	big := clientRequest(strings.Repeat("x", 1<<16))
	for range 100 {
		l.Record(at, big)
	}
	// 1 MiB holds 15 lines of just over 64 KiB; the writer holds one
	// more, stuck in its write.
	if got := l.Dropped(); got < 100-17 {
		t.Errorf("got %d of 100 dropped, want at least 83 with 1 MiB of lines waiting", got)
	}
}

func TestOpenRequestLogRefusesBadOptions(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		o       server.RequestLogOptions
		wantErr string
	}{
		{name: "no file", o: server.RequestLogOptions{}, wantErr: "no file given"},
		{name: "a sample above 1", o: server.RequestLogOptions{Path: filepath.Join(dir, "a.log"), Sample: 1.5}, wantErr: "sample 1.5 is outside (0, 1]"},
		{name: "a negative sample", o: server.RequestLogOptions{Path: filepath.Join(dir, "a.log"), Sample: -0.1}, wantErr: "sample -0.1 is outside (0, 1]"},
		{name: "a file in a missing directory", o: server.RequestLogOptions{Path: filepath.Join(dir, "nope", "a.log")}, wantErr: "no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := server.OpenRequestLog(tt.o)
			if err == nil {
				_ = l.Close(context.Background())
				t.Fatalf("got no error, want %q", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("got %q, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

// BenchmarkRequestLogRecord is the cost a logged request adds to its call:
// encoding the line and handing it to the writer, which writes to a file.
func BenchmarkRequestLogRecord(b *testing.B) {
	l, err := server.OpenRequestLog(server.RequestLogOptions{Path: filepath.Join(b.TempDir(), "requests.log")})
	if err != nil {
		b.Fatal(err)
	}
	req := clientRequest("10.0.0.1")
	at := time.Date(2026, 11, 23, 15, 0, 0, 123456789, time.UTC)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Record(at, req)
		}
	})
	b.StopTimer()
	if err := l.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(l.Dropped())/float64(b.N), "dropped/op")
}
