// Package server holds Sluice's network front doors: the Envoy rate limit
// service (envoy.service.ratelimit.v3) over gRPC and HTTP/JSON, the
// key-value limits API over gRPC and HTTP/JSON, health checks, and the
// debug endpoints.
//
// Each front door decodes its request, asks the limiter (package limiter),
// and translates the limiter's decisions into its own answer in one
// function; errors become gRPC codes and HTTP statuses in one place
// (errors.go). Handlers hold no state of their own beyond an atomically
// swapped configuration snapshot and metrics; all counting is done by the
// limiter. Everything here is safe for concurrent use.
package server

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/descriptors"
	"github.com/sluice-rl/sluice/internal/h2grpc"
	"github.com/sluice-rl/sluice/internal/tracing"
	"github.com/sluice-rl/sluice/limiter"
)

// RLSOptions configure an RLS. The zero value of each field gives the
// default stated beside it.
type RLSOptions struct {
	// Limiter counts the descriptors. Required.
	Limiter *limiter.Limiter
	// Clock times requests for metrics; default clock.New().
	Clock clock.Clock
	// Metrics receives per-rule statistics; nil records nothing.
	Metrics *Metrics
	// NearLimitRatio is the fraction of a limit past which hits count as
	// near the limit in metrics. Default 0.8; range (0, 1].
	NearLimitRatio float64
	// GlobalShadowMode answers OK to every request while still counting.
	GlobalShadowMode bool
	// GlobalQuotaMode treats every descriptor as quota_mode: one over its
	// limit keeps OVER_LIMIT, and the overall code is OVER_LIMIT only when
	// every descriptor (but unlimited ones) is over.
	GlobalQuotaMode bool
	// DynamicMetadata adds envoyproxy/ratelimit's response dynamic
	// metadata: the domain, each descriptor's entries ("key=value"),
	// limit override and hits_addend, the request's hits_addend, and the
	// merged configured metadata of the descriptors that passed.
	DynamicMetadata bool
	// ResponseHeaders adds RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset headers for the descriptor closest to its limit.
	ResponseHeaders bool
	// Header names; defaults RateLimit-Limit, RateLimit-Remaining,
	// RateLimit-Reset.
	LimitHeader, RemainingHeader, ResetHeader string
	// Logger for request errors; default slog.Default().
	Logger *slog.Logger
	// RetryAfterHeader adds "retry-after" (whole seconds, rounded up) to
	// the response headers of an OVER_LIMIT answer: the time until the
	// first of its over-limit descriptors frees (the end of a window, or a
	// GCRA rule's retry time).
	RetryAfterHeader bool
	// IgnoreRequestLimits counts every descriptor against the configured
	// rules, ignoring a limit the request carries (a caller could raise
	// its own limit with one). IgnoreNegativeHits counts is_negative_hits
	// descriptors as hits, as envoyproxy/ratelimit does, rather than
	// giving hits back (a caller could empty its own counter). Both
	// default to false: the request's fields are honoured.
	IgnoreRequestLimits, IgnoreNegativeHits bool
	// Caps on a request, checked before any store work; a request past
	// one is InvalidArgument naming it. MaxDescriptors bounds the
	// descriptors of a request (default 1000), MaxEntries the entries of a
	// descriptor (default 64), MaxEntryBytes the length of an entry's key
	// or value, and of the domain (default 4096). No request an Envoy
	// sends comes near them.
	MaxDescriptors, MaxEntries, MaxEntryBytes int
	// Tracer starts a span per call, continuing the caller's trace; nil
	// (tracing off) starts none and costs nothing.
	Tracer *tracing.Tracer
	// RequestLog, when not nil, is called with every request the limiter
	// counted and the instant its decisions used (see RequestLog). It
	// MUST NOT block, and MUST NOT keep req after it returns.
	RequestLog func(at time.Time, req *rlsv3.RateLimitRequest)
	// NoHotKeys skips counting the busiest request keys for the dashboard
	// (sluice replay has no dashboard).
	NoHotKeys bool
}

// Default request caps; see RLSOptions.
const (
	DefaultMaxDescriptors = 1000
	DefaultMaxEntries     = 64
	DefaultMaxEntryBytes  = 4096
)

