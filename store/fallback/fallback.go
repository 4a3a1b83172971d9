// Package fallback keeps rate limiting answering when its store cannot: a
// store.Store wrapper that sends every batch to a primary store (Redis, in
// practice) and, when the primary is unreachable, answers by a Policy
// instead (--on-store-error): return the error, allow everything, deny
// everything, or decide with a local (in-memory) store.
//
// The wrapper tracks the primary's health. The first failure that wraps
// store.ErrUnavailable marks the primary down; from then on batches are
// answered by the policy at once, without waiting on the primary, while a
// background probe pings the primary every ProbeInterval. The first
// successful ping marks it up again and batches go back to it: recovery
// needs no restart and no new Store. Healthy reports the state for a
// health check.
package fallback

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/store"
)

// Policy says how a batch is answered while the primary store is
// unavailable.
type Policy uint8

const (
	// Error returns an error wrapping store.ErrUnavailable: the caller
	// decides (the gRPC and HTTP servers answer UNAVAILABLE / 503). It is
	// the zero value.
	Error Policy = iota
	// Allow allows every operation, with Remaining the full burst (GCRA) or
	// limit (window): fail open.
	Allow
	// Deny denies every operation, with RetryIn Options.DenyRetryIn: fail
	// closed.
	Deny
	// Local applies the batch to the local store: limits keep being
	// enforced, per process instead of globally, from an empty state.
	Local
)

var policyNames = [...]string{Error: "error", Allow: "allow", Deny: "deny", Local: "local"}

// String returns the policy's flag value: error, allow, deny or local.
func (p Policy) String() string {
	if int(p) < len(policyNames) {
		return policyNames[p]
	}
	return fmt.Sprintf("policy(%d)", uint8(p))
}

// ParsePolicy reads a flag value: error, allow, deny or local.
func ParsePolicy(s string) (Policy, error) {
	for p, name := range policyNames {
		if strings.EqualFold(s, name) {
			return Policy(p), nil
		}
	}
	return Error, fmt.Errorf("unknown store error policy %q, must be one of error, allow, deny, local", s)
}

// Defaults for Options.
const (
	DefaultDenyRetryIn   = time.Second
	DefaultProbeInterval = time.Second
	DefaultProbeTimeout  = time.Second
)

// Options tune a Store. The zero value gives the defaults.
type Options struct {
	// Timeout, when positive, bounds each call to the primary; when it
	// passes, the batch is answered by the policy. The primary's own
	// timeout (redis.Options.Timeout) applies as well. Default 0: only the
	// primary's and the caller's.
	Timeout time.Duration
	// DenyRetryIn is RetryIn (and ResetIn) of a denial under the Deny
	// policy. Default 1s; must not be negative.
	DenyRetryIn time.Duration
	// ProbeInterval is how often a primary marked down is pinged. Default
	// 1s.
	ProbeInterval time.Duration
	// ProbeTimeout bounds each probe ping. Default 1s.
	ProbeTimeout time.Duration
	// Registerer receives the metrics; nil registers none.
	Registerer prometheus.Registerer
	// Logger logs the primary going down and up; nil logs nothing.
	Logger *slog.Logger
}

// Store is a store.Store that falls back on a policy when its primary is
// unavailable. Create it with New; it is safe for concurrent use.
type Store struct {
	store.ForwardOverrides // to the primary

	primary store.Store
	local   store.Store // nil unless the policy is Local
	policy  Policy
	o       Options
	log     *slog.Logger
	m       *metrics

	healthy atomic.Bool
	probing atomic.Bool // a probe goroutine is running
	stop    chan struct{}
	wg      sync.WaitGroup // the probe goroutine
	closed  sync.Once
}

var _ store.Store = (*Store)(nil)

// errDown answers calls made while the primary is marked down.
var errDown = fmt.Errorf("%w: primary store is down, probing", store.ErrUnavailable)

