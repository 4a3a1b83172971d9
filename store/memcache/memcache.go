// Package memcache is a store.Store backed by memcached, as
// envoyproxy/ratelimit's BACKEND_TYPE=memcache: one or more servers given
// as host:port or found through a DNS SRV record, keys spread over them by
// the client (github.com/bradfitz/gomemcache, the client
// envoyproxy/ratelimit uses, so both pick the same server for a key given
// the same server list in the same order).
//
// # Keys, values and expiry
//
//   - Fixed-window bucket: key KeyPrefix + Op.Key + the window's start in
//     decimal Unix seconds, envoyproxy/ratelimit's layout (for the Envoy
//     front door "domain_key1_value1_..._1767225600"); value the hit
//     counter as a decimal integer, so that memcached's incr works on it;
//     expiry the window length plus a random jitter of up to
//     Options.ExpirationJitter, set when the window's first hit creates
//     the key.
//   - GCRA bucket: key KeyPrefix + Op.Key; value the TAT in decimal Unix
//     nanoseconds; expiry the time until the TAT plus one second, rounded
//     up to whole seconds. A TAT at or before now (a bucket given back to
//     full is written as TAT 0) counts as missing.
//
// memcached reads an expiry of more than 30 days as an absolute Unix time:
// such expiries are sent as the caller's now plus the TTL.
//
// A key memcached would refuse (over 250 bytes, or with a space or a
// control character, as an Envoy descriptor value may have) is replaced by
// KeyPrefix + "sluice-sha256-" + the hex SHA-256 of the whole key. Such
// keys are not shared with envoyproxy/ratelimit, which fails on them.
//
// # Decisions
//
// A fixed-window hit is one incr of the window's key (then add when the key
// is missing, then incr again if another caller's add won), and its Result
// is computed from the count incr returns, as store.Evaluate would: two
// callers can never both take a window's last hit. envoyproxy/ratelimit
// instead reads the counters with one get per server, answers, and
// increments afterwards in the background, so concurrent requests may both
// pass the last hit; Sluice increments before answering, which costs a
// round trip per window in the request's path but counts exactly.
//
// Every other operation (GCRA buckets, fixed-window checks, refunds and
// resets) reads the bucket with gets, decides with store.Evaluate, and
// writes with cas (add when the bucket is missing), starting again when
// another caller wrote in between, at most Options.MaxAttempts times: a
// bucket is only ever changed from the state the decision read, so
// concurrent spends never over-admit. A bucket that is still contended
// after MaxAttempts fails the batch with an error wrapping
// store.ErrUnavailable (the fallback policy answers), never a guess.
//
// # Batches
//
// memcached has no transactions: each operation of a batch is atomic on its
// own bucket, and the operations run one after another. An all-or-nothing
// batch is all-or-nothing in outcome, not in isolation, like a batch across
// Redis Cluster slots (see store/redis): its spends and checks run first;
// when one that decides is denied, the GCRA tokens the others took are given
// back by a compensating refund (those after the denied one are decided
// without taking anything); its GCRA refunds and all its resets run
// only after every deciding operation was allowed (else they are evaluated
// but not applied). Between the spend and the refund other callers may see
// the tokens taken (the error is on the safe side); if the refund fails the
// tokens stay taken until their TAT passes. Fixed-window hits and refunds
// are applied whatever the batch decides, as store.Batch says.
//
// # Failures
//
// Each round trip to memcached is bounded by Options.Timeout, and a whole
// Do by Options.Timeout too (checked between round trips, so a call may
// overrun it by at most one round trip). Errors from an unreachable,
// timed-out or failing server wrap store.ErrUnavailable.
package memcache

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/window"
)

var _ store.Store = (*Store)(nil)

// Defaults of Options.
const (
	// DefaultTimeout bounds each round trip and each Do.
	DefaultTimeout = 100 * time.Millisecond
	// DefaultMaxIdleConns is the number of idle connections kept per
	// server, gomemcache's (and envoyproxy/ratelimit's) default.
	DefaultMaxIdleConns = 2
	// DefaultMaxAttempts bounds the gets/cas attempts on one bucket.
	DefaultMaxAttempts = 100
)

// maxRelativeExpiry is the longest expiry memcached takes as relative; a
// larger number is an absolute Unix time.
const maxRelativeExpiry = 30 * 24 * 60 * 60

