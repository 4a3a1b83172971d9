// Package bench is the load generator behind `sluice bench`: it drives
// any envoy.service.ratelimit.v3 server (Sluice or envoyproxy/ratelimit)
// with ShouldRateLimit calls from concurrent callers and reports
// throughput and latency percentiles. By default the calls go through a
// minimal HTTP/2 client of its own (h2client.go) that costs the shared
// machine far less CPU than grpc-go's client.
package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Options configure a run of `sluice bench`, a closed-loop load generator
// for any envoy.service.ratelimit.v3 server (Sluice or
// envoyproxy/ratelimit). The zero value is not a valid run: get the
// defaults from ParseOptions.
type Options struct {
	Addr        string        // gRPC address of the server; default 127.0.0.1:8081
	Domain      string        // default "bench" (examples/config/bench.yaml)
	Descriptors int           // descriptors per request, keys k0..k{n-1}; default 1
	Concurrency int           // concurrent callers; default 16
	Conns       int           // gRPC connections shared by the callers; default 4
	Duration    time.Duration // measuring time; default 10s
	Warmup      time.Duration // unmeasured time first; default 1s
	Keys        int           // distinct values per key; default 10000
	// Client is "h2" (default): a minimal HTTP/2 client sending
	// pre-encoded requests, a few µs of CPU per call, so that the load
	// generator takes little from the server it measures on a shared
	// machine; or "grpc": grpc-go's client, about four times the cost.
	Client string
	// AllowUnlimited runs even when the server knows no limit for the
	// requests (see ErrNoLimit).
	AllowUnlimited bool
}

// Result is what a run measured.
type Result struct {
	Calls, Errors, OverLimit int64
	Elapsed                  time.Duration
	P50, P90, P99, Max       time.Duration
}

// CallsPerSecond is the throughput in ShouldRateLimit calls.
func (r Result) CallsPerSecond() float64 { return float64(r.Calls) / r.Elapsed.Seconds() }

// ParseOptions reads the bench command's flags; it writes usage and flag
// errors to out.
func ParseOptions(args []string, out io.Writer) (Options, error) {
	b := Options{Addr: "127.0.0.1:8081", Domain: "bench", Descriptors: 1, Concurrency: 16, Conns: 4, Duration: 10 * time.Second, Warmup: time.Second, Keys: 10000, Client: "h2"}
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
	fs.StringVar(&b.Client, "client", b.Client, "gRPC client: h2 (minimal, cheap) or grpc (grpc-go)")
	fs.BoolVar(&b.AllowUnlimited, "allow-unlimited", b.AllowUnlimited, "run even when the server knows no limit for the requests (every call a no-op)")
	if err := fs.Parse(args); err != nil {
		return b, err
	}
	var errs []error
	// Bounds keep a mistyped value from building gigabytes of requests.
	for _, f := range []struct {
		name    string
		v, most int
	}{
		{"descriptors", b.Descriptors, 1000},
		{"concurrency", b.Concurrency, 100_000},
		{"conns", b.Conns, 1000},
		{"keys", b.Keys, 1_000_000},
	} {
		if f.v < 1 || f.v > f.most {
			errs = append(errs, fmt.Errorf("--%s %d: must be between 1 and %d", f.name, f.v, f.most))
		}
	}
	if b.Client != "h2" && b.Client != "grpc" {
		errs = append(errs, fmt.Errorf("--client %q: must be h2 or grpc", b.Client))
	}
	if b.Duration <= 0 || b.Duration > time.Hour || b.Warmup < 0 || b.Warmup > time.Hour {
		errs = append(errs, errors.New("--duration must be in (0, 1h] and --warmup in [0, 1h]"))
	}
	return b, errors.Join(errs...)
}

// Run calls ShouldRateLimit from Concurrency callers for Warmup plus
// Duration and reports throughput and latency percentiles of the measured
// part. Runs may proceed concurrently; each opens its own connections.
func Run(ctx context.Context, b Options) (Result, error) {
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
	if err := probe(ctx, b, reqs[0]); err != nil {
		return Result{}, err
	}
	callers, closeAll, err := dialCallers(ctx, b, reqs)
	if err != nil {
		return Result{}, err
	}
	defer closeAll()
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
			call := callers[w%len(callers)]
			i := w * 7919
			for {
				t0 := time.Now()
				if t0.After(end) || ctx.Err() != nil {
					return
				}
				over, err := call(ctx, i%len(reqs))
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
				} else if over {
					me.ovr++
				}
			}
		}()
	}
	wg.Wait()
	var r Result
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
func (r Result) String() string {
	return fmt.Sprintf("calls=%d calls/s=%.0f p50=%s p90=%s p99=%s max=%s over_limit=%d errors=%d",
		r.Calls, r.CallsPerSecond(), r.P50.Round(time.Microsecond), r.P90.Round(time.Microsecond), r.P99.Round(time.Microsecond), r.Max.Round(time.Microsecond), r.OverLimit, r.Errors)
}