// New wraps primary. local is required for the Local policy and unused
// otherwise. The primary starts out healthy.
func New(primary store.Store, policy Policy, local store.Store, o Options) (*Store, error) {
	if primary == nil {
		return nil, errors.New("fallback: no primary store")
	}
	if int(policy) >= len(policyNames) {
		return nil, fmt.Errorf("fallback: unknown policy %d", policy)
	}
	if policy == Local && local == nil {
		return nil, errors.New("fallback: the local policy needs a local store")
	}
	if policy != Local {
		local = nil
	}
	if o.DenyRetryIn < 0 || o.ProbeInterval < 0 || o.ProbeTimeout < 0 || o.Timeout < 0 {
		return nil, errors.New("fallback: negative duration in options")
	}
	if o.DenyRetryIn == 0 {
		o.DenyRetryIn = DefaultDenyRetryIn
	}
	if o.ProbeInterval == 0 {
		o.ProbeInterval = DefaultProbeInterval
	}
	if o.ProbeTimeout == 0 {
		o.ProbeTimeout = DefaultProbeTimeout
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	m, err := newMetrics(o.Registerer, policy)
	if err != nil {
		return nil, err
	}
	s := &Store{ForwardOverrides: store.ForwardOverrides{To: primary}, primary: primary, local: local, policy: policy, o: o, log: log, m: m, stop: make(chan struct{})}
	s.healthy.Store(true)
	m.up.Set(1)
	return s, nil
}

// Healthy reports whether the primary is believed reachable: true until a
// call or ping fails with store.ErrUnavailable, then false until a probe
// succeeds.
func (s *Store) Healthy() bool { return s.healthy.Load() }

// Policy returns the policy applied while the primary is down.
func (s *Store) Policy() Policy { return s.policy }

// Do sends b to the primary while it is healthy. When the primary fails
// with an error wrapping store.ErrUnavailable or its own deadline, or is
// already marked down, Do answers by the policy; other errors
// (store.ErrBadBatch) are returned as they are. A call whose own context
// ends first (the caller's deadline or cancellation) is answered by the
// policy, alone: it never marks the primary down. A bad batch is refused with store.ErrBadBatch
// under every policy, the primary down or not.
func (s *Store) Do(ctx context.Context, now time.Time, b store.Batch, out []store.Result) error {
	if !s.healthy.Load() {
		return s.fallBack(ctx, now, b, out, errDown)
	}
	pctx := ctx
	if s.o.Timeout > 0 {
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeout(ctx, s.o.Timeout)
		defer cancel()
	}
	err := s.primary.Do(pctx, now, b, out)
	if err == nil {
		return nil
	}
	if clock.Ended(ctx) {
		// The caller's own deadline or cancellation, checked before
		// anything else: this call is answered by the policy, alone. It
		// says nothing about the primary, which stays up for everyone
		// else, even though the primary (store/redis) reports a cut-short
		// call as unavailable.
		return s.fallBack(ctx, now, b, out, err)
	}
	switch {
	case errors.Is(err, store.ErrUnavailable):
		s.markDown(err)
	case errors.Is(err, context.DeadlineExceeded):
		if ctx.Err() == nil {
			// Our timeout, not the caller's: the primary is too slow.
			s.markDown(err)
		}
	default:
		return err
	}
	return s.fallBack(ctx, now, b, out, err)
}

// fallBack answers b by the policy; cause is why the primary did not. A
// batch no store accepts is refused with store.ErrBadBatch first, as the
// primary would refuse it, whatever the policy.
func (s *Store) fallBack(ctx context.Context, now time.Time, b store.Batch, out []store.Result, cause error) error {
	if err := b.Check(out); err != nil {
		return err
	}
	s.m.answers.Inc()
	switch s.policy {
	case Local:
		return s.local.Do(ctx, now, b, out)
	case Allow, Deny:
		for i := range b.Ops {
			if s.policy == Deny {
				out[i] = store.Result{RetryIn: s.o.DenyRetryIn, ResetIn: s.o.DenyRetryIn}
				continue
			}
			op := &b.Ops[i]
			rem := op.Limit.Burst
			if op.Algorithm == store.FixedWindow {
				rem = op.Window.Limit
			}
			out[i] = store.Result{Allowed: true, Remaining: rem}
		}
		return nil
	}
	if !errors.Is(cause, store.ErrUnavailable) {
		cause = fmt.Errorf("%w: %w", store.ErrUnavailable, cause)
	}
	return cause
}

// markDown records the primary as unavailable and starts the probe.
func (s *Store) markDown(cause error) {
	if s.healthy.CompareAndSwap(true, false) {
		s.m.up.Set(0)
		s.m.transitions.WithLabelValues("down").Inc()
		s.log.Warn("primary store unavailable; answering by policy until it is back",
			"policy", s.policy.String(), "err", cause)
	}
	if s.probing.CompareAndSwap(false, true) {
		s.wg.Add(1)
		go s.probe()
	}
}

// markUp records the primary as reachable again.
func (s *Store) markUp() {
	if s.healthy.CompareAndSwap(false, true) {
		s.m.up.Set(1)
		s.m.transitions.WithLabelValues("up").Inc()
		s.log.Info("primary store reachable again")
	}
}

// probe pings the primary every ProbeInterval until it answers or the
// store is closed.
func (s *Store) probe() {
	defer s.wg.Done()
	t := time.NewTicker(s.o.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			s.probing.Store(false)
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.o.ProbeTimeout)
		err := s.primary.Ping(ctx)
		cancel()
		if err == nil {
			// Clear probing first: a failure right after the recovery must
			// be able to start a new probe.
			s.probing.Store(false)
			s.markUp()
			return
		}
	}
}

// Ping pings the primary and updates the health state with the answer.
func (s *Store) Ping(ctx context.Context) error {
	err := s.primary.Ping(ctx)
	switch {
	case err == nil:
		s.markUp()
	case errors.Is(err, store.ErrUnavailable):
		s.markDown(err)
	}
	return err
}

// Close stops the probe and closes the primary and the local store.
func (s *Store) Close() error {
	var err error
	s.closed.Do(func() {
		close(s.stop)
		s.wg.Wait()
		err = s.primary.Close()
		if s.local != nil {
			err = errors.Join(err, s.local.Close())
		}
	})
	return err
}

type metrics struct {
	answers     prometheus.Counter
	up          prometheus.Gauge
	transitions *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, p Policy) (*metrics, error) {
	m := &metrics{
		answers: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "sluice_store_fallback_answers_total",
			Help:        "Batches answered by the store error policy (label policy: error, allow, deny or local) because the primary store was unavailable.",
			ConstLabels: prometheus.Labels{"policy": p.String()},
		}),
		up: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_store_primary_up",
			Help: "1 while the primary store is believed reachable, 0 while it is marked down and probed.",
		}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_store_primary_transitions_total",
			Help: "Changes of the primary store's health, by the state entered (to: up or down).",
		}, []string{"to"}),
	}
	m.transitions.WithLabelValues("up")
	m.transitions.WithLabelValues("down")
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.answers, m.up, m.transitions} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("fallback: register metrics: %w", err)
		}
	}
	return m, nil
}
