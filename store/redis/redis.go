// Package redis is a store.Store backed by Redis: a single node, a Redis
// Cluster, or a master found through Sentinel, over TCP or TLS, with AUTH or
// an ACL user; a single node also over a unix socket (Options.SocketType).
//
// # Decisions
//
// Each batch is decided inside Redis by one Lua script call per hash slot
// group (one per batch on a single node), loaded once and then run with
// EVALSHA (EVAL when a node answers NOSCRIPT, which loads it again). The
// script reads the buckets, decides as package gcra and package window do,
// and writes, all atomically; Go then computes every Result field from the
// state the script read with store.Evaluate, as the memory store decides.
// Lua's numbers are doubles, so the script does its nanosecond arithmetic on
// exact (seconds, nanoseconds) pairs; see batchScript. Concurrent calls are
// pipelined over one connection per node (rueidis auto-pipelining); with
// Options.MaxFlushDelay its writer waits a little while calls are in
// flight, to send more calls' commands in one write.
//
// # Keys, values and expiry
//
//   - GCRA bucket: key KeyPrefix + Op.Key; value the TAT as decimal Unix
//     nanoseconds ("1767225600123456789"); TTL the time from now until the
//     TAT, in milliseconds rounded up, plus one second (SET key tat PX ms),
//     so a bucket that is full again vanishes. The expiry is relative to
//     the now the decision used, not absolute (PEXPIREAT), so that it is
//     right whatever clock the caller runs (a fake one in tests, one skewed
//     from Redis's); the extra second covers a caller clock up to a second
//     behind Redis's. A TAT at or before now is treated as missing.
//   - Fixed-window bucket: key KeyPrefix + Op.Key + the window's start in
//     decimal Unix seconds (window.Start), envoyproxy/ratelimit's layout: for
//     the Envoy front door Op.Key is "domain_key1_value1_key2_value2_", so
//     the key is prefix + "domain_key1_value1_key2_value2_1767225600".
//     Value the hit counter as a decimal integer, with a TTL of the window
//     length in seconds (plus a random 0 to Options.ExpirationJitter
//     seconds, when set, as envoyproxy/ratelimit's
//     EXPIRATION_JITTER_MAX_SECONDS). The script counts a hit with one INCRBY and sets
//     the TTL (EXPIRE key length) on the window's first hit only: the key
//     names its window, so a later hit has no need to push the expiry out.
//
// With Options.EnvoyCompatible the fixed-window spends and checks are not
// scripted at all: a spend is exactly envoyproxy/ratelimit's pipelined
// INCRBY key hits + EXPIRE key unitSeconds, a check a GET, so both servers
// can share one Redis during a migration and agree on every count.
// Refunds and resets still go through the script (the Envoy server has
// neither).
//
// # Clock
//
// By default `now` is the caller's (Store.Do's argument). With
// Options.ClockServer the script reads Redis TIME instead, for every
// operation of the group; outside Cluster mode it also picks the window of
// fixed-window keys. In Cluster mode a key must be known before it can be
// routed, so fixed-window keys (and their results) keep the caller's clock;
// and with EnvoyCompatible, scripted-free window operations do too.
//
// # Cluster
//
// A batch's operations are grouped by hash slot; each group is one script
// call, and the groups of a batch run in parallel (one pipelined round trip
// per node). Within a slot group everything is atomic and all-or-nothing
// exactly as on a single node. Across slot groups (see Store.Do):
//
//   - Never over-admit: a token is taken in a slot only when that slot's
//     script admits it, atomically.
//   - All-or-nothing in outcome, not in isolation: when any group denies a
//     spend or check, the tokens that other groups took are given back by a
//     compensating refund of the same cost in a second round trip. Between
//     the two round trips, other callers may see those tokens taken (they
//     may be denied when they would not have been: the error is always on
//     the safe side). Refunds and resets of such a batch only run in that
//     second round trip, after every group admitted the batch, because a
//     reset cannot be undone.
//   - If the compensation fails (a node unreachable), Do returns an error
//     wrapping store.ErrUnavailable and the tokens stay taken until their
//     TAT passes.
//
// A two-phase check-then-spend would cost two round trips on every batch
// and still not be atomic (another caller can spend between the phases),
// so it would need the compensation anyway; the optimistic spend pays the
// second round trip only on a denied multi-slot batch. Callers who need
// strict isolation put a batch's keys in one slot with a {hash tag}.
//
// # Failures
//
// Every call is bounded by Options.Timeout (to within a 64th of it: calls
// that start in the same 64th share one deadline, see deadline.go), or by
// the caller's own deadline when that is sooner. Errors from an unreachable,
// timed-out or not-ready Redis (connection refused or reset, deadline,
// CLUSTERDOWN, LOADING, MASTERDOWN, READONLY, TRYAGAIN) wrap
// store.ErrUnavailable; other error replies are returned as they are.
// Package store/fallback decides what to answer then.
package redis

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/store"
)

