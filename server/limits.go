package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/store"
)

// KVOptions configure a KV. The zero value of each optional field gives the
// default stated beside it.
type KVOptions struct {
	// Limiter supplies the store and the clock. Required.
	Limiter *limiter.Limiter
	// Limits returns the limits in force; it is called once per request, so
	// a reload that swaps the set takes effect on the next request. Nil, or
	// a nil *limits.Set, means no defaults and no overrides: every known
	// name is allowed without a check.
	Limits func() *limits.Set
	// Registerer receives the KV's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Logger for internal errors; default slog.Default().
	Logger *slog.Logger
}

// KV serves the key-value limits API, sluice.v1.Limits, over gRPC; wrap it
// with KVHTTPHandler for HTTP/JSON. Create it with NewKV. It is safe for
// concurrent use.
type KV struct {
	sluicev1.UnimplementedLimitsServer

	limiter *limiter.Limiter
	limits  func() *limits.Set
	log     *slog.Logger
	metrics *kvMetrics
}

var _ sluicev1.LimitsServer = (*KV)(nil)

// NewKV returns a KV. It panics when o.Limiter is nil, a programmer's bug.
func NewKV(o KVOptions) *KV {
	if o.Limiter == nil {
		panic("server.NewKV: nil Limiter") // a wiring bug, not bad input
	}
	if o.Limits == nil {
		o.Limits = func() *limits.Set { return nil }
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &KV{limiter: o.Limiter, limits: o.Limits, log: o.Logger, metrics: newKVMetrics(o.Registerer)}
}

// ErrInvalidTransaction reports a key-value request the API refuses before
// it reaches the limiter: a missing name or id, a cost out of range, an
// invalid kind, an empty or oversize batch, or two transactions of a batch
// on one bucket.
var ErrInvalidTransaction = errors.New("invalid transaction")

// invalidError is an ErrInvalidTransaction with its own message.
type invalidError struct{ msg string }

func invalidf(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalidTransaction }

// Check implements sluicev1.LimitsServer: it reports whether the request
// would be allowed, spending nothing.
func (kv *KV) Check(ctx context.Context, req *sluicev1.Request) (*sluicev1.Decision, error) {
	return kv.single(ctx, "check", req, kv.apply(limiter.CheckOnly))
}

// Spend implements sluicev1.LimitsServer: it checks the request and spends
// its cost when allowed.
func (kv *KV) Spend(ctx context.Context, req *sluicev1.Request) (*sluicev1.Decision, error) {
	return kv.single(ctx, "spend", req, kv.apply(limiter.CheckAndSpend))
}

// Reset implements sluicev1.LimitsServer: it makes the bucket full again.
func (kv *KV) Reset(ctx context.Context, req *sluicev1.Request) (*sluicev1.Decision, error) {
	return kv.single(ctx, "reset", req, kv.apply(limiter.ResetBucket))
}

// Refund implements sluicev1.LimitsServer: it gives the cost back to the
// bucket, never past full; a full bucket is not refunded (not allowed).
func (kv *KV) Refund(ctx context.Context, req *sluicev1.Request) (*sluicev1.Decision, error) {
	return kv.single(ctx, "refund", req, func(ctx context.Context, t limiter.Transaction) (limiter.Decision, error) {
		_, each, err := kv.limiter.Refund(ctx, t)
		if err != nil {
			return limiter.Decision{}, err
		}
		return each[0], nil
	})
}

// apply returns a function applying one transaction of kind k and
// answering its own decision (for a reset, the batch decision would be the
// empty batch's).
func (kv *KV) apply(k limiter.Kind) func(context.Context, limiter.Transaction) (limiter.Decision, error) {
	return func(ctx context.Context, t limiter.Transaction) (limiter.Decision, error) {
		t.Kind = k
		_, each, err := kv.limiter.Batch(ctx, []limiter.Transaction{t})
		if err != nil {
			return limiter.Decision{}, err
		}
		return each[0], nil
	}
}

// single answers one transaction with do.
func (kv *KV) single(ctx context.Context, method string, req *sluicev1.Request,
	do func(context.Context, limiter.Transaction) (limiter.Decision, error)) (*sluicev1.Decision, error) {
	start := kv.limiter.Clock().Now()
	set := kv.limits()
	b, txn, err := resolve(set, req.GetName(), req.GetId(), req.Cost, method != "reset")
	if err != nil {
		kv.metrics.observe(method, start, kv.limiter.Clock().Now())
		kv.metrics.count(set, req.GetName(), b, resultError)
		return nil, kv.statusError(method, err)
	}
	d, err := do(ctx, txn)
	kv.metrics.observe(method, start, kv.limiter.Clock().Now())
	if err != nil {
		kv.metrics.count(set, req.GetName(), b, resultError)
		return nil, kv.statusError(method, err)
	}
	kv.metrics.count(set, req.GetName(), b, resultOf(d))
	return decisionProto(d, b), nil
}

// Batch implements sluicev1.LimitsServer: it applies the transactions all or
// nothing and answers the strictest decision plus one per transaction.
func (kv *KV) Batch(ctx context.Context, req *sluicev1.BatchRequest) (*sluicev1.BatchResponse, error) {
	start := kv.limiter.Clock().Now()
	set := kv.limits()
	in := req.GetTransactions()
	buckets := make([]limits.Bucket, len(in))
	fail := func(err error) (*sluicev1.BatchResponse, error) {
		kv.metrics.observe("batch", start, kv.limiter.Clock().Now())
		for i, t := range in {
			kv.metrics.count(set, t.GetName(), buckets[i], resultError)
		}
		return nil, kv.statusError("batch", err)
	}
	switch {
	case len(in) == 0:
		return fail(invalidf("empty batch, want 1 to %d transactions", limiter.MaxBatch))
	case len(in) > limiter.MaxBatch:
		return fail(invalidf("batch has %d transactions, at most %d allowed", len(in), limiter.MaxBatch))
	}
	txns := make([]limiter.Transaction, len(in))
	seen := make(map[string]int, len(in))
	for i, t := range in {
		b, txn, err := resolve(set, t.GetName(), t.GetId(), t.Cost, true)
		if err != nil {
			return fail(fmt.Errorf("transaction %d: %w", i, err))
		}
		switch t.GetKind() {
		case sluicev1.Transaction_CHECK_AND_SPEND:
			txn.Kind = limiter.CheckAndSpend
		case sluicev1.Transaction_CHECK_ONLY:
			txn.Kind = limiter.CheckOnly
		case sluicev1.Transaction_SPEND_ONLY:
			txn.Kind = limiter.SpendOnly
		default:
			return fail(invalidf("transaction %d: invalid kind %d, must be CHECK_AND_SPEND, CHECK_ONLY or SPEND_ONLY", i, t.GetKind()))
		}
		if j, dup := seen[b.Key]; dup {
			return fail(invalidf("duplicate bucket: transactions %d and %d (%s %q and %q) are both for bucket %s; a batch may name each bucket once",
				j, i, t.GetName(), in[j].GetId(), t.GetId(), b.Key))
		}
		seen[b.Key] = i
		buckets[i], txns[i] = b, txn
	}
	d, each, err := kv.limiter.Batch(ctx, txns)
	if err != nil {
		return fail(err)
	}
	kv.metrics.observe("batch", start, kv.limiter.Clock().Now())
	resp := &sluicev1.BatchResponse{Results: make([]*sluicev1.Decision, len(each))}
	for i := range each {
		resp.Results[i] = decisionProto(each[i], buckets[i])
		kv.metrics.count(set, in[i].GetName(), buckets[i], resultOf(each[i]))
	}
	if d.Index >= 0 {
		resp.Decision = decisionProto(d, buckets[d.Index])
	} else {
		resp.Decision = decisionProto(d, limits.Bucket{})
	}
	return resp, nil
}

// resolve finds the bucket of name and id in set and builds its
// transaction. A nil cost means 1. With checkCost, the cost must be between
// 0 and the limit's burst (any cost >= 0 when no limit applies).
func resolve(set *limits.Set, name, id string, cost *int64, checkCost bool) (limits.Bucket, limiter.Transaction, error) {
	if name == "" {
		return limits.Bucket{}, limiter.Transaction{}, invalidf("missing limit name")
	}
	b, err := set.Resolve(name, id)
	if err != nil {
		return limits.Bucket{}, limiter.Transaction{}, err
	}
	c := int64(1)
	if cost != nil {
		c = *cost
	}
	if checkCost {
		switch {
		case c < 0:
			return b, limiter.Transaction{}, invalidf("invalid cost %d for %s, must be >= 0", c, name)
		case b.Enabled && c > b.Limit.Burst:
			return b, limiter.Transaction{}, invalidf("invalid cost %d for %s %q, must be at most the burst %d", c, name, id, b.Limit.Burst)
		}
	} else {
		c = 0
	}
	return b, limiter.Transaction{Key: b.Key, Limit: b.Limit, Disabled: !b.Enabled, Cost: c}, nil
}

// statusError maps an error to its gRPC status: the one place where the
// key-value API's errors become codes (KVHTTPHandler turns the codes into
// HTTP statuses with httpStatus).
func (kv *KV) statusError(method string, err error) error {
	var code codes.Code
	switch {
	case errors.Is(err, ErrInvalidTransaction), errors.Is(err, limits.ErrUnknownName),
		errors.Is(err, limits.ErrInvalidID), errors.Is(err, limiter.ErrInvalid),
		errors.Is(err, gcra.ErrInvalidCost), errors.Is(err, gcra.ErrInvalidLimit):
		code = codes.InvalidArgument
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		code = codes.Unavailable
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	default:
		code = codes.Internal
		kv.log.Error("key-value request failed", "method", method, "err", err)
	}
	return status.Error(code, err.Error())
}

// decisionProto turns a limiter decision on bucket b into the API's.
func decisionProto(d limiter.Decision, b limits.Bucket) *sluicev1.Decision {
	l := &sluicev1.Limit{Period: durationpb.New(0)}
	if b.Enabled {
		l.Burst, l.Count, l.Period = b.Limit.Burst, b.Limit.Count, durationpb.New(b.Limit.Period)
		l.Source = sluicev1.Limit_DEFAULT
		if b.Override {
			l.Source = sluicev1.Limit_OVERRIDE
		}
	}
	return &sluicev1.Decision{
		Allowed:   d.Allowed,
		Remaining: d.Remaining,
		RetryIn:   durationpb.New(d.RetryIn),
		ResetIn:   durationpb.New(d.ResetIn),
		Limit:     l,
		Bucket:    b.Key,
	}
}

// Results of decisions, as metric label values.
const (
	resultAllowed = "allowed"
	resultDenied  = "denied"
	resultError   = "error"
)

func resultOf(d limiter.Decision) string {
	if d.Allowed {
		return resultAllowed
	}
	return resultDenied
}

// maxLimitLabels bounds the distinct limit label values; past it, and for
// names that are neither built in nor in the loaded files, the label is
// "other".
const maxLimitLabels = 1000

// kvMetrics are the key-value API's Prometheus metrics.
type kvMetrics struct {
	decisions *prometheus.CounterVec
	latency   *prometheus.HistogramVec

	mu     sync.RWMutex // protects labels
	labels map[string]bool
}

func newKVMetrics(reg prometheus.Registerer) *kvMetrics {
	m := &kvMetrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "kv", Name: "decisions_total",
			Help: "Key-value limit decisions, one per transaction. Label limit: a built-in limit name, a name from the loaded limits files, " +
				"or \"other\" (any other name, and every name past 1000). Label result: allowed, denied, error.",
		}, []string{"limit", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sluice", Subsystem: "kv", Name: "decision_duration_seconds",
			Help:    "Time to answer a key-value API call. Label method: check, spend, refund, reset, batch.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"method"}),
		labels: map[string]bool{},
	}
	if reg != nil {
		reg.MustRegister(m.decisions, m.latency)
	}
	return m
}

