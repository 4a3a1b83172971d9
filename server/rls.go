// Package server holds Sluice's network front doors: the Envoy rate limit
// service (envoy.service.ratelimit.v3) over gRPC and HTTP/JSON, the
// key-value limits API, health checks, and the debug endpoints.
//
// Handlers hold no state of their own beyond an atomically swapped
// configuration snapshot and metrics; all counting is done by the
// limiter's store. Everything here is safe for concurrent use.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/descriptors"
	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/window"
)

// RLSOptions configure an RLS. The zero value of each field gives the
// default stated beside it.
type RLSOptions struct {
	// Limiter supplies the store and the clock. Required.
	Limiter *limiter.Limiter
	// Metrics receives per-rule statistics; nil records nothing.
	Metrics *Metrics
	// NearLimitRatio is the fraction of a limit past which hits count as
	// near the limit in metrics. Default 0.8; range (0, 1].
	NearLimitRatio float64
	// GlobalShadowMode answers OK to every request while still counting.
	GlobalShadowMode bool
	// GlobalQuotaMode treats every rule as quota_mode: a descriptor over
	// its limit answers OK (keeping current_limit and limit_remaining) and
	// never makes the overall code OVER_LIMIT.
	GlobalQuotaMode bool
	// DynamicMetadata adds envoyproxy/ratelimit's response dynamic
	// metadata: the domain, each descriptor's entries ("key=value"),
	// limit override and hits_addend, the request's hits_addend, the
	// indexes of quota-mode descriptors over their limit
	// (quotaModeViolations), and whether any matched rule is in quota mode
	// (quotaModeEnabled).
	DynamicMetadata bool
	// ResponseHeaders adds RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset headers for the descriptor closest to its limit.
	ResponseHeaders bool
	// Header names; defaults RateLimit-Limit, RateLimit-Remaining,
	// RateLimit-Reset.
	LimitHeader, RemainingHeader, ResetHeader string
	// Logger for request errors; default slog.Default().
	Logger *slog.Logger
}

// RLS answers envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
// as envoyproxy/ratelimit does. Create it with NewRLS and give it a
// configuration with SetConfig; until then every domain is unknown.
type RLS struct {
	rlsv3.UnimplementedRateLimitServiceServer

	opts   RLSOptions
	config atomic.Pointer[descriptors.Config]
}

// NewRLS returns an RLS with no configuration.
func NewRLS(o RLSOptions) *RLS {
	if o.NearLimitRatio <= 0 || o.NearLimitRatio > 1 {
		o.NearLimitRatio = 0.8
	}
	if o.LimitHeader == "" {
		o.LimitHeader = "RateLimit-Limit"
	}
	if o.RemainingHeader == "" {
		o.RemainingHeader = "RateLimit-Remaining"
	}
	if o.ResetHeader == "" {
		o.ResetHeader = "RateLimit-Reset"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &RLS{opts: o}
}

// SetConfig swaps in a new configuration snapshot.
func (s *RLS) SetConfig(c *descriptors.Config) { s.config.Store(c) }

// Config returns the current configuration snapshot, or nil.
func (s *RLS) Config() *descriptors.Config { return s.config.Load() }

// ErrInvalidRequest reports a request the service refuses: an empty domain,
// no descriptors, an invalid per-descriptor limit, or a hits_addend over
// the largest int64.
var ErrInvalidRequest = errors.New("invalid rate limit request")

// maxUint32 is what envoyproxy/ratelimit reports as the remaining count of
// an unlimited descriptor.
const maxUint32 = math.MaxUint32

// check is one descriptor of a request on its way through the service.
type check struct {
	entries   []descriptors.Entry
	rule      *descriptors.Rule // nil: no limit (or replaced)
	override  *rlcommon.RateLimitDescriptor_RateLimitOverride
	unlimited bool
	hits      uint64
	negative  bool

	// what is counted
	rpu        uint32
	unit       window.Unit
	multiplier uint32
	burst      uint32
	name       string
	shadow     bool
	quota      bool
	statsKey   string

	op             int  // index into the store batch, or -1
	quotaViolation bool // over the limit, answered OK by quota mode
}

// ShouldRateLimit implements RateLimitServiceServer.
func (s *RLS) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	clk := s.opts.Limiter.Clock()
	start := clk.Now()
	resp, err := s.shouldRateLimit(ctx, req)
	if err != nil {
		err = grpcError(err)
		if status.Code(err) == codes.Internal {
			s.opts.Logger.Error("rate limit request failed", "domain", req.GetDomain(), "err", err)
		}
	}
	if m := s.opts.Metrics; m != nil {
		m.observeRequest(clk.Now().Sub(start), status.Code(err))
	}
	return resp, err
}