// caller makes the call with request i and tells whether the answer
// was OVER_LIMIT.
type caller func(ctx context.Context, i int) (over bool, err error)

// shouldRateLimitMethod is the RLS method's HTTP/2 path.
const shouldRateLimitMethod = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// ErrNoLimit reports a server that knows no limit for the requests a run
// would send: every call would be a no-op, and the figures meaningless.
var ErrNoLimit = errors.New("the server knows no limit for these requests")

// probe asks the server once about req, peeking (each descriptor's
// hits_addend 0, which counts nothing on Sluice and on
// envoyproxy/ratelimit), and refuses a server that answers with no limit
// on any descriptor (an unknown domain, or keys no rule matches), unless
// b.AllowUnlimited.
func probe(ctx context.Context, b Options, req *rlsv3.RateLimitRequest) error {
	req = proto.Clone(req).(*rlsv3.RateLimitRequest)
	for _, d := range req.Descriptors {
		d.HitsAddend = wrapperspb.UInt64(0)
	}
	cc, err := grpc.NewClient(b.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", b.Addr, err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, req)
	if err != nil {
		return fmt.Errorf("first call to %s: %w", b.Addr, err)
	}
	for _, st := range resp.GetStatuses() {
		if st.GetCurrentLimit() != nil {
			return nil
		}
	}
	if b.AllowUnlimited {
		return nil
	}
	return fmt.Errorf("%w: %s answered domain %q, %s with no limit, so every call would only measure a no-op; "+
		"serve a config that limits them (the quick start's examples/config has domain bench with keys k0..k4), "+
		"pass --domain, or --allow-unlimited to measure anyway", ErrNoLimit, b.Addr, b.Domain, describeRequest(req))
}

// describeRequest writes a request's descriptors as k=v pairs.
func describeRequest(req *rlsv3.RateLimitRequest) string {
	var parts []string
	for _, d := range req.GetDescriptors() {
		var kv []string
		for _, e := range d.GetEntries() {
			kv = append(kv, e.GetKey()+"="+e.GetValue())
		}
		parts = append(parts, strings.Join(kv, ","))
	}
	return "descriptors " + strings.Join(parts, " ")
}

// dialCallers opens b.Conns connections with b.Client's client and
// returns a caller per connection and a function closing them all.
func dialCallers(ctx context.Context, b Options, reqs []*rlsv3.RateLimitRequest) ([]caller, func(), error) {
	var closers []func() error
	closeAll := func() {
		for _, c := range closers {
			_ = c()
		}
	}
	callers := make([]caller, 0, b.Conns)
	if b.Client == "grpc" {
		for range b.Conns {
			cc, err := grpc.NewClient(b.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				closeAll()
				return nil, nil, err
			}
			closers = append(closers, cc.Close)
			client := rlsv3.NewRateLimitServiceClient(cc)
			callers = append(callers, func(ctx context.Context, i int) (bool, error) {
				resp, err := client.ShouldRateLimit(ctx, reqs[i])
				return resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT, err
			})
		}
		return callers, closeAll, nil
	}
	wire := make([][]byte, len(reqs))
	for i, r := range reqs {
		m, err := proto.Marshal(r)
		if err != nil {
			return nil, nil, err
		}
		wire[i] = m
	}
	for range b.Conns {
		c, err := dialH2(ctx, b.Addr)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("connect to %s: %w", b.Addr, err)
		}
		closers = append(closers, c.Close)
		callers = append(callers, func(ctx context.Context, i int) (bool, error) {
			resp, err := c.call(ctx, shouldRateLimitMethod, wire[i])
			if err != nil {
				return false, err
			}
			code, err := overallCode(resp)
			return code == rlsv3.RateLimitResponse_OVER_LIMIT, err
		})
	}
	return callers, closeAll, nil
}

// overallCode reads a RateLimitResponse's overall_code (field 1) without
// decoding the rest of the message.
func overallCode(b []byte) (rlsv3.RateLimitResponse_Code, error) {
	code := rlsv3.RateLimitResponse_UNKNOWN
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return code, fmt.Errorf("bad RateLimitResponse: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if num == 1 && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return code, fmt.Errorf("bad RateLimitResponse: %w", protowire.ParseError(n))
			}
			code = rlsv3.RateLimitResponse_Code(v)
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return code, fmt.Errorf("bad RateLimitResponse: %w", protowire.ParseError(n))
		}
		b = b[n:]
	}
	return code, nil
}