func (m *kvMetrics) observe(method string, start, end time.Time) {
	m.latency.WithLabelValues(method).Observe(end.Sub(start).Seconds())
}

// count records one decision on the limit name with bucket b (the zero
// Bucket when the name or id did not resolve) under set.
func (m *kvMetrics) count(set *limits.Set, name string, b limits.Bucket, result string) {
	m.decisions.WithLabelValues(m.label(set, name, b), result).Inc()
}

// label returns name when it is a bounded label value: a built-in name, or
// one the limits files know (it has a default, or an override applies).
// Anything else is "other".
func (m *kvMetrics) label(set *limits.Set, name string, b limits.Bucket) string {
	m.mu.RLock()
	ok := m.labels[name]
	m.mu.RUnlock()
	if ok {
		return name
	}
	n := b.Name
	if n.Text != name { // the name or the id did not resolve
		n, _ = limits.ParseName(name)
	}
	_, hasDefault := set.Default(name)
	if n.Text != name || !(n.BuiltIn || hasDefault || b.Override) {
		return "other"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.labels) >= maxLimitLabels {
		return "other"
	}
	m.labels[name] = true
	return name
}

// Retry-After value for a denied decision: whole seconds, rounded up, at
// least 1.
func retryAfter(d time.Duration) int64 {
	return max(int64((d+time.Second-1)/time.Second), 1)
}