// Options configure a Store. Either Addrs or SRV is required; every other
// field has a usable zero value.
type Options struct {
	// Addrs are the servers, host:port. Every Sluice (and
	// envoyproxy/ratelimit) instance sharing the servers MUST list them in
	// the same order, so that a key lives on the same server for all.
	Addrs []string
	// SRV is a DNS SRV name, _service._proto.name, whose targets are the
	// servers (sorted, as envoyproxy/ratelimit sorts them). Not with Addrs.
	SRV string
	// SRVRefresh, when positive, looks SRV up again this often and uses the
	// new servers; a failed lookup keeps the old ones. Default 0: looked up
	// once.
	SRVRefresh time.Duration
	// Resolver looks SRV up; default net.DefaultResolver.
	Resolver *net.Resolver
	// MaxIdleConns is the number of idle connections kept per server;
	// default DefaultMaxIdleConns (2).
	MaxIdleConns int
	// Timeout bounds each round trip (connecting included) and each Do;
	// default DefaultTimeout (100ms); range 1ms to 1m.
	Timeout time.Duration
	// TLS, when not nil, connects with TLS.
	TLS *tls.Config
	// KeyPrefix is put before every key; default empty (as
	// envoyproxy/ratelimit's CACHE_KEY_PREFIX).
	KeyPrefix string
	// ExpirationJitter, when positive, adds a random 0 to ExpirationJitter
	// (whole seconds) to each new window's expiry, as envoyproxy/ratelimit's
	// EXPIRATION_JITTER_MAX_SECONDS, so that windows do not all expire at
	// once. Default 0.
	ExpirationJitter time.Duration
	// MaxAttempts bounds the gets/cas attempts on one contended bucket;
	// default DefaultMaxAttempts (100).
	MaxAttempts int
	// Logger receives SRV refresh failures; default slog.Default().
	Logger *slog.Logger
	// Registerer receives the store's metrics (sluice_memcache_*); nil
	// registers none.
	Registerer prometheus.Registerer
	// Clock times calls for the latency metric. Default clock.New().
	Clock clock.Clock
}

// Store is a memcached-backed store.Store. Create it with New; it is safe
// for concurrent use.
type Store struct {
	client      *memcache.Client
	servers     *memcache.ServerList
	timeout     time.Duration
	prefix      string
	jitter      int64 // seconds
	maxAttempts int
	clock       clock.Clock
	m           *metrics
	stop        chan struct{} // closed by Close; ends the SRV refresh
	done        sync.WaitGroup
	closeOnce   sync.Once
}

var srvName = regexp.MustCompile(`^_([^.]+)\._([^.]+)\.(.+)$`)