// RLS answers envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
// as envoyproxy/ratelimit does. Create it with NewRLS and give it a
// configuration with SetConfig; until then every domain is unknown.
type RLS struct {
	rlsv3.UnimplementedRateLimitServiceServer

	opts   RLSOptions
	config atomic.Pointer[descriptors.Config]
	hot    *hotKeys // the busiest request keys, for the dashboard
}

// NewRLS returns an RLS with no configuration. It panics when o.Limiter is
// nil, a programmer's bug.
func NewRLS(o RLSOptions) *RLS {
	if o.Limiter == nil {
		panic("server.NewRLS: nil Limiter") // a wiring bug, not bad input
	}
	if o.Clock == nil {
		o.Clock = clock.New()
	}
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
	if o.MaxDescriptors <= 0 {
		o.MaxDescriptors = DefaultMaxDescriptors
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	if o.MaxEntryBytes <= 0 {
		o.MaxEntryBytes = DefaultMaxEntryBytes
	}
	return &RLS{opts: o, hot: newHotKeys()}
}

// SetConfig swaps in a new configuration snapshot.
func (s *RLS) SetConfig(c *descriptors.Config) { s.config.Store(c) }

// Config returns the current configuration snapshot, or nil.
func (s *RLS) Config() *descriptors.Config { return s.config.Load() }

// maxUint32 is what envoyproxy/ratelimit reports as the remaining count of
// an unlimited descriptor.
const maxUint32 = math.MaxUint32

// check is one descriptor of a request on its way through the service.
type check struct {
	entries   []descriptors.Entry
	rule      *descriptors.Rule // the rule counted against; nil: no limit (or replaced)
	unlimited bool
	hits      uint64
	negative  bool
	statsKey  string

	txn    int  // index into the request's transactions of its first limit, or -1
	ntxn   int  // its transactions: one per limit (several with rate_limits)
	passed bool // within its limit, or no limit: its metadata is returned
}

// ShouldRateLimit implements RateLimitServiceServer.
func (s *RLS) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if t := s.opts.Tracer; t != nil {
		var span trace.Span
		ctx, span = t.StartGRPC(ctx, rlsMethod)
		defer span.End()
	}
	resp, err := s.serve(ctx, req)
	if err != nil {
		return nil, grpcError(err)
	}
	return resp, nil
}

// rlsMethod is the full gRPC method of ShouldRateLimit, its span's name.
const rlsMethod = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// serve answers req for either edge (gRPC or /json), timing it, logging
// internal errors and, when tracing, recording the outcome on ctx's span
// (the edge's, which the edge ends).
func (s *RLS) serve(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	start := s.opts.Clock.Now()
	resp, err := s.shouldRateLimit(ctx, req)
	s.finished(ctx, req, start, resp, err)
	return resp, err
}

// finished records the outcome of req, begun at start: its duration and
// code in the metrics, an internal error in the log and, when tracing, the
// outcome on ctx's span.
func (s *RLS) finished(ctx context.Context, req *rlsv3.RateLimitRequest, start time.Time, resp *rlsv3.RateLimitResponse, err error) {
	code := codes.OK
	if err != nil {
		code = grpcCode(err)
		if code == codes.Internal {
			s.opts.Logger.Error("rate limit request failed", "domain", req.GetDomain(), "err", err)
		}
	}
	if m := s.opts.Metrics; m != nil {
		m.observeRequest(s.opts.Clock.Now().Sub(start), code)
	}
	if s.opts.Tracer != nil {
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			if resp != nil {
				span.SetAttributes(tracing.KeyOverallCode.String(resp.GetOverallCode().String()))
			}
			tracing.Annotate(span, err, tracing.KeyDomain.String(req.GetDomain()), tracing.KeyDescriptors.Int(len(req.GetDescriptors())),
				tracing.KeyGRPCStatus.Int(int(code)))
		}
	}
}