var _ store.Store = (*Store)(nil)

// Mode is how the Redis servers are deployed.
type Mode string

// The modes.
const (
	// Single is one Redis server (or a proxy in front of many).
	Single Mode = "single"
	// Cluster is a Redis Cluster; Addrs are seed nodes.
	Cluster Mode = "cluster"
	// Sentinel is a master found through Sentinel; Addrs are sentinels.
	Sentinel Mode = "sentinel"
)

// SocketType is how the store reaches a Redis server.
type SocketType string

// The socket types.
const (
	// TCP dials host:port addresses (with TLS when Options.TLS is set).
	TCP SocketType = "tcp"
	// Unix dials a unix socket path (with TLS over it when Options.TLS is
	// set, which is unusual).
	Unix SocketType = "unix"
)

// DefaultTimeout bounds each Do and Ping when Options.Timeout is zero. A
// rate-limit decision sits in the path of a request: it should fail over to
// the fallback policy quickly rather than wait for a sick Redis.
const DefaultTimeout = 100 * time.Millisecond

// Options configure a Store. Addrs is required; every other field has a
// usable zero value.
type Options struct {
	// Addrs are host:port addresses: the server (Single), seed nodes
	// (Cluster) or sentinels (Sentinel). With SocketType Unix, the one
	// address is the socket's path.
	Addrs []string
	// SocketType is TCP (the default when empty) or Unix, which dials
	// Addrs[0] as a unix socket path (envoyproxy/ratelimit's
	// REDIS_SOCKET_TYPE=unix). Unix needs Mode Single and one address.
	SocketType SocketType
	// Mode is Single (the default when empty), Cluster or Sentinel.
	Mode Mode
	// MasterName is the master's name as the sentinels know it; required
	// for Sentinel mode.
	MasterName string
	// Username is the ACL user; empty means the default user.
	Username string
	// Password for AUTH; empty means no AUTH. It is never logged nor put
	// into an error; the caller reads it from --redis-password-file.
	Password string
	// SentinelUsername and SentinelPassword authenticate to the sentinels
	// themselves, when they require it.
	SentinelUsername, SentinelPassword string
	// TLS, when not nil, connects with TLS (to sentinels too). See
	// TLSConfig.
	TLS *tls.Config
	// Timeout bounds each call (Do, Ping), round trips and any reconnection
	// included. Default DefaultTimeout (100ms); the valid range is 1ms to
	// 1m.
	Timeout time.Duration
	// DialTimeout bounds connecting to a node. Default 1s.
	DialTimeout time.Duration
	// KeyPrefix is put before every key. Default empty (as
	// envoyproxy/ratelimit's CACHE_KEY_PREFIX).
	KeyPrefix string
	// ClockServer makes the scripts use Redis TIME as now instead of the
	// caller's now (flag --redis-clock server). See the package doc.
	ClockServer bool
	// EnvoyCompatible issues fixed-window spends and checks exactly as
	// envoyproxy/ratelimit does (pipelined INCRBY + EXPIRE, GET), with no
	// script. See the package doc.
	EnvoyCompatible bool
	// ExpirationJitter, when positive, adds a random 0 to ExpirationJitter
	// (whole seconds) to the TTL of each fixed-window key, as
	// envoyproxy/ratelimit's EXPIRATION_JITTER_MAX_SECONDS does, so that
	// keys do not all expire at once. Only the TTL changes: a window's
	// counts are the same. Default 0; at most 24h.
	ExpirationJitter time.Duration
	// PipelineMultiplex: concurrent calls are pipelined over 2^n
	// connections per node. Default 0: one connection per node, in every
	// mode, so that concurrent calls share each write and read; range 0
	// to 8.
	PipelineMultiplex int
	// MaxFlushDelay, when positive, is how long a connection may wait,
	// while other calls are in flight on it, to gather their commands into
	// one write: fewer write syscalls per call for at most this much more
	// latency; a call alone on its connection is written at once. It pays
	// only with many calls in flight (about 32 and more on one node):
	// with fewer, the waiting writer costs more CPU than the writes it
	// saves (BENCHMARKS.md, issue 16). Default 0: write at once.
	MaxFlushDelay time.Duration
	// Registerer receives the store's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Clock times calls for the latency metric. Default clock.New().
	Clock clock.Clock
}

