package server

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/internal/tracing"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/limits"
)

// KVOptions configure a KV. The zero value of each optional field gives the
// default stated beside it.
type KVOptions struct {
	// Limiter decides. Required.
	Limiter *limiter.Limiter
	// Clock times calls for metrics; default clock.New().
	Clock clock.Clock
	// Limits returns the limits in force; it is called once per request, so
	// a reload that swaps the set takes effect on the next request. Nil, or
	// a nil *limits.Set, means no defaults and no overrides: every known
	// name is allowed without a check.
	Limits func() *limits.Set
	// Registerer receives the KV's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Logger for internal errors; default slog.Default().
	Logger *slog.Logger
	// Admin guards Refund and Reset; the zero value lets every caller
	// make them.
	Admin AdminAuth
	// Tracer starts a span per call, continuing the caller's trace; nil
	// (tracing off) starts none and costs nothing.
	Tracer *tracing.Tracer
	// RetryJitter lengthens the RetryIn of every denied decision (and so
	// the HTTP Retry-After) by a random 0-3%, as Boulder does, so that
	// callers denied together do not all retry at once. Off by default:
	// the answers are then exact.
	RetryJitter bool
	// Rand returns a number in [0, 1) for the jitter; default
	// math/rand/v2.Float64. Tests set it.
	Rand func() float64
	// Overrides, when set, serves the runtime overrides API, always behind
	// Admin's credentials: over HTTP under /v1/overrides, and over gRPC
	// through OverridesGRPC. Give its Limits as Limits too. Nil: no such
	// API.
	Overrides *Overrides
}

// KV serves the key-value limits API, sluice.v1.Limits, over gRPC; wrap it
// with KVHTTPHandler for HTTP/JSON. Create it with NewKV. It is safe for
// concurrent use.
type KV struct {
	sluicev1.UnimplementedLimitsServer

	limiter *limiter.Limiter
	clock   clock.Clock
	limits  func() *limits.Set
	log     *slog.Logger
	metrics *kvMetrics
	tracer  *tracing.Tracer
	guard   AdminAuth
	jitter  func() float64 // nil: no jitter
	// overrides serves /v1/overrides; nil when off.
	overrides *Overrides
}

var _ sluicev1.LimitsServer = (*KV)(nil)