// New returns a Store on the servers o names, once they all answer a ping
// within the timeout (else an error wrapping store.ErrUnavailable).
func New(ctx context.Context, o Options) (*Store, error) {
	switch {
	case len(o.Addrs) == 0 && o.SRV == "":
		return nil, errors.New("memcache: no server, want host:port addresses or an SRV name")
	case len(o.Addrs) > 0 && o.SRV != "":
		return nil, errors.New("memcache: both addresses and an SRV name given, want one of them")
	case o.SRV != "" && !srvName.MatchString(o.SRV):
		return nil, fmt.Errorf("memcache: SRV name %q is not of the form _service._proto.name", o.SRV)
	case o.SRVRefresh < 0:
		return nil, fmt.Errorf("memcache: SRV refresh %s is negative", o.SRVRefresh)
	case o.MaxIdleConns < 0:
		return nil, fmt.Errorf("memcache: max idle connections %d is negative", o.MaxIdleConns)
	case o.ExpirationJitter < 0:
		return nil, fmt.Errorf("memcache: expiration jitter %s is negative", o.ExpirationJitter)
	case o.MaxAttempts < 0:
		return nil, fmt.Errorf("memcache: max attempts %d is negative", o.MaxAttempts)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Timeout < time.Millisecond || o.Timeout > time.Minute {
		return nil, fmt.Errorf("memcache: timeout %s out of range, must be between 1ms and 1m", o.Timeout)
	}
	if o.MaxIdleConns == 0 {
		o.MaxIdleConns = DefaultMaxIdleConns
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.Resolver == nil {
		o.Resolver = net.DefaultResolver
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = clock.New()
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	s := &Store{
		servers:     new(memcache.ServerList),
		timeout:     o.Timeout,
		prefix:      o.KeyPrefix,
		jitter:      int64(o.ExpirationJitter / time.Second),
		maxAttempts: o.MaxAttempts,
		clock:       o.Clock,
		m:           m,
		stop:        make(chan struct{}),
	}
	addrs := o.Addrs
	if o.SRV != "" {
		if addrs, err = lookup(ctx, o.Resolver, o.SRV); err != nil {
			return nil, fmt.Errorf("%w: memcache: %w", store.ErrUnavailable, err)
		}
	}
	if err := s.servers.SetServers(addrs...); err != nil {
		return nil, fmt.Errorf("memcache: servers %s: %w", strings.Join(addrs, ","), err)
	}
	s.client = memcache.NewFromSelector(s.servers)
	s.client.Timeout = o.Timeout
	s.client.MaxIdleConns = o.MaxIdleConns
	if o.TLS != nil {
		td := &tls.Dialer{NetDialer: &net.Dialer{Timeout: o.Timeout}, Config: o.TLS}
		s.client.DialContext = td.DialContext
	}
	if err := s.Ping(ctx); err != nil {
		return nil, err
	}
	if o.SRV != "" && o.SRVRefresh > 0 {
		s.done.Add(1)
		go s.refresh(o.Resolver, o.SRV, o.SRVRefresh, o.Logger)
	}
	return s, nil
}

// lookup resolves an SRV name to its targets' host:port (the target
// without its trailing dot), sorted.
func lookup(ctx context.Context, r *net.Resolver, name string) ([]string, error) {
	m := srvName.FindStringSubmatch(name)
	_, srvs, err := r.LookupSRV(ctx, m[1], m[2], m[3])
	if err != nil {
		return nil, fmt.Errorf("look up SRV %s: %w", name, err)
	}
	if len(srvs) == 0 {
		return nil, fmt.Errorf("look up SRV %s: no target", name)
	}
	addrs := make([]string, len(srvs))
	for i, srv := range srvs {
		// Without the root's dot, so that the hosts file resolves the
		// target as well as DNS does.
		addrs[i] = net.JoinHostPort(strings.TrimSuffix(srv.Target, "."), strconv.Itoa(int(srv.Port)))
	}
	slices.Sort(addrs)
	return addrs, nil
}

// refresh looks name up every period until Close and switches to the
// servers found; a failed lookup keeps the current servers.
func (s *Store) refresh(r *net.Resolver, name string, period time.Duration, log *slog.Logger) {
	defer s.done.Done()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), max(s.timeout, time.Second))
		addrs, err := lookup(ctx, r, name)
		cancel()
		if err == nil {
			err = s.servers.SetServers(addrs...)
		}
		if err != nil {
			log.Warn("memcache: SRV refresh failed, keeping the servers", "srv", name, "err", err)
		}
	}
}

// Ping reports whether every server answers within the timeout.
func (s *Store) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: memcache: %w", store.ErrUnavailable, err)
	}
	if err := s.client.Ping(); err != nil {
		return s.fail("ping", err)
	}
	return nil
}

// Close stops the SRV refresh and closes the idle connections. Do must not
// be called afterwards.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		s.done.Wait()
	})
	return s.client.Close()
}

// errBadValue marks a bucket whose value is not a number.
var errBadValue = errors.New("not a decimal number")

// fail wraps err from a round trip: errors of a value Sluice did not write
// are returned as they are, every other (network, timeout, server error)
// wraps store.ErrUnavailable.
func (s *Store) fail(what string, err error) error {
	if errors.Is(err, errBadValue) {
		s.m.errors.WithLabelValues(kindBadValue).Inc()
		return fmt.Errorf("memcache: %s: %w", what, err)
	}
	s.m.errors.WithLabelValues(kindUnavailable).Inc()
	return fmt.Errorf("%w: memcache: %s: %w", store.ErrUnavailable, what, err)
}

// contended is the error of a bucket still contended after the last
// attempt.
func (s *Store) contended(key string) error {
	s.m.errors.WithLabelValues(kindContended).Inc()
	return fmt.Errorf("%w: memcache: bucket %q still contended after %d attempts", store.ErrUnavailable, key, s.maxAttempts)
}