// grpcError maps an error to its gRPC status: the one place where errors
// become codes.
func grpcError(err error) error {
	switch {
	case errors.Is(err, ErrInvalidRequest), errors.Is(err, limiter.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

func (s *RLS) shouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, fmt.Errorf("%w: rate limit domain must not be empty", ErrInvalidRequest)
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, fmt.Errorf("%w: rate limit descriptor list must not be empty", ErrInvalidRequest)
	}
	cfg := s.config.Load()
	domain := req.GetDomain()
	known := cfg != nil && cfg.Domain(domain) != nil
	if !known && s.opts.Metrics != nil {
		s.opts.Metrics.domainNotFound.Inc()
	}

	sc := scratchPool.Get().(*scratch)
	defer sc.release()
	sc.checks = sized(sc.checks, len(req.Descriptors))
	checks := sc.checks
	replaced := map[string]bool(nil)
	requestHits := uint64(max(1, req.GetHitsAddend()))
	n := 0
	for _, d := range req.Descriptors {
		n += len(d.GetEntries())
	}
	sc.entries = sized(sc.entries, n)
	entries := sc.entries // one array for every descriptor's entries
	for i, d := range req.Descriptors {
		c := &checks[i]
		c.op = -1
		c.entries, entries = entries[:len(d.GetEntries()):len(d.GetEntries())], entries[len(d.GetEntries()):]
		for j, e := range d.GetEntries() {
			c.entries[j] = descriptors.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
		c.hits = requestHits
		if h := d.GetHitsAddend(); h != nil {
			c.hits = h.GetValue() // an explicit 0 peeks
		}
		if c.hits > math.MaxInt64 {
			return nil, fmt.Errorf("%w: descriptor %d: hits_addend %d is too large, must be at most %d", ErrInvalidRequest, i, c.hits, int64(math.MaxInt64))
		}
		c.negative = d.GetIsNegativeHits()
		if !known {
			continue
		}
		if o := d.GetLimit(); o != nil {
			if err := s.useOverride(c, domain, o); err != nil {
				return nil, fmt.Errorf("descriptor %d: %w", i, err)
			}
			continue
		}
		r := cfg.Match(domain, c.entries)
		if r == nil {
			continue
		}
		// An unlimited rule's replaces count too, as in envoyproxy/ratelimit.
		for _, name := range r.Replaces {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[name] = true
		}
		if r.Unlimited {
			c.unlimited = true
			continue
		}
		c.rule = r
	}
	for i := range checks {
		c := &checks[i]
		if c.rule == nil {
			continue
		}
		if c.rule.Name != "" && replaced[c.rule.Name] {
			c.rule = nil
			continue
		}
		r := c.rule
		c.rpu, c.unit, c.multiplier, c.burst = r.RequestsPerUnit, r.Unit, max(r.UnitMultiplier, 1), r.Burst
		c.name, c.shadow, c.quota = r.Name, r.ShadowMode, r.QuotaMode
		c.statsKey = r.StatsKey
		if r.DetailedMetric || r.ValueToMetric {
			c.statsKey = r.MetricKey(c.entries)
		}
	}

	ops := sc.ops[:0]
	for i := range checks {
		c := &checks[i]
		if c.unit == window.Unknown || c.unlimited {
			continue
		}
		c.op = len(ops)
		ops = append(ops, s.op(domain, c))
	}
	sc.ops = ops
	sc.results = sized(sc.results, len(ops))
	results := sc.results
	if err := s.count(ctx, ops, results); err != nil {
		return nil, fmt.Errorf("count descriptors: %w", err)
	}
	resp := s.respond(checks, results)
	if s.opts.DynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, checks, resp)
	}
	return resp, nil
}