// NewKV returns a KV. It panics when o.Limiter is nil, a programmer's bug.
func NewKV(o KVOptions) *KV {
	if o.Limiter == nil {
		panic("server.NewKV: nil Limiter") // a wiring bug, not bad input
	}
	if o.Clock == nil {
		o.Clock = clock.New()
	}
	if o.Limits == nil {
		o.Limits = func() *limits.Set { return nil }
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	kv := &KV{limiter: o.Limiter, clock: o.Clock, limits: o.Limits, log: o.Logger, metrics: newKVMetrics(o.Registerer), tracer: o.Tracer, guard: o.Admin, overrides: o.Overrides}
	if o.RetryJitter {
		kv.jitter = o.Rand
		if kv.jitter == nil {
			kv.jitter = rand.Float64
		}
	}
	return kv
}

// maxRetryJitter is the most RetryJitter adds: 3% of the wait, Boulder's
// figure.
const maxRetryJitter = 0.03

// jittered returns d with its RetryIn lengthened by the fraction u of 3%
// when d is denied.
func jittered(d limiter.Decision, u float64) limiter.Decision {
	if !d.Allowed && d.RetryIn > 0 {
		d.RetryIn += time.Duration(float64(d.RetryIn) * maxRetryJitter * u)
	}
	return d
}

// The key-value calls, as metric label values.
const (
	methodCheck  = "check"
	methodSpend  = "spend"
	methodRefund = "refund"
	methodReset  = "reset"
	methodBatch  = "batch"
	// methodBatchRefund and methodBatchReset are batches of refunds and
	// of resets; over HTTP, /v1/batch/refund and /v1/batch/reset (see
	// kvPath).
	methodBatchRefund = "batch_refund"
	methodBatchReset  = "batch_reset"
)

// kvTxn is one transaction of a key-value call as every edge decodes it.
type kvTxn struct {
	name, id string
	cost     *int64 // nil means 1
	kind     limiter.Kind
	// bad is the edge's problem decoding this transaction, if any: the
	// call is refused with it.
	bad error
}

// kvBatch is the limiter's answer to a key-value batch, before an edge
// translates it.
type kvBatch struct {
	decision limiter.Decision // the strictest of the checked transactions'
	bucket   limits.Bucket    // the bucket decision came from; zero when no limit applied
	each     []limiter.Decision
	buckets  []limits.Bucket
}

// decide answers a single key-value call (check, spend, refund, reset) on
// t through the limiter, and records its metrics. It returns the
// transaction's own decision and its bucket, whose key it writes into
// dst's spare capacity when it fits (see resolve).
func (kv *KV) decide(ctx context.Context, method string, t kvTxn, dst []byte) (limiter.Decision, limits.Bucket, error) {
	start := kv.clock.Now()
	set := kv.limits()
	b, txn, _, err := resolve(set, t, dst)
	var d limiter.Decision
	if err == nil {
		switch method {
		case methodCheck:
			d, err = kv.limiter.Check(ctx, txn)
		case methodSpend:
			d, err = kv.limiter.Spend(ctx, txn)
		case methodReset:
			d, err = kv.limiter.Reset(ctx, txn)
		case methodRefund:
			// A refund answers its own decision: whether this bucket got
			// something back.
			var each []limiter.Decision
			if _, each, err = kv.limiter.Refund(ctx, txn); err == nil {
				d = each[0]
			}
		}
	}
	kv.metrics.observe(method, start, kv.clock.Now())
	kv.count(set, err, t, b, d)
	kv.logInternal(method, err)
	if kv.jitter != nil {
		d = jittered(d, kv.jitter())
	}
	return d, b, err
}

// decideBatch answers a key-value batch (methodBatch, methodBatchRefund or
// methodBatchReset) through the limiter, and records its metrics. On
// error, the buckets resolved before it are in the answer.
func (kv *KV) decideBatch(ctx context.Context, method string, txns []kvTxn) (kvBatch, error) {
	start := kv.clock.Now()
	set := kv.limits()
	a, err := kv.batch(ctx, method, set, txns)
	kv.metrics.observe(method, start, kv.clock.Now())
	for i, t := range txns {
		var b limits.Bucket
		var d limiter.Decision
		if i < len(a.buckets) {
			b = a.buckets[i]
		}
		if err == nil {
			d = a.each[i]
		}
		kv.count(set, err, t, b, d)
	}
	kv.logInternal(method, err)
	if err == nil && kv.jitter != nil {
		// One draw per call, so that the combined decision keeps the
		// RetryIn of the transaction it came from.
		u := kv.jitter()
		a.decision = jittered(a.decision, u)
		for i := range a.each {
			a.each[i] = jittered(a.each[i], u)
		}
	}
	return a, err
}

// batch resolves txns under set and applies them: all or nothing for
// methodBatch, each on its own for refunds and resets.
func (kv *KV) batch(ctx context.Context, method string, set *limits.Set, txns []kvTxn) (kvBatch, error) {
	var a kvBatch
	if err := limiter.ValidBatchSize(len(txns)); err != nil {
		return a, err
	}
	a.buckets = make([]limits.Bucket, 0, len(txns))
	in := make([]limiter.Transaction, len(txns))
	// The keys one after another in keys: one allocation for the batch
	// unless they outgrow it.
	keys := make([]byte, 0, batchKeyBytes*len(txns))
	for i, t := range txns {
		b, txn, more, err := resolve(set, t, keys)
		if t.bad != nil {
			err = t.bad
		}
		if err != nil {
			return a, limiter.At(err, "transactions", "transaction", i)
		}
		keys = more
		a.buckets = append(a.buckets, b)
		in[i] = txn
	}
	var err error
	switch method {
	case methodBatchRefund:
		a.decision, a.each, err = kv.limiter.Refund(ctx, in...)
	case methodBatchReset:
		a.decision, a.each, err = kv.limiter.ResetAll(ctx, in...)
	default:
		a.decision, a.each, err = kv.limiter.Batch(ctx, in)
	}
	if err != nil {
		return a, err
	}
	if a.decision.Index >= 0 {
		a.bucket = a.buckets[a.decision.Index]
	}
	return a, nil
}

// count adds one transaction of a call to the decision metrics: its
// result on the limit name, or an error.
func (kv *KV) count(set *limits.Set, err error, t kvTxn, b limits.Bucket, d limiter.Decision) {
	if err != nil {
		kv.metrics.count(set, t.name, b, resultError)
		return
	}
	kv.metrics.count(set, t.name, b, resultOf(d))
}

// logInternal logs an error that is not the caller's doing nor the store's
// unavailability: a bug or an unexpected reply.
func (kv *KV) logInternal(method string, err error) {
	if err != nil && limiter.KindOf(err) == limiter.Internal {
		kv.log.Error("key-value request failed", "method", method, "err", err)
	}
}

// resolve finds the bucket of t's name and id in set and builds its
// transaction; the limiter checks its cost. It appends the bucket's key
// to dst, in its spare capacity when it fits, else in a new array, and
// returns the extended slice. The caller must not write those bytes
// again: the key string the Bucket and the transaction share lives in
// them, with no copy.
func resolve(set *limits.Set, t kvTxn, dst []byte) (limits.Bucket, limiter.Transaction, []byte, error) {
	if t.name == "" {
		return limits.Bucket{}, limiter.Transaction{}, dst, invalidTransaction("name", "missing limit name")
	}
	var b limits.Bucket
	more, err := set.AppendResolve(dst, t.name, t.id, &b)
	if err != nil {
		return limits.Bucket{}, limiter.Transaction{}, dst, limiter.ResolveErr(err)
	}
	if key := more[len(dst):]; len(key) > 0 {
		b.Key = unsafe.String(unsafe.SliceData(key), len(key))
	}
	cost := int64(1)
	switch {
	case t.kind == limiter.ResetBucket:
		cost = 0
	case t.cost != nil:
		cost = *t.cost
	}
	txn := limiter.ForBucket(b, t.id, cost)
	txn.Kind = t.kind
	return b, txn, more, nil
}

// Check implements sluicev1.LimitsServer: it reports whether the request
// would be allowed, spending nothing.
func (kv *KV) Check(ctx context.Context, req *sluicev1.Request) (*sluicev1.Decision, error) {
	return kv.single(ctx, methodCheck, limiter.CheckOnly, req)
}

// Spend implements sluicev1.LimitsServer: it checks the request and spends
// its cost when allowed.
func (kv *KV) Spend(ctx context.Context, req *sluicev1.Request) (*sluicev1.Decision, error) {
	return kv.single(ctx, methodSpend, limiter.CheckAndSpend, req)
}

// Refund implements sluicev1.LimitsServer: it gives the cost back to the
// bucket, never past full; a full bucket is not refunded (not allowed).
func (kv *KV) Refund(ctx context.Context, req *sluicev1.Request) (*sluicev1.Decision, error) {
	return kv.single(ctx, methodRefund, limiter.RefundBucket, req)
}

// Reset implements sluicev1.LimitsServer: it makes the bucket full again.
func (kv *KV) Reset(ctx context.Context, req *sluicev1.Request) (*sluicev1.Decision, error) {
	return kv.single(ctx, methodReset, limiter.ResetBucket, req)
}

// single answers one transaction over gRPC.
func (kv *KV) single(ctx context.Context, method string, kind limiter.Kind, req *sluicev1.Request) (*sluicev1.Decision, error) {
	var span trace.Span
	if kv.tracer != nil {
		ctx, span = kv.tracer.StartGRPC(ctx, kvSpanName(method, false))
	}
	var d limiter.Decision
	var b limits.Bucket
	// The answer and the bucket key's bytes, in one allocation.
	a := new(struct {
		box decisionBox
		key [singleKeyBytes]byte
	})
	err := kv.admin(method, func() error { return kv.guard.allowGRPC(ctx) })
	if err == nil {
		d, b, err = kv.decide(ctx, method, kvTxn{name: req.GetName(), id: req.GetId(), cost: req.Cost, kind: kind}, a.key[:0])
	}
	if err != nil {
		err = grpcError(err)
	}
	if span != nil {
		tracing.End(span, err, tracing.KeyLimitName.String(req.GetName()), tracing.KeyAllowed.Bool(d.Allowed), tracing.KeyGRPCStatus.Int(int(status.Code(err))))
	}
	if err != nil {
		return nil, err
	}
	return a.box.proto(d, b), nil
}

// singleKeyBytes and batchKeyBytes are the room set aside for a bucket
// key in a single call's answer and per transaction in a batch: enough
// for an account id's or an IP address's key (an IPv6 address is at
// most 45 bytes), not for every domain name's.
const (
	singleKeyBytes = 48
	batchKeyBytes  = 24
)

// Batch implements sluicev1.LimitsServer: it applies the transactions all or
// nothing and answers the strictest decision plus one per transaction.
func (kv *KV) Batch(ctx context.Context, req *sluicev1.BatchRequest) (*sluicev1.BatchResponse, error) {
	if kv.tracer != nil {
		var span trace.Span
		ctx, span = kv.tracer.StartGRPC(ctx, kvSpanName(methodBatch, false))
		resp, err := kv.batchGRPC(ctx, methodBatch, req)
		tracing.End(span, err, tracing.KeyTransactions.Int(len(req.GetTransactions())),
			tracing.KeyAllowed.Bool(resp.GetDecision().GetAllowed()), tracing.KeyGRPCStatus.Int(int(status.Code(err))))
		return resp, err
	}
	return kv.batchGRPC(ctx, methodBatch, req)
}

// BatchRefund implements sluicev1.LimitsServer: it refunds each
// transaction's bucket on its own, as Refund does.
func (kv *KV) BatchRefund(ctx context.Context, req *sluicev1.BatchRequest) (*sluicev1.BatchResponse, error) {
	return kv.adminBatchGRPC(ctx, methodBatchRefund, req)
}

// BatchReset implements sluicev1.LimitsServer: it makes each transaction's
// bucket full again.
func (kv *KV) BatchReset(ctx context.Context, req *sluicev1.BatchRequest) (*sluicev1.BatchResponse, error) {
	return kv.adminBatchGRPC(ctx, methodBatchReset, req)
}

// adminBatchGRPC answers BatchRefund and BatchReset, guarded as Refund and
// Reset are.
func (kv *KV) adminBatchGRPC(ctx context.Context, method string, req *sluicev1.BatchRequest) (*sluicev1.BatchResponse, error) {
	var span trace.Span
	if kv.tracer != nil {
		ctx, span = kv.tracer.StartGRPC(ctx, kvSpanName(method, false))
	}
	var resp *sluicev1.BatchResponse
	err := kv.admin(method, func() error { return kv.guard.allowGRPC(ctx) })
	if err == nil {
		resp, err = kv.batchGRPC(ctx, method, req)
	} else {
		err = grpcError(err)
	}
	if span != nil {
		tracing.End(span, err, tracing.KeyTransactions.Int(len(req.GetTransactions())),
			tracing.KeyAllowed.Bool(resp.GetDecision().GetAllowed()), tracing.KeyGRPCStatus.Int(int(status.Code(err))))
	}
	return resp, err
}

// kvPath is the HTTP path of a key-value call: /v1/check, ...,
// /v1/batch/refund.
func kvPath(method string) string {
	return "/v1/" + strings.Replace(method, "_", "/", 1)
}

// kvSpanName is the name of a key-value call's span: its full gRPC method,
// or its HTTP method and path.
func kvSpanName(method string, http bool) string {
	switch {
	case http:
		return "POST " + kvPath(method)
	case method == methodCheck:
		return "sluice.v1.Limits/Check"
	case method == methodSpend:
		return "sluice.v1.Limits/Spend"
	case method == methodRefund:
		return "sluice.v1.Limits/Refund"
	case method == methodReset:
		return "sluice.v1.Limits/Reset"
	case method == methodBatchRefund:
		return "sluice.v1.Limits/BatchRefund"
	case method == methodBatchReset:
		return "sluice.v1.Limits/BatchReset"
	}
	return "sluice.v1.Limits/Batch"
}

// batchGRPC is Batch, BatchRefund or BatchReset, as method says.
func (kv *KV) batchGRPC(ctx context.Context, method string, req *sluicev1.BatchRequest) (*sluicev1.BatchResponse, error) {
	in := req.GetTransactions()
	txns := make([]kvTxn, len(in))
	for i, t := range in {
		txns[i] = kvTxn{name: t.GetName(), id: t.GetId(), cost: t.Cost}
		if method != methodBatch {
			txns[i].kind = limiter.RefundBucket
			if method == methodBatchReset {
				txns[i].kind = limiter.ResetBucket
			}
			if t.GetKind() != sluicev1.Transaction_CHECK_AND_SPEND {
				txns[i].bad = invalidTransaction("kind", "kind %s is not allowed in %s, leave it unset", t.GetKind(), kvSpanName(method, false))
			}
			continue
		}
		switch t.GetKind() {
		case sluicev1.Transaction_CHECK_AND_SPEND:
			txns[i].kind = limiter.CheckAndSpend
		case sluicev1.Transaction_CHECK_ONLY:
			txns[i].kind = limiter.CheckOnly
		case sluicev1.Transaction_SPEND_ONLY:
			txns[i].kind = limiter.SpendOnly
		default:
			txns[i].bad = invalidTransaction("kind", "invalid kind %d, must be CHECK_AND_SPEND, CHECK_ONLY or SPEND_ONLY", t.GetKind())
		}
	}
	a, err := kv.decideBatch(ctx, method, txns)
	if err != nil {
		return nil, grpcError(err)
	}
	boxes := make([]decisionBox, 1+len(a.each))
	resp := &sluicev1.BatchResponse{Decision: boxes[0].proto(a.decision, a.bucket), Results: make([]*sluicev1.Decision, len(a.each))}
	for i := range a.each {
		resp.Results[i] = boxes[1+i].proto(a.each[i], a.buckets[i])
	}
	return resp, nil
}

// admin checks, for the calls that give capacity back (refund, reset and
// their batches), the caller's credentials with check; other calls pass.
func (kv *KV) admin(method string, check func() error) error {
	switch method {
	case methodRefund, methodReset, methodBatchRefund, methodBatchReset:
		return check()
	}
	return nil
}

// decisionBox holds a decision's gRPC answer with the messages it points
// to, so that one allocation makes them all: the Decision, its Limit and
// its three Durations (six allocations otherwise).
type decisionBox struct {
	decision                 sluicev1.Decision
	limit                    sluicev1.Limit
	retryIn, resetIn, period durationpb.Duration
}

// proto translates a limiter decision on bucket b into the gRPC API's,
// built in x: the one place where a key-value decision becomes a
// protobuf. x must be new, as the answer points into it.
func (x *decisionBox) proto(d limiter.Decision, b limits.Bucket) *sluicev1.Decision {
	l := &x.limit
	var period time.Duration
	if b.Enabled {
		l.Burst, l.Count, period = b.Limit.Burst, b.Limit.Count, b.Limit.Period
		l.Source = sluicev1.Limit_DEFAULT
		if b.Override {
			l.Source = sluicev1.Limit_OVERRIDE
		}
	}
	l.Period = setDuration(&x.period, period)
	p := &x.decision
	p.Allowed, p.Remaining = d.Allowed, d.Remaining
	p.RetryIn, p.ResetIn = setDuration(&x.retryIn, d.RetryIn), setDuration(&x.resetIn, d.ResetIn)
	p.Limit, p.Bucket = l, b.Key
	return p
}

// setDuration sets p to d, as durationpb.New does for a new one, and
// returns p.
func setDuration(p *durationpb.Duration, d time.Duration) *durationpb.Duration {
	p.Seconds, p.Nanos = int64(d/time.Second), int32(d%time.Second)
	return p
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

	// observers holds latency's series by method, each made on its first
	// use. WithLabelValues hashes its labels and takes the vector's lock
	// on every call; a read of this map takes neither.
	observers sync.Map // method string → prometheus.Observer

	mu     sync.RWMutex // protects labels
	labels map[string]*resultCounters
	other  resultCounters // the counters of label "other"
}

// resultCounters are one limit label's decision counters by result
// (allowed, denied, error), each made on its first use, so that the
// metrics show only the results seen.
type resultCounters [3]atomic.Pointer[prometheus.Counter]

func newKVMetrics(reg prometheus.Registerer) *kvMetrics {
	m := &kvMetrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "kv", Name: "decisions_total",
			Help: "Key-value limit decisions, one per transaction. Label limit: a built-in limit name, a name from the loaded limits files, " +
				"or \"other\" (any other name, and every name past 1000). Label result: allowed, denied, error.",
		}, []string{"limit", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sluice", Subsystem: "kv", Name: "decision_duration_seconds",
			Help:    "Time to answer a key-value API call. Label method: check, spend, refund, reset, batch, batch_refund, batch_reset, override_list, override_get, override_put, override_delete.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"method"}),
		labels: map[string]*resultCounters{},
	}
	if reg != nil {
		reg.MustRegister(m.decisions, m.latency)
	}
	return m
}