// Do applies b at now; see the package doc for what holds. Errors from an
// unreachable memcached wrap store.ErrUnavailable.
func (s *Store) Do(ctx context.Context, now time.Time, b store.Batch, out []store.Result) error {
	if err := b.Check(out); err != nil {
		return err
	}
	ops := b.Ops
	if len(ops) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	defer func(start time.Time) { s.m.observe(s.clock.Now().Sub(start)) }(s.clock.Now())
	aon := b.AllOrNothing
	deferred, denied := false, false
	for i := range ops {
		op := &ops[i]
		if aon && deferrable(op) {
			deferred = true
			continue
		}
		// Once an all-or-nothing batch is denied, its later GCRA
		// operations are only decided: what they would take would be
		// given back.
		write := !denied || op.Algorithm != store.GCRA
		if err := s.apply(ctx, now, op, &out[i], write); err != nil {
			if aon {
				s.compensate(now, ops[:i], out)
			}
			return err
		}
		if aon && op.Decides() && !out[i].Allowed {
			denied = true
		}
	}
	if !aon {
		return nil
	}
	if denied {
		s.m.compensations.Inc()
		if err := s.compensate(now, ops, out); err != nil {
			return err
		}
	}
	if !deferred {
		return nil
	}
	for i := range ops {
		if !deferrable(&ops[i]) {
			continue
		}
		if err := s.apply(ctx, now, &ops[i], &out[i], !denied); err != nil {
			return err
		}
	}
	return nil
}

// deferrable reports whether op waits, in an all-or-nothing batch, until
// every operation that decides was allowed: a GCRA refund (its tokens
// could not be taken back) or a reset (it cannot be undone).
func deferrable(op *store.Op) bool {
	return op.Kind == store.Reset || (op.Algorithm == store.GCRA && op.Kind == store.Refund)
}

// compensate gives back the GCRA tokens that ops took (their results say
// Applied) and marks them not applied. It has a timeout of its own: it
// runs when the batch's may be spent.
func (s *Store) compensate(now time.Time, ops []store.Op, out []store.Result) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	var errs []error
	for i := range ops {
		op := &ops[i]
		if op.Algorithm != store.GCRA || !out[i].Applied || (op.Kind != store.Spend && op.Kind != store.SpendOnly) {
			continue
		}
		back := *op
		back.Kind = store.Refund
		var r store.Result
		if err := s.apply(ctx, now, &back, &r, true); err != nil {
			errs = append(errs, err)
			continue
		}
		out[i].Applied = false
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("compensate a denied all-or-nothing batch: %w", err)
	}
	return nil
}

// apply decides op at now and, when write, applies it; out receives its
// Result (Applied false when not write).
func (s *Store) apply(ctx context.Context, now time.Time, op *store.Op, out *store.Result, write bool) error {
	if op.Algorithm == store.FixedWindow && (op.Kind == store.Spend || op.Kind == store.SpendOnly) && op.Cost > 0 && write {
		return s.hit(ctx, now, op, out)
	}
	var start int64
	key := s.prefix + op.Key
	if op.Algorithm == store.FixedWindow {
		start = window.Start(now, int64(op.Window.Length/time.Second))
		key += strconv.FormatInt(start, 10)
	}
	key = legal(s.prefix, key)
	for attempt := range s.maxAttempts {
		if err := ctx.Err(); err != nil {
			return s.fail(op.Key, err)
		}
		it, err := s.client.Get(key)
		missing := errors.Is(err, memcache.ErrCacheMiss)
		if err != nil && !missing {
			return s.fail(op.Key, err)
		}
		var prior store.State
		if !missing {
			if prior, err = decode(op, it.Value, start); err != nil {
				return s.fail(op.Key, err)
			}
		}
		r, w, st := op.Evaluate(now, prior)
		if !write {
			r.Applied = false
		}
		if !write || w == store.Keep || (w == store.Remove && missing) {
			*out = r
			return nil
		}
		value, ttl := s.encode(op, now, w, st)
		if missing {
			err = s.client.Add(&memcache.Item{Key: key, Value: value, Expiration: expiry(now, ttl)})
		} else {
			it.Value, it.Expiration, it.Flags = value, expiry(now, ttl), 0
			err = s.client.CompareAndSwap(it)
		}
		switch {
		case err == nil:
			*out = r
			return nil
		case errors.Is(err, memcache.ErrNotStored), errors.Is(err, memcache.ErrCASConflict), errors.Is(err, memcache.ErrCacheMiss):
			// Another caller wrote first: decide again on its state.
			s.m.conflicts.Inc()
			backoff(attempt)
		default:
			return s.fail(op.Key, err)
		}
	}
	return s.contended(op.Key)
}