func (s *RLS) shouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	sc := scratchPool.Get().(*scratch)
	defer sc.release()
	if err := s.prepare(req, sc); err != nil {
		return nil, err
	}
	var at time.Time // zero: the limiter's now
	if s.opts.RequestLog != nil {
		at = s.opts.Clock.Now()
	}
	if err := s.opts.Limiter.CountWithAt(ctx, &sc.count, at, sc.txns, sc.decisions); err != nil {
		return nil, fmt.Errorf("count descriptors: %w", err)
	}
	return s.answer(ctx, req, sc, at), nil
}

// answer makes req's response from the decisions in sc, which prepare
// filled and the limiter decided at at, and logs the request when asked
// to.
func (s *RLS) answer(ctx context.Context, req *rlsv3.RateLimitRequest, sc *scratch, at time.Time) *rlsv3.RateLimitResponse {
	if s.opts.RequestLog != nil {
		s.opts.RequestLog(at, req)
	}
	resp := s.respond(ctx, sc.checks, sc.rules, sc.keys, sc.decisions)
	if s.opts.DynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, sc.checks)
	}
	return resp
}

// prepare checks req and fills sc with its descriptors' transactions, each
// with its rule and stats key, and room for their decisions; an invalid
// request is an Invalid error naming the field.
func (s *RLS) prepare(req *rlsv3.RateLimitRequest, sc *scratch) error {
	if req.GetDomain() == "" {
		return invalidRequest("domain", "rate limit domain must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		return invalidRequest("descriptors", "rate limit descriptor list must not be empty")
	}
	if err := s.checkCaps(req); err != nil {
		return err
	}
	cfg := s.config.Load()
	domain := req.GetDomain()
	known := cfg != nil && cfg.Domain(domain) != nil
	if !known && s.opts.Metrics != nil {
		// Once a descriptor, as upstream looks each one up.
		s.opts.Metrics.stats.DomainNotFound(domain, len(req.Descriptors))
	}

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
		c.txn = -1
		c.entries, entries = entries[:len(d.GetEntries()):len(d.GetEntries())], entries[len(d.GetEntries()):]
		for j, e := range d.GetEntries() {
			c.entries[j] = descriptors.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
		c.hits = requestHits
		if h := d.GetHitsAddend(); h != nil {
			c.hits = h.GetValue() // an explicit 0 peeks
		}
		if c.hits > math.MaxInt64 {
			return invalidRequest(fmt.Sprintf("descriptors[%d].hits_addend", i),
				"descriptor %d: hits_addend %d is too large, must be at most %d", i, c.hits, int64(math.MaxInt64))
		}
		c.negative = d.GetIsNegativeHits() && !s.opts.IgnoreNegativeHits
		if !known {
			continue
		}
		if o := d.GetLimit(); o != nil && !s.opts.IgnoreRequestLimits {
			// A request's own limit replaces the configured one, as in
			// envoyproxy/ratelimit, for a known domain.
			r, err := descriptors.Override(domain, c.entries, int32(o.GetUnit()), o.GetRequestsPerUnit(), o.GetUnitMultiplier().GetValue(), o.GetUnitMultiplier() != nil)
			if err != nil {
				return invalidRequest(fmt.Sprintf("descriptors[%d].limit", i), "descriptor %d: %v", i, err)
			}
			c.rule = r
			continue
		}
		r := cfg.Match(domain, c.entries)
		if r == nil {
			continue
		}
		// An unlimited rule's replaces count too, as in envoyproxy/ratelimit.
		for k := range r.Limits() {
			for _, name := range r.Limit(k).Replaces {
				if replaced == nil {
					replaced = map[string]bool{}
				}
				replaced[name] = true
			}
		}
		if r.Unlimited {
			c.unlimited = true
			continue
		}
		c.rule = r
	}

	// Every counter key of the request in one allocation, rather than
	// one each, and not in the scratch: a store's Do may keep a key.
	size := 0
	for i := range checks {
		if r := checks[i].rule; r != nil {
			for k := range r.Limits() {
				size += r.Limit(k).CacheKeyLen(checks[i].entries)
			}
		}
	}
	var counterKeys []byte
	if size > 0 {
		counterKeys = make([]byte, 0, size)
	}
	txns, rules, keys := sc.txns[:0], sc.rules[:0], sc.keys[:0]
	for i := range checks {
		c := &checks[i]
		if c.rule == nil {
			continue
		}
		c.txn = len(txns)
		for k := range c.rule.Limits() {
			r := c.rule.Limit(k)
			if r.Name != "" && replaced[r.Name] {
				continue
			}
			var t limiter.Transaction
			t, counterKeys = limiter.AppendForRule(counterKeys, r, c.entries, int64(c.hits))
			switch {
			case c.negative:
				t.Kind = limiter.RefundBucket
			case c.hits == 0:
				t.Kind = limiter.CheckOnly
			}
			txns, rules = append(txns, t), append(rules, r)
			keys = append(keys, r.MetricKey(c.entries)) // value_to_metric on any level, or detailed_metric
		}
		c.ntxn = len(txns) - c.txn
		if c.ntxn == 0 {
			c.rule, c.txn = nil, -1
			continue
		}
		c.rule, c.statsKey = rules[c.txn], keys[c.txn]
	}
	sc.txns, sc.rules, sc.keys = txns, rules, keys
	sc.decisions = sized(sc.decisions, len(txns))
	return nil
}

// checkCaps refuses a request past the caps of RLSOptions, naming the cap
// and its flag, before any work is done for it.
func (s *RLS) checkCaps(req *rlsv3.RateLimitRequest) error {
	o := &s.opts
	// The domain is bounded as an entry is: an unknown one is kept for its
	// statistics (up to stats.MaxDomains of them).
	if n := len(req.GetDomain()); n > o.MaxEntryBytes {
		return invalidRequest("domain", "the domain is %d bytes, more than the %d allowed (--max-descriptor-entry-bytes)", n, o.MaxEntryBytes)
	}
	if n := len(req.GetDescriptors()); n > o.MaxDescriptors {
		return invalidRequest("descriptors", "the request has %d descriptors, more than the %d allowed (--max-descriptors)", n, o.MaxDescriptors)
	}
	for i, d := range req.GetDescriptors() {
		if n := len(d.GetEntries()); n > o.MaxEntries {
			return invalidRequest(fmt.Sprintf("descriptors[%d].entries", i), "descriptor %d has %d entries, more than the %d allowed (--max-descriptor-entries)", i, n, o.MaxEntries)
		}
		for j, e := range d.GetEntries() {
			if n := max(len(e.GetKey()), len(e.GetValue())); n > o.MaxEntryBytes {
				return invalidRequest(fmt.Sprintf("descriptors[%d].entries[%d]", i, j), "descriptor %d entry %d has a key or value of %d bytes, more than the %d allowed (--max-descriptor-entry-bytes)", i, j, n, o.MaxEntryBytes)
			}
		}
	}
	return nil
}

// scratch holds a request's working arrays, which are reused from request
// to request: nothing refers to them once the response is built.
type scratch struct {
	checks    []check
	entries   []descriptors.Entry
	txns      []limiter.Transaction
	rules     []*descriptors.Rule // the rule of each transaction
	keys      []string            // the stats key of each transaction
	decisions []limiter.Decision
	count     limiter.Scratch
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
	if max(cap(sc.checks), cap(sc.entries), cap(sc.txns), cap(sc.rules), cap(sc.decisions)) > maxScratch {
		return
	}
	clear(sc.checks)
	clear(sc.entries)
	clear(sc.txns)
	clear(sc.rules[:cap(sc.rules)])
	clear(sc.keys[:cap(sc.keys)])
	clear(sc.decisions)
	sc.checks, sc.entries, sc.txns, sc.decisions = sc.checks[:0], sc.entries[:0], sc.txns[:0], sc.decisions[:0]
	sc.rules, sc.keys = sc.rules[:0], sc.keys[:0]
	scratchPool.Put(sc)
}

// respond translates the limiter's decisions into the response, with
// statistics: the one place where a decision becomes an RLS answer. rules
// and keys are the rule and stats key of each decision.
//
// As in envoyproxy/ratelimit, a quota-mode descriptor (every descriptor
// with GlobalQuotaMode) over its limit keeps its OVER_LIMIT status; the
// overall code is OVER_LIMIT when any other descriptor is over, or when
// the request has quota-mode descriptors and every one of them is over. A
// shadow-mode descriptor over its limit answers OK. The response headers
// describe the descriptor with the least remaining among those with a
// limit, the last one over the limit if any non-quota one is.
//
// A descriptor with several limits (rate_limits) is over when any of them
// is; its status reports the limit closest to its own: an over one before
// the others, then the least remaining, then the longest reset.
func (s *RLS) respond(ctx context.Context, checks []check, rules []*descriptors.Rule, keys []string, decisions []limiter.Decision) *rlsv3.RateLimitResponse {
	var resp *rlsv3.RateLimitResponse
	var answers []descriptorAnswer
	b := responsePool.Get().(*responseBlock)
	if h2grpc.OnDone(ctx, b) {
		// A call of h2grpc: the messages go back to the pool once it has
		// encoded them.
		resp, answers = b.use(len(checks))
	} else {
		responsePool.Put(b)
		resp, answers = newResponse(len(checks))
	}
	var closest *rlsv3.RateLimitResponse_DescriptorStatus
	closestRemaining := uint32(maxUint32)
	over, quota, quotaOver := 0, 0, 0
	frees := time.Duration(-1) // the soonest an over-limit descriptor frees

	for i := range checks {
		c := &checks[i]
		a := &answers[i]
		st := &a.status
		resp.Statuses[i] = st
		st.Code = rlsv3.RateLimitResponse_OK
		if c.unlimited {
			st.LimitRemaining = maxUint32
			continue
		}
		isQuota := s.opts.GlobalQuotaMode || (c.rule != nil && c.rule.QuotaMode)
		if isQuota {
			quota++
		}
		if c.txn < 0 {
			c.passed = true
			continue
		}
		// The limit to report: the first, unless another is closer.
		best := limitStatus(rules[c.txn], &decisions[c.txn])
		anyOver := !decisions[c.txn].Allowed
		s.record(c, rules[c.txn], keys[c.txn], &decisions[c.txn])
		for k := c.txn + 1; k < c.txn+c.ntxn; k++ {
			ls := limitStatus(rules[k], &decisions[k])
			anyOver = anyOver || !decisions[k].Allowed
			s.record(c, rules[k], keys[k], &decisions[k])
			if ls.closer(best) {
				best = ls
			}
		}
		if s.opts.Metrics != nil && !c.negative && !s.opts.NoHotKeys {
			s.hot.add(s.opts.Clock, c, anyOver)
		}
		r, reset := best.rule, best.reset
		st.Code, st.LimitRemaining = best.code, best.remaining
		st.CurrentLimit = &a.limit
		st.CurrentLimit.Name, st.CurrentLimit.RequestsPerUnit, st.CurrentLimit.Unit = r.Name, r.RequestsPerUnit, rlsv3.RateLimitResponse_RateLimit_Unit(r.Unit)
		if r.UnitMultiplier > 1 {
			st.CurrentLimit.UnitMultiplier = wrapperspb.UInt32(r.UnitMultiplier)
		}
		st.DurationUntilReset = &a.reset
		st.DurationUntilReset.Seconds, st.DurationUntilReset.Nanos = int64(reset/time.Second), int32(reset%time.Second)
		if s.opts.ResponseHeaders && st.LimitRemaining < closestRemaining {
			closest, closestRemaining = st, st.LimitRemaining
		}
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT && (frees < 0 || reset < frees) {
			frees = reset
		}
		switch {
		case st.Code != rlsv3.RateLimitResponse_OVER_LIMIT:
			c.passed = true
		case isQuota:
			quotaOver++
		default:
			over++
			closest, closestRemaining = st, 0
		}
	}
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	if over > 0 || (quota > 0 && quotaOver == quota) {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if s.opts.ResponseHeaders && closest != nil {
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{
			{Key: s.opts.LimitHeader, Value: strconv.FormatUint(uint64(closest.CurrentLimit.GetRequestsPerUnit()), 10)},
			{Key: s.opts.RemainingHeader, Value: strconv.FormatUint(uint64(closest.LimitRemaining), 10)},
			{Key: s.opts.ResetHeader, Value: strconv.FormatInt(limiter.ResetSeconds(closest.DurationUntilReset.AsDuration()), 10)},
		}
	}
	if s.opts.RetryAfterHeader && resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT && frees >= 0 {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
			&corev3.HeaderValue{Key: "retry-after", Value: strconv.FormatInt(limiter.RetryAfter(frees), 10)})
	}
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT && s.opts.GlobalShadowMode {
		resp.OverallCode = rlsv3.RateLimitResponse_OK
		if s.opts.Metrics != nil {
			s.opts.Metrics.stats.GlobalShadowMode.Add(1)
		}
	}
	return resp
}

// ruleStatus is one limit's answer for a descriptor.
type ruleStatus struct {
	rule      *descriptors.Rule
	code      rlsv3.RateLimitResponse_Code
	remaining uint32
	// reset is duration_until_reset: the end of the window (whole seconds,
	// as envoyproxy/ratelimit reports it), or for GCRA rules the time
	// until a request would be allowed when over, and until the bucket is
	// full otherwise.
	reset time.Duration
}

// limitStatus is rule r's answer for decision d. A shadow-mode rule over
// its limit answers OK, with nothing remaining.
func limitStatus(r *descriptors.Rule, d *limiter.Decision) ruleStatus {
	ls := ruleStatus{rule: r, code: rlsv3.RateLimitResponse_OK, reset: d.ResetIn}
	if d.Allowed {
		ls.remaining = clampUint32(d.Remaining)
	} else if !r.ShadowMode {
		ls.code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if r.Burst > 0 && !d.Allowed && d.RetryIn > 0 {
		ls.reset = d.RetryIn
	}
	return ls
}

// closer reports whether ls is closer to its limit than o: over the limit
// when o is not, else less remaining, else a longer reset.
func (ls ruleStatus) closer(o ruleStatus) bool {
	if (ls.code == rlsv3.RateLimitResponse_OVER_LIMIT) != (o.code == rlsv3.RateLimitResponse_OVER_LIMIT) {
		return ls.code == rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if ls.remaining != o.remaining {
		return ls.remaining < o.remaining
	}
	return ls.reset > o.reset
}

// oneResponse is the response to a request of one descriptor, allocated
// at once.
type oneResponse struct {
	resp   rlsv3.RateLimitResponse
	ptr    [1]*rlsv3.RateLimitResponse_DescriptorStatus
	answer [1]descriptorAnswer
}

// newResponse allocates a response of n statuses, and their messages:
// for one descriptor, the usual request, every message in one allocation;
// else those of all descriptors in one array rather than three
// allocations per descriptor.
func newResponse(n int) (*rlsv3.RateLimitResponse, []descriptorAnswer) {
	if n == 1 {
		one := new(oneResponse)
		one.resp.Statuses = one.ptr[:]
		return &one.resp, one.answer[:]
	}
	resp := &rlsv3.RateLimitResponse{Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)}
	return resp, make([]descriptorAnswer, n)
}

// responseBlock holds the messages of a response that h2grpc releases
// (h2grpc.OnDone) once it has encoded them, for the next response.
type responseBlock struct {
	resp    rlsv3.RateLimitResponse
	ptrs    []*rlsv3.RateLimitResponse_DescriptorStatus
	answers []descriptorAnswer
}

var responsePool = sync.Pool{New: func() any { return new(responseBlock) }}

// maxPooledAnswers bounds the descriptors of the responses whose messages
// are kept for reuse.
const maxPooledAnswers = 64

// use returns b's response, with n statuses, and their messages.
func (b *responseBlock) use(n int) (*rlsv3.RateLimitResponse, []descriptorAnswer) {
	b.ptrs, b.answers = sized(b.ptrs, n), sized(b.answers, n)
	b.resp.Statuses = b.ptrs[:n:n]
	return &b.resp, b.answers
}

// Release clears b, which nothing reads any more, and keeps it for reuse
// when of a usual size.
func (b *responseBlock) Release() {
	b.resp = rlsv3.RateLimitResponse{}
	clear(b.ptrs)
	clear(b.answers)
	if cap(b.answers) <= maxPooledAnswers {
		responsePool.Put(b)
	}
}

// descriptorAnswer holds the messages of one descriptor's status.
type descriptorAnswer struct {
	status rlsv3.RateLimitResponse_DescriptorStatus
	limit  rlsv3.RateLimitResponse_RateLimit
	reset  durationpb.Duration
}

// dynamicMetadata describes the request as envoyproxy/ratelimit's
// RESPONSE_DYNAMIC_METADATA does: the domain, each descriptor's entries
// ("key=value"), limit override and hits_addend, the request's
// hits_addend, and under "metadata" the configured metadata of the rules
// of the descriptors that passed, merged in request order (a key already
// set keeps its value; two maps under one key merge the same way).
func dynamicMetadata(req *rlsv3.RateLimitRequest, checks []check) *structpb.Struct {
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
	var merged map[string]any
	for i := range checks {
		c := &checks[i]
		if !c.passed || c.rule == nil {
			continue
		}
		if m := c.rule.ResponseMetadata(c.statsKey); len(m) > 0 {
			if merged == nil {
				merged = map[string]any{}
			}
			mergeMetadata(merged, m)
		}
	}
	if len(merged) > 0 {
		if m, err := structpb.NewStruct(merged); err == nil {
			f["metadata"] = structpb.NewStructValue(m)
		}
	}
	return &structpb.Struct{Fields: f}
}

// mergeMetadata adds src's keys to dst: a key dst has keeps its value,
// except that two maps under one key merge recursively. Maps of dst that
// came from src are copied first, so configured metadata is never changed.
func mergeMetadata(dst, src map[string]any) {
	for k, v := range src {
		have, ok := dst[k]
		if !ok {
			if m, isMap := v.(map[string]any); isMap {
				cp := make(map[string]any, len(m))
				mergeMetadata(cp, m)
				v = cp
			}
			dst[k] = v
			continue
		}
		hm, ok1 := have.(map[string]any)
		vm, ok2 := v.(map[string]any)
		if ok1 && ok2 {
			mergeMetadata(hm, vm)
		}
	}
}

// record adds c's hits to the statistics of its rule r (stats key key),
// as envoyproxy/ratelimit splits them between within, near and over the
// limit. An over-limit decision answered from the local over-limit cache
// counts all its hits over the limit and over_limit_with_local_cache, as
// upstream's does.
func (s *RLS) record(c *check, r *descriptors.Rule, key string, d *limiter.Decision) {
	m := s.opts.Metrics
	if m == nil || c.negative {
		return
	}
	st := m.stats.Rule(key)
	over := !d.Allowed
	hits := c.hits
	st.TotalHits.Add(hits)
	if over && d.Cached {
		st.OverLimit.Add(hits)
		st.OverLimitWithLocalCache.Add(hits)
		if r.ShadowMode {
			st.ShadowMode.Add(hits)
		}
		return
	}
	limit := uint64(r.RequestsPerUnit)
	var before, after uint64
	if r.Burst > 0 {
		limit = uint64(r.Burst)
		used := uint64(max(int64(limit)-d.Remaining, 0))
		after, before = used, used
		if over {
			after = used + hits
		} else if used >= hits {
			before = used - hits
		}
	} else {
		// A window's count before the hits is its count less them, in
		// unsigned arithmetic as envoyproxy/ratelimit computes it: when
		// the hits were not counted (peeked by --stop-cache-key-
		// increment-when-overlimit) and are more than the count, it
		// wraps, and every hit then counts as near (or over) the limit,
		// as upstream's do.
		after = uint64(max(d.Count, 0))
		before = after - hits
	}
	near := uint64(math.Floor(float64(float32(limit) * float32(s.opts.NearLimitRatio))))
	if over {
		if before >= limit {
			st.OverLimit.Add(hits)
		} else {
			st.OverLimit.Add(after - limit)
			st.NearLimit.Add(limit - max(near, before))
		}
		if r.ShadowMode {
			// Only the hits past the limit, as envoyproxy/ratelimit counts.
			if before >= limit {
				st.ShadowMode.Add(hits)
			} else {
				st.ShadowMode.Add(after - limit)
			}
		}
		return
	}
	if after > near {
		if before >= near {
			st.NearLimit.Add(hits)
		} else {
			st.NearLimit.Add(after - near)
		}
	}
	st.WithinLimit.Add(hits)
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