func (m *kvMetrics) observe(method string, start, end time.Time) {
	o, ok := m.observers.Load(method)
	if !ok {
		o, _ = m.observers.LoadOrStore(method, m.latency.WithLabelValues(method))
	}
	o.(prometheus.Observer).Observe(end.Sub(start).Seconds())
}

// count records one decision on the limit name with bucket b (the zero
// Bucket when the name or id did not resolve) under set.
func (m *kvMetrics) count(set *limits.Set, name string, b limits.Bucket, result string) {
	m.mu.RLock()
	cs := m.labels[name]
	m.mu.RUnlock()
	label := name
	if cs == nil {
		if label = m.label(set, name, b); label == name {
			m.mu.RLock()
			cs = m.labels[name]
			m.mu.RUnlock()
		} else {
			cs = &m.other
		}
	}
	i := 2 // resultError
	switch result {
	case resultAllowed:
		i = 0
	case resultDenied:
		i = 1
	}
	c := cs[i].Load()
	if c == nil {
		// Two callers may both get here: WithLabelValues gives both the
		// same series.
		made := m.decisions.WithLabelValues(label, result)
		c = &made
		cs[i].Store(c)
	}
	(*c).Inc()
}

// label returns name when it is a bounded label value: a built-in name, or
// one the limits files know (it has a default, or an override applies).
// Anything else is "other".
func (m *kvMetrics) label(set *limits.Set, name string, b limits.Bucket) string {
	m.mu.RLock()
	ok := m.labels[name] != nil
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
	if m.labels[name] != nil {
		return name
	}
	if len(m.labels) >= maxLimitLabels {
		return "other"
	}
	m.labels[name] = new(resultCounters)
	return name
}