// Store is a Redis-backed store.Store. Create it with New; it is safe for
// concurrent use.
type Store struct {
	client  rueidis.Client
	cluster bool
	// keyless: no command needs its key marked as one, which costs a CRC16
	// of the key (rueidis routes a Cluster's commands by their keys' slots
	// and spreads multiplexed connections' commands that have a key).
	keyless bool
	timeout time.Duration
	prefix  string
	// serverClock: scripts read Redis TIME.
	serverClock bool
	// serverWindows: the script appends the window start to window keys
	// (server clock outside Cluster mode).
	serverWindows bool
	envoy         bool
	jitter        int64  // Options.ExpirationJitter in seconds
	sha           string // batchScript's SHA-1
	clock         clock.Clock
	m             *metrics
	shared        sharedDeadline
}

// New connects to Redis as o says and returns a Store. It fails, with an
// error wrapping store.ErrUnavailable, if no server answers within the
// timeout; the Store reconnects by itself afterwards.
func New(ctx context.Context, o Options) (*Store, error) {
	if len(o.Addrs) == 0 {
		return nil, errors.New("redis: no address, want at least one host:port")
	}
	if o.Mode == "" {
		o.Mode = Single
	}
	switch o.Mode {
	case Single, Cluster:
	case Sentinel:
		if o.MasterName == "" {
			return nil, errors.New("redis: sentinel mode needs a master name")
		}
	default:
		return nil, fmt.Errorf("redis: unknown mode %q, must be single, cluster or sentinel", o.Mode)
	}
	switch o.SocketType {
	case "", TCP:
	case Unix:
		if o.Mode != Single {
			return nil, fmt.Errorf("redis: socket type unix needs mode single, not %s", o.Mode)
		}
		if len(o.Addrs) != 1 {
			return nil, fmt.Errorf("redis: socket type unix needs exactly one socket path, got %d addresses", len(o.Addrs))
		}
	default:
		return nil, fmt.Errorf("redis: unknown socket type %q, must be tcp or unix", o.SocketType)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Timeout < time.Millisecond || o.Timeout > time.Minute {
		return nil, fmt.Errorf("redis: timeout %s out of range, must be between 1ms and 1m", o.Timeout)
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = time.Second
	}
	if o.PipelineMultiplex < 0 || o.PipelineMultiplex > rueidis.MaxPipelineMultiplex {
		return nil, fmt.Errorf("redis: pipeline multiplex %d out of range, must be between 0 and %d", o.PipelineMultiplex, rueidis.MaxPipelineMultiplex)
	}
	if o.ExpirationJitter < 0 || o.ExpirationJitter > 24*time.Hour {
		return nil, fmt.Errorf("redis: expiration jitter %s out of range, must be between 0 and 24h", o.ExpirationJitter)
	}
	if o.Clock == nil {
		o.Clock = clock.New()
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	// rueidis reads PipelineMultiplex 0 as its own default (several
	// connections to a single node) and a negative one as 2^0.
	multiplex := o.PipelineMultiplex
	if multiplex == 0 {
		multiplex = -1
	}
	flushDelay := max(o.MaxFlushDelay, 0)
	dialer := net.Dialer{Timeout: o.DialTimeout, KeepAlive: time.Second}
	// A connection that has not answered for this long is broken; calls
	// give up earlier (Timeout), this only recycles the connection.
	connTimeout := min(max(10*o.Timeout, time.Second), 10*time.Second)
	co := rueidis.ClientOption{
		InitAddress:       o.Addrs,
		Username:          o.Username,
		Password:          o.Password,
		TLSConfig:         o.TLS,
		Dialer:            dialer,
		ClientName:        "sluice",
		DisableCache:      true,
		ConnWriteTimeout:  connTimeout,
		PipelineMultiplex: multiplex,
		MaxFlushDelay:     flushDelay,
		ForceSingleClient: o.Mode == Single,
		// One immediate retry of a retryable command after a connection
		// error (typically a stale idle connection to a restarted
		// server), then give up: fail fast while Redis is down.
		RetryDelay: func(attempts int, _ rueidis.Completed, _ error) time.Duration {
			if attempts > 1 {
				return -1
			}
			return 0
		},
	}
	if o.SocketType == Unix {
		co.DialCtxFn = dialUnix
	}
	if o.Mode == Sentinel {
		co.Sentinel = rueidis.SentinelOption{
			Dialer:    dialer,
			TLSConfig: o.TLS,
			MasterSet: o.MasterName,
			Username:  o.SentinelUsername,
			Password:  o.SentinelPassword,
		}
	}
	client, err := rueidis.NewClient(co)
	if err != nil {
		if strings.Contains(err.Error(), "unknown message type") {
			// Something answered, but not in the Redis protocol (an HTTP
			// server answers 'H', message type 72): a wrong address, not
			// an outage, so no ErrUnavailable (startup does not retry it).
			return nil, fmt.Errorf("redis %s %s: the server does not speak the Redis protocol (%v): is this the address of a Redis server (or of Sentinels with --redis-mode sentinel)?",
				o.Mode, strings.Join(o.Addrs, ","), err)
		}
		return nil, fmt.Errorf("%w: redis %s %s: %w", store.ErrUnavailable, o.Mode, strings.Join(o.Addrs, ","), err)
	}
	if o.Mode == Cluster && client.Mode() != rueidis.ClientModeCluster {
		client.Close()
		return nil, fmt.Errorf("redis: %s is not a Redis Cluster (cluster mode asked)", strings.Join(o.Addrs, ","))
	}
	s := &Store{
		client:        client,
		cluster:       o.Mode == Cluster,
		keyless:       o.Mode != Cluster && multiplex == -1,
		timeout:       o.Timeout,
		prefix:        o.KeyPrefix,
		serverClock:   o.ClockServer,
		serverWindows: o.ClockServer && o.Mode != Cluster && !o.EnvoyCompatible,
		envoy:         o.EnvoyCompatible,
		jitter:        int64(o.ExpirationJitter / time.Second),
		sha:           scriptSHA,
		clock:         o.Clock,
		m:             m,
		shared:        sharedDeadline{timeout: o.Timeout, grain: o.Timeout / 64},
	}
	if err := s.Ping(ctx); err != nil {
		client.Close()
		return nil, err
	}
	return s, nil
}

// dialUnix connects to the unix socket at path, with TLS over it when cfg
// is not nil.
func dialUnix(ctx context.Context, path string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
	if cfg != nil {
		td := tls.Dialer{NetDialer: d, Config: cfg}
		return td.DialContext(ctx, "unix", path)
	}
	return d.DialContext(ctx, "unix", path)
}

// TLSConfig builds a client TLS configuration from PEM files: caFile (empty:
// the system roots) to verify the server, certFile and keyFile (both empty:
// none) for a client certificate, serverName to verify (empty: the host
// dialled). insecureSkipVerify turns verification off; it is for tests
// only.
func TLSConfig(caFile, certFile, keyFile, serverName string, insecureSkipVerify bool) (*tls.Config, error) {
	c := &tls.Config{
		ServerName:         serverName,
		InsecureSkipVerify: insecureSkipVerify, // #nosec G402 -- opt-in, for tests
		MinVersion:         tls.VersionTLS12,
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("redis tls: read CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redis tls: no certificate in CA file %s", caFile)
		}
		c.RootCAs = pool
	}
	if certFile != "" || keyFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("redis tls: load client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// Ping reports whether Redis answers within the timeout: the server, the
// current master (Sentinel), or every node (Cluster).
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if s.cluster {
		for addr, n := range s.client.Nodes() {
			if err := n.Do(ctx, n.B().Ping().Build()).Error(); err != nil {
				return s.fail(fmt.Errorf("ping %s: %w", addr, err))
			}
		}
		return nil
	}
	if err := s.client.Do(ctx, s.client.B().Ping().Build()).Error(); err != nil {
		return s.fail(fmt.Errorf("ping: %w", err))
	}
	return nil
}

// Close closes the connections. Do must not be called afterwards.
func (s *Store) Close() error {
	s.client.Close()
	s.shared.close()
	return nil
}

// fail classifies err, counts it, and wraps it in store.ErrUnavailable when
// Redis could not be reached or was not ready.
func (s *Store) fail(err error) error {
	kind := errorKind(err)
	s.m.error(kind)
	switch kind {
	case kindTimeout, kindUnavailable:
		return fmt.Errorf("%w: redis: %w", store.ErrUnavailable, err)
	}
	return fmt.Errorf("redis: %w", err)
}

// Error kinds, the label values of sluice_redis_errors_total.
const (
	kindTimeout     = "timeout"     // the call's deadline passed
	kindUnavailable = "unavailable" // connection failed or closed; node not ready
	kindCanceled    = "canceled"    // the caller cancelled
	kindReply       = "reply"       // any other error reply from Redis
	kindProtocol    = "protocol"    // a reply the store did not expect (a bug)
)

// errProtocol marks a reply the script should never give.
var errProtocol = errors.New("unexpected reply")

func errorKind(err error) string {
	if errors.Is(err, errProtocol) {
		return kindProtocol
	}
	if re, ok := rueidis.IsRedisErr(err); ok {
		if re.IsClusterDown() || re.IsTryAgain() || re.IsLoading() {
			return kindUnavailable
		}
		msg := re.Error()
		for _, p := range []string{"MASTERDOWN", "READONLY", "BUSY ", "NOREPLICAS"} {
			if strings.HasPrefix(msg, p) {
				return kindUnavailable
			}
		}
		return kindReply
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return kindTimeout
	case errors.Is(err, context.Canceled):
		return kindCanceled
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return kindTimeout
	}
	return kindUnavailable
}

// parseInt reads a decimal int64 from a script reply.
func parseInt(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q is not an integer", errProtocol, s)
	}
	return n, nil
}