// scratch holds a request's working arrays, which are reused from request
// to request: nothing refers to them once the response is built.
type scratch struct {
	checks  []check
	entries []descriptors.Entry
	ops     []store.Op
	results []store.Result
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// maxScratch bounds the arrays kept for reuse: an unusually large request
// leaves its arrays to the garbage collector.
const maxScratch = 64

// sized returns a with length n, reusing its array when large enough. The
// pool hands out cleared arrays (see release) and make's are zero.
func sized[T any](a []T, n int) []T {
	if cap(a) < n {
		return make([]T, n)
	}
	return a[:n]
}

// release drops what the arrays point to and returns sc to the pool.
func (sc *scratch) release() {
	if max(cap(sc.checks), cap(sc.entries), cap(sc.ops), cap(sc.results)) > maxScratch {
		return
	}
	clear(sc.checks)
	clear(sc.entries)
	clear(sc.ops)
	clear(sc.results)
	sc.checks, sc.entries, sc.ops, sc.results = sc.checks[:0], sc.entries[:0], sc.ops[:0], sc.results[:0]
	scratchPool.Put(sc)
}

// count applies ops to the store. Descriptors that count into one key (a
// request may carry the same descriptor twice) are applied in turn, as
// envoyproxy/ratelimit's pipelined INCRBYs apply them: round k holds the
// k-th operation on each key, so the usual request is one store call.
func (s *RLS) count(ctx context.Context, ops []store.Op, results []store.Result) error {
	if len(ops) == 0 {
		return nil
	}
	l := s.opts.Limiter
	now := l.Clock().Now()
	if _, _, dup := store.Duplicate(ops); !dup {
		return l.Store().Do(ctx, now, store.Batch{Ops: ops}, results)
	}
	// occ[i] is how many earlier operations name ops[i]'s key.
	seen := make(map[string]int, len(ops))
	occ := make([]int, len(ops))
	rounds := 0
	for i := range ops {
		occ[i] = seen[ops[i].Key]
		seen[ops[i].Key]++
		rounds = max(rounds, occ[i]+1)
	}
	for r := range rounds {
		var idx []int
		var batch []store.Op
		for i := range ops {
			if occ[i] == r {
				idx = append(idx, i)
				batch = append(batch, ops[i])
			}
		}
		out := make([]store.Result, len(batch))
		if err := l.Store().Do(ctx, now, store.Batch{Ops: batch}, out); err != nil {
			return err
		}
		for k, i := range idx {
			results[i] = out[k]
		}
	}
	return nil
}

// useOverride makes c count against the limit the request carries, as
// envoyproxy/ratelimit does for a known domain.
func (s *RLS) useOverride(c *check, domain string, o *rlcommon.RateLimitDescriptor_RateLimitOverride) error {
	u := window.Unit(o.GetUnit())
	if u.Seconds() == 0 {
		return fmt.Errorf("%w: limit override has unknown unit %d", ErrInvalidRequest, o.GetUnit())
	}
	c.override = o
	c.rpu, c.unit, c.multiplier = o.GetRequestsPerUnit(), u, 1
	if m := o.GetUnitMultiplier(); m != nil {
		if m.GetValue() == 0 {
			return fmt.Errorf("%w: limit override has unit_multiplier 0, must be > 0", ErrInvalidRequest)
		}
		c.multiplier = m.GetValue()
	}
	if int64(c.multiplier) > int64(window.MaxLength/u.Duration()) {
		return fmt.Errorf("%w: limit override of %d %ss makes a window longer than %d years", ErrInvalidRequest, c.multiplier, u, window.MaxLength/(365*24*time.Hour))
	}
	key := domain
	for _, e := range c.entries {
		key += "." + e.Key
		if e.Value != "" {
			key += "_" + e.Value
		}
	}
	c.statsKey = key
	return nil
}

// op builds the store operation that counts c.
func (s *RLS) op(domain string, c *check) store.Op {
	length := time.Duration(c.unit.Seconds()*int64(c.multiplier)) * time.Second
	var key string
	if c.rule != nil {
		key = c.rule.CacheKey(c.entries)
	} else {
		key = overrideCacheKey(domain, c.entries)
	}
	op := store.Op{Key: key, Cost: int64(c.hits)}
	switch {
	case c.negative:
		op.Action = store.Refund
	case c.hits == 0:
		op.Action = store.Check
	default:
		op.Action = store.Spend
	}
	if c.burst > 0 {
		op.Algorithm = store.GCRA
		op.Limit = gcra.Limit{Burst: int64(c.burst), Count: max(int64(c.rpu), 1), Period: length}
		if c.rpu == 0 {
			// requests_per_unit 0 denies everything: a bucket that never
			// refills, with nothing in it, is modelled by denying below.
			op.Action = store.Check
		}
		return op
	}
	op.Algorithm = store.FixedWindow
	op.Window = store.Window{Limit: int64(c.rpu), Length: length}
	return op
}

// overrideCacheKey is envoyproxy/ratelimit's counter key for a descriptor
// counted against a request-supplied limit.
func overrideCacheKey(domain string, entries []descriptors.Entry) string {
	n := len(domain) + 1
	for _, e := range entries {
		n += len(e.Key) + len(e.Value) + 2
	}
	b := make([]byte, 0, n)
	b = append(b, domain...)
	b = append(b, '_')
	for _, e := range entries {
		b = append(b, e.Key...)
		b = append(b, '_')
		b = append(b, e.Value...)
		b = append(b, '_')
	}
	return string(b)
}

// respond turns the store's results into the response, with statistics.
//
// As in envoyproxy/ratelimit, a quota-mode descriptor over its limit (every
// descriptor with GlobalQuotaMode) answers OK with its current_limit and
// limit_remaining but no duration_until_reset, and never makes the overall
// code OVER_LIMIT. The response headers describe the descriptor with the
// least remaining among those with a limit, the last one over the limit if
// any is; a quota-mode descriptor over its limit is a candidate like the
// others (with 0 remaining) but does not take precedence.
func (s *RLS) respond(checks []check, results []store.Result) *rlsv3.RateLimitResponse {
	var resp *rlsv3.RateLimitResponse
	var statuses []rlsv3.RateLimitResponse_DescriptorStatus
	var limits []rlsv3.RateLimitResponse_RateLimit
	var resets []durationpb.Duration
	if len(checks) == 1 && len(results) <= 1 {
		// The usual request: every message in one allocation.
		one := new(oneResponse)
		resp, statuses, limits, resets = &one.resp, one.status[:], one.limit[:len(results)], one.reset[:len(results)]
		resp.Statuses = one.ptr[:]
	} else {
		// The messages of all descriptors come from one array of each kind
		// rather than three allocations per descriptor.
		resp = &rlsv3.RateLimitResponse{Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(checks))}
		statuses = make([]rlsv3.RateLimitResponse_DescriptorStatus, len(checks))
		limits = make([]rlsv3.RateLimitResponse_RateLimit, len(results))
		resets = make([]durationpb.Duration, len(results))
	}
	overall := rlsv3.RateLimitResponse_OK
	var closest *rlsv3.RateLimitResponse_DescriptorStatus
	closestRemaining := uint32(maxUint32)

	for i := range checks {
		c := &checks[i]
		st := &statuses[i]
		resp.Statuses[i] = st
		st.Code = rlsv3.RateLimitResponse_OK
		if c.unlimited {
			st.LimitRemaining = maxUint32
			continue
		}
		if c.op < 0 {
			continue
		}
		r := results[c.op]
		over := isOver(c, r)
		st.CurrentLimit = &limits[c.op]
		s.fillLimit(st.CurrentLimit, c)
		if over {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		} else {
			st.LimitRemaining = clampUint32(r.Remaining)
		}
		d := resetIn(c, r, over)
		st.DurationUntilReset = &resets[c.op]
		st.DurationUntilReset.Seconds, st.DurationUntilReset.Nanos = int64(d/time.Second), int32(d%time.Second)
		s.record(c, r, over)
		if over && c.shadow {
			st.Code = rlsv3.RateLimitResponse_OK
		}
		if s.opts.ResponseHeaders && st.LimitRemaining < closestRemaining {
			closest, closestRemaining = st, st.LimitRemaining
		}
		if st.Code != rlsv3.RateLimitResponse_OVER_LIMIT {
			continue
		}
		if c.quota || s.opts.GlobalQuotaMode {
			c.quotaViolation = true
			resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{
				Code:           rlsv3.RateLimitResponse_OK,
				CurrentLimit:   st.CurrentLimit,
				LimitRemaining: st.LimitRemaining,
			}
			continue
		}
		overall = rlsv3.RateLimitResponse_OVER_LIMIT
		closest, closestRemaining = st, 0
	}
	if s.opts.ResponseHeaders && closest != nil {
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{
			{Key: s.opts.LimitHeader, Value: strconv.FormatUint(uint64(closest.CurrentLimit.GetRequestsPerUnit()), 10)},
			{Key: s.opts.RemainingHeader, Value: strconv.FormatUint(uint64(closest.LimitRemaining), 10)},
			{Key: s.opts.ResetHeader, Value: strconv.FormatInt(int64(closest.DurationUntilReset.AsDuration()/time.Second), 10)},
		}
	}
	if overall == rlsv3.RateLimitResponse_OVER_LIMIT && s.opts.GlobalShadowMode {
		overall = rlsv3.RateLimitResponse_OK
		if s.opts.Metrics != nil {
			s.opts.Metrics.globalShadow.Inc()
		}
	}
	resp.OverallCode = overall
	return resp
}