// backoff sleeps a little after the attempt-th lost race (0-based), more
// as the losses pile up, at random so that racing callers spread out.
func backoff(attempt int) {
	if attempt < 2 {
		return
	}
	d := time.Duration(min(attempt, 20)) * 50 * time.Microsecond
	time.Sleep(rand.N(d) + d/2)
}

// hit adds op.Cost hits to op's window with incr, adding the key on the
// window's first hit.
func (s *Store) hit(ctx context.Context, now time.Time, op *store.Op, out *store.Result) error {
	length := int64(op.Window.Length / time.Second)
	start := window.Start(now, length)
	key := legal(s.prefix, s.prefix+op.Key+strconv.FormatInt(start, 10))
	cost := uint64(op.Cost)
	var after uint64
	for attempt := range s.maxAttempts {
		if err := ctx.Err(); err != nil {
			return s.fail(op.Key, err)
		}
		n, err := s.client.Increment(key, cost)
		if err == nil {
			after = n
			break
		}
		if !errors.Is(err, memcache.ErrCacheMiss) {
			return s.fail(op.Key, err)
		}
		ttl := length
		if s.jitter > 0 {
			ttl += rand.Int64N(s.jitter + 1)
		}
		err = s.client.Add(&memcache.Item{Key: key, Value: strconv.AppendUint(nil, cost, 10), Expiration: expiry(now, ttl)})
		if err == nil {
			after = cost
			break
		}
		if !errors.Is(err, memcache.ErrNotStored) {
			return s.fail(op.Key, err)
		}
		// Another caller added the key first: incr it now.
		s.m.conflicts.Inc()
		if attempt+1 == s.maxAttempts {
			return s.contended(op.Key)
		}
	}
	// A counter past what an int64 holds saturates, as window.Hit does.
	count := int64(min(after, math.MaxInt64)) - op.Cost
	if after < cost {
		count = 0 // incr wrapped around 2^64
	}
	r, _, _ := op.Evaluate(now, store.State{Exists: true, Start: start, Count: max(count, 0)})
	*out = r
	return nil
}

// decode reads a bucket's stored value.
func decode(op *store.Op, value []byte, start int64) (store.State, error) {
	n, err := strconv.ParseInt(strings.TrimRight(string(value), " "), 10, 64)
	if err != nil || n < 0 {
		return store.State{}, fmt.Errorf("bucket %q holds %q: %w", op.Key, value, errBadValue)
	}
	if op.Algorithm == store.FixedWindow {
		return store.State{Exists: true, Start: start, Count: n}, nil
	}
	return store.State{Exists: true, TAT: n}, nil
}

// encode is the value and TTL (in seconds) that store w and st for op.
func (s *Store) encode(op *store.Op, now time.Time, w store.Write, st store.State) ([]byte, int64) {
	if op.Algorithm == store.FixedWindow {
		length := int64(op.Window.Length / time.Second)
		if w == store.Remove {
			return []byte("0"), length
		}
		return strconv.AppendInt(nil, st.Count, 10), length
	}
	if w == store.Remove {
		// TAT 0 is a full bucket; it need not last.
		return []byte("0"), 1
	}
	left := st.TAT - now.UnixNano()
	ttl := left/int64(time.Second) + 1
	if left%int64(time.Second) != 0 {
		ttl++
	}
	return strconv.AppendInt(nil, st.TAT, 10), ttl
}

// expiry is memcached's expiry field for a TTL of ttl seconds from now.
func expiry(now time.Time, ttl int64) int32 {
	if ttl <= maxRelativeExpiry {
		return int32(ttl)
	}
	return int32(min(now.Unix()+ttl, math.MaxInt32))
}

// legal returns key, or when memcached would refuse it, prefix plus a
// hash of it (the hash alone when the prefix is what memcached refuses).
func legal(prefix, key string) string {
	if legalKey(key) {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	h := "sluice-sha256-" + hex.EncodeToString(sum[:])
	if legalKey(prefix + h) {
		return prefix + h
	}
	return h
}

// legalKey reports whether memcached takes key: at most 250 bytes, none of
// them a space or a control character.
func legalKey(key string) bool {
	if len(key) > 250 {
		return false
	}
	for i := range len(key) {
		if key[i] <= ' ' || key[i] == 0x7f {
			return false
		}
	}
	return true
}
