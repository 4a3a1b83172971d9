package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// BenchOptions configure `sluice bench`, a closed-loop load generator for
// any envoy.service.ratelimit.v3 server (Sluice or envoyproxy/ratelimit).
type BenchOptions struct {
	Addr        string        // gRPC address of the server; default 127.0.0.1:8081
	Domain      string        // default "bench" (examples/bench/bench.yaml)
	Descriptors int           // descriptors per request, keys k0..k{n-1}; default 1
	Concurrency int           // concurrent callers; default 16
	Conns       int           // gRPC connections shared by the callers; default 4
	Duration    time.Duration // measuring time; default 10s
	Warmup      time.Duration // unmeasured time first; default 1s
	Keys        int           // distinct values per key; default 10000
}

// BenchResult is what a run measured.
type BenchResult struct {
	Calls, Errors, OverLimit int64
	Elapsed                  time.Duration
	P50, P90, P99, Max       time.Duration
}

// CallsPerSecond is the throughput in ShouldRateLimit calls.
func (r BenchResult) CallsPerSecond() float64 { return float64(r.Calls) / r.Elapsed.Seconds() }

// ParseBench reads the bench command's flags.
func ParseBench(args []string, out io.Writer) (BenchOptions, error) {
	b := BenchOptions{Addr: "127.0.0.1:8081", Domain: "bench", Descriptors: 1, Concurrency: 16, Conns: 4, Duration: 10 * time.Second, Warmup: time.Second, Keys: 10000}
	fs := flag.NewFlagSet("sluice bench", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&b.Addr, "addr", b.Addr, "gRPC address of the rate limit server")
	fs.StringVar(&b.Domain, "domain", b.Domain, "domain to ask about")
	fs.IntVar(&b.Descriptors, "descriptors", b.Descriptors, "descriptors per request (keys k0..kN-1)")
	fs.IntVar(&b.Concurrency, "concurrency", b.Concurrency, "concurrent callers")
	fs.IntVar(&b.Conns, "conns", b.Conns, "gRPC connections")
	fs.DurationVar(&b.Duration, "duration", b.Duration, "measuring time")
	fs.DurationVar(&b.Warmup, "warmup", b.Warmup, "unmeasured warm-up time")
	fs.IntVar(&b.Keys, "keys", b.Keys, "distinct values per descriptor key")
	if err := fs.Parse(args); err != nil {
		return b, err
	}
	var errs []error
	if b.Descriptors < 1 {
		errs = append(errs, errors.New("--descriptors must be at least 1"))
	}
	if b.Concurrency < 1 || b.Conns < 1 || b.Keys < 1 {
		errs = append(errs, errors.New("--concurrency, --conns and --keys must be at least 1"))
	}
	if b.Duration <= 0 || b.Duration > time.Hour || b.Warmup < 0 {
		errs = append(errs, errors.New("--duration must be in (0, 1h] and --warmup not negative"))
	}
	return b, errors.Join(errs...)
}

// RunBench calls ShouldRateLimit from Concurrency callers for Warmup plus
// Duration and reports throughput and latency percentiles of the measured
// part.
func RunBench(ctx context.Context, b BenchOptions) (BenchResult, error) {
	conns := make([]rlsv3.RateLimitServiceClient, b.Conns)
	for i := range conns {
		cc, err := grpc.NewClient(b.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return BenchResult{}, err
		}
		defer cc.Close()
		conns[i] = rlsv3.NewRateLimitServiceClient(cc)
	}
	// Requests are built up front so that the client's own work is small.
	reqs := make([]*rlsv3.RateLimitRequest, b.Keys)
	for i := range reqs {
		r := &rlsv3.RateLimitRequest{Domain: b.Domain}
		for k := range b.Descriptors {
			r.Descriptors = append(r.Descriptors, &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{
				{Key: "k" + strconv.Itoa(k), Value: "v" + strconv.Itoa(i)},
			}})
		}
		reqs[i] = r
	}
	start := time.Now()
	measureFrom := start.Add(b.Warmup)
	end := measureFrom.Add(b.Duration)
	type worker struct {
		lat              []time.Duration
		calls, errs, ovr int64
		firstErr         error
	}
	ws := make([]worker, b.Concurrency)
	var wg sync.WaitGroup
	for w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			me := &ws[w]
			client := conns[w%len(conns)]
			i := w * 7919
			for {
				t0 := time.Now()
				if t0.After(end) || ctx.Err() != nil {
					return
				}
				resp, err := client.ShouldRateLimit(ctx, reqs[i%len(reqs)])
				t1 := time.Now()
				i++
				if t0.Before(measureFrom) {
					continue
				}
				me.calls++
				me.lat = append(me.lat, t1.Sub(t0))
				if err != nil {
					me.errs++
					if me.firstErr == nil {
						me.firstErr = err
					}
				} else if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
					me.ovr++
				}
			}
		}()
	}
	wg.Wait()
	var r BenchResult
	var all []time.Duration
	var firstErr error
	for _, w := range ws {
		r.Calls += w.calls
		r.Errors += w.errs
		r.OverLimit += w.ovr
		all = append(all, w.lat...)
		if firstErr == nil {
			firstErr = w.firstErr
		}
	}
	r.Elapsed = b.Duration
	if len(all) == 0 {
		return r, errors.New("no calls completed")
	}
	slices.Sort(all)
	pct := func(p float64) time.Duration { return all[min(len(all)-1, int(p*float64(len(all))))] }
	r.P50, r.P90, r.P99, r.Max = pct(0.50), pct(0.90), pct(0.99), all[len(all)-1]
	if r.Errors > 0 {
		return r, fmt.Errorf("%d of %d calls failed, first: %w", r.Errors, r.Calls, firstErr)
	}
	return r, nil
}

// String formats the result as one line.
func (r BenchResult) String() string {
	return fmt.Sprintf("calls=%d calls/s=%.0f p50=%s p90=%s p99=%s max=%s over_limit=%d errors=%d",
		r.Calls, r.CallsPerSecond(), r.P50.Round(time.Microsecond), r.P90.Round(time.Microsecond), r.P99.Round(time.Microsecond), r.Max.Round(time.Microsecond), r.OverLimit, r.Errors)
}