// oneResponse is the response to a request of one descriptor, allocated
// at once.
type oneResponse struct {
	resp   rlsv3.RateLimitResponse
	ptr    [1]*rlsv3.RateLimitResponse_DescriptorStatus
	status [1]rlsv3.RateLimitResponse_DescriptorStatus
	limit  [1]rlsv3.RateLimitResponse_RateLimit
	reset  [1]durationpb.Duration
}

// dynamicMetadata describes the request and its quota-mode violations as
// envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA does.
func dynamicMetadata(req *rlsv3.RateLimitRequest, checks []check, resp *rlsv3.RateLimitResponse) *structpb.Struct {
	ds := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		entries := make([]*structpb.Value, 0, len(d.GetEntries()))
		for _, e := range d.GetEntries() {
			entries = append(entries, structpb.NewStringValue(e.GetKey()+"="+e.GetValue()))
		}
		f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if l := d.GetLimit(); l != nil {
			f["limit"] = structpb.NewStringValue(l.String())
		}
		if h := d.GetHitsAddend(); h != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		ds = append(ds, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	f := map[string]*structpb.Value{
		"domain":      structpb.NewStringValue(req.GetDomain()),
		"descriptors": structpb.NewListValue(&structpb.ListValue{Values: ds}),
	}
	if h := req.GetHitsAddend(); h != 0 {
		f["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	var violations []*structpb.Value
	enabled := false
	for i := range checks {
		c := &checks[i]
		if c.quotaViolation {
			violations = append(violations, structpb.NewNumberValue(float64(i)))
		}
		enabled = enabled || (c.rule != nil && c.quota)
	}
	if len(violations) > 0 {
		f["quotaModeViolations"] = structpb.NewListValue(&structpb.ListValue{Values: violations})
	}
	f["quotaModeEnabled"] = structpb.NewBoolValue(enabled)
	return &structpb.Struct{Fields: f}
}

// isOver reports whether c is over its limit given its store result.
func isOver(c *check, r store.Result) bool {
	if c.burst > 0 {
		if c.rpu == 0 {
			return true // requests_per_unit 0 is always over
		}
		if c.negative {
			return false // a GCRA refund only gives capacity back
		}
	}
	// A fixed-window refund is allowed when the count is within the limit.
	return !r.Allowed
}

// resetIn is the duration_until_reset of a descriptor: the time to the end
// of the window (whole seconds, as envoyproxy/ratelimit reports it), or for
// GCRA rules the time until a request would be allowed when over, and until
// the bucket is full otherwise.
func resetIn(c *check, r store.Result, over bool) time.Duration {
	if c.burst > 0 {
		if over && r.RetryIn > 0 {
			return r.RetryIn
		}
		return r.ResetIn
	}
	return r.ResetIn
}

// fillLimit sets l to the limit c is counted against.
func (s *RLS) fillLimit(l *rlsv3.RateLimitResponse_RateLimit, c *check) {
	l.Name, l.RequestsPerUnit, l.Unit = c.name, c.rpu, rlsv3.RateLimitResponse_RateLimit_Unit(c.unit)
	if c.multiplier > 1 {
		l.UnitMultiplier = wrapperspb.UInt32(c.multiplier)
	}
}

// record adds c's hits to its rule's statistics, as envoyproxy/ratelimit
// splits them between within, near and over the limit.
func (s *RLS) record(c *check, r store.Result, over bool) {
	m := s.opts.Metrics
	if m == nil || c.negative {
		return
	}
	st := m.rule(c.statsKey)
	hits := c.hits
	st.totalHits.Add(float64(hits))
	limit := uint64(c.rpu)
	var before, after uint64
	if c.burst > 0 {
		limit = uint64(c.burst)
		used := uint64(max(int64(limit)-r.Remaining, 0))
		after, before = used, used
		if over {
			after = used + hits
		} else if used >= hits {
			before = used - hits
		}
	} else {
		after = uint64(max(r.Count, 0))
		before = after - min(after, hits)
	}
	near := uint64(math.Floor(float64(float32(limit) * float32(s.opts.NearLimitRatio))))
	if over {
		if before >= limit {
			st.overLimit.Add(float64(hits))
		} else {
			st.overLimit.Add(float64(after - limit))
			st.nearLimit.Add(float64(limit - max(near, before)))
		}
		if c.shadow {
			st.shadowMode.Add(float64(hits))
		}
		return
	}
	if after > near {
		if before >= near {
			st.nearLimit.Add(float64(hits))
		} else {
			st.nearLimit.Add(float64(after - near))
		}
	}
	st.withinLimit.Add(float64(hits))
}

func clampUint32(n int64) uint32 {
	switch {
	case n < 0:
		return 0
	case n > maxUint32:
		return maxUint32
	}
	return uint32(n)
}
