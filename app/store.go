package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/fallback"
	"github.com/sluice-rl/sluice/store/memcache"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/split"
)

// newStore builds the store the options describe: the embedded memory
// store, or Redis (with a per-second Redis beside it, --redis-persecond)
// or memcached, wrapped by the --on-store-error policy.
func (a *App) newStore() (store.Store, error) {
	o := a.opts
	// At most one memory store is built: the store itself, or the local
	// fallback; it registers the sluice_memory_* metrics.
	memOpts := memory.Options{MaxEntries: o.MemoryMaxEntries, MaxBytes: o.MemoryMaxBytes}
	if a.registry != nil {
		memOpts.Registerer = a.registry
	}
	if o.Store == "memory" {
		return memory.New(memOpts), nil
	}
	var primary store.Store
	var err error
	if o.Store == "memcache" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		primary, err = a.newMemcache(ctx)
		cancel()
	} else {
		primary, err = a.newRedis()
	}
	if err != nil {
		return nil, err
	}
	policy, err := fallback.ParsePolicy(o.OnStoreError)
	if err != nil {
		_ = primary.Close()
		return nil, fmt.Errorf("--on-store-error: %w", err)
	}
	var local store.Store
	if policy == fallback.Local {
		local = memory.New(memOpts)
	}
	fb, err := fallback.New(primary, policy, local, fallback.Options{Registerer: a.registry, Logger: a.log})
	if err != nil {
		_ = primary.Close()
		return nil, err
	}
	return fb, nil
}

// newRedis connects to the main Redis and, with --redis-persecond, to the
// per-second one, splitting the operations between them (store/split).
// Both are retried while unavailable at startup (connectRedis).
func (a *App) newRedis() (store.Store, error) {
	o := a.opts
	ro, err := a.redisOptions(o.Redis, "redis")
	if err != nil {
		return nil, err
	}
	main, err := a.connectRedis(ro, o.Redis.Addrs, "Redis")
	if err != nil {
		return nil, err
	}
	if !o.RedisPerSecond {
		return main, nil
	}
	po, err := a.redisOptions(o.PerSecondRedis, "redis-persecond")
	if err != nil {
		_ = main.Close()
		return nil, err
	}
	// The per-second Redis shares the main one's keys and clock. It
	// registers no metrics: sluice_redis_* describe the main Redis, and
	// the per-second one's failures show in the fallback's.
	po.KeyPrefix, po.ClockServer, po.EnvoyCompatible, po.ExpirationJitter = ro.KeyPrefix, ro.ClockServer, ro.EnvoyCompatible, ro.ExpirationJitter
	po.Registerer = nil
	perSecond, err := a.connectRedis(po, o.PerSecondRedis.Addrs, "the per-second Redis")
	if err != nil {
		_ = main.Close()
		return nil, err
	}
	return split.New(main, perSecond)
}

// redisOptions translates the --<flag>-* options of one Redis.
func (a *App) redisOptions(r RedisOptions, flag string) (redis.Options, error) {
	ro := redis.Options{
		Addrs:           r.Addrs,
		Mode:            redis.Mode(r.Mode),
		SocketType:      redis.SocketType(r.SocketType),
		MasterName:      r.MasterName,
		Username:        r.Username,
		Password:        r.Password,
		MaxFlushDelay:   r.MaxFlushDelay,
		Timeout:         r.Timeout,
		KeyPrefix:       r.KeyPrefix,
		ClockServer:     r.Clock == "server",
		EnvoyCompatible: r.EnvoyKeys,
		Registerer:      a.registry,
		Clock:           a.clock,
	}
	ro.ExpirationJitter = r.ExpirationJitter
	if r.PasswordFile != "" {
		pw, err := os.ReadFile(r.PasswordFile)
		if err != nil {
			return ro, fmt.Errorf("--%s-password-file: %w", flag, err)
		}
		ro.Password = strings.TrimRight(string(pw), "\r\n")
	}
	ro.SentinelUsername, ro.SentinelPassword = r.SentinelUsername, r.SentinelPassword
	if r.TLS {
		cfg, err := redis.TLSConfig(r.TLSCA, r.TLSCert, r.TLSKey, "", r.TLSInsecure)
		if err != nil {
			return ro, fmt.Errorf("--%s-tls: %w", flag, err)
		}
		if r.TLSSkipHostname && !r.TLSInsecure {
			skipHostnameVerification(cfg)
		}
		ro.TLS = cfg
	}
	return ro, nil
}

// newMemcache connects to the memcached servers.
func (a *App) newMemcache(ctx context.Context) (store.Store, error) {
	m := a.opts.Memcache
	mo := memcache.Options{
		Addrs:            m.Addrs,
		SRV:              m.SRV,
		SRVRefresh:       m.SRVRefresh,
		MaxIdleConns:     m.MaxIdleConns,
		Timeout:          m.Timeout,
		KeyPrefix:        m.KeyPrefix,
		ExpirationJitter: m.Jitter,
		Logger:           a.log,
		Registerer:       a.registry,
		Clock:            a.clock,
	}
	if m.TLS {
		// The memcache TLS files are read as the Redis ones are.
		cfg, err := redis.TLSConfig(m.TLSCA, m.TLSCert, m.TLSKey, "", m.TLSInsecure)
		if err != nil {
			return nil, fmt.Errorf("--memcache-tls: %w", err)
		}
		mo.TLS = cfg
	}
	s, err := memcache.New(ctx, mo)
	if err != nil {
		where := m.SRV
		if where == "" {
			where = strings.Join(m.Addrs, ",")
		}
		return nil, fmt.Errorf("connect to memcached %s: %w", where, err)
	}
	return s, nil
}

// connectRedis connects to a Redis (what names it in messages, addrs are
// its addresses), retrying while it is unavailable (not
// listening, not ready) with a backoff that starts at
// --redis-startup-initial-interval and doubles, with jitter, up to
// --redis-startup-max-interval, until --redis-startup-max-elapsed-time
// (0: forever). Other errors, such as a server that is not a cluster when
// one was asked for, fail at once.
func (a *App) connectRedis(ro redis.Options, addrList []string, what string) (*redis.Store, error) {
	o := a.opts.Redis // the startup settings apply to every Redis
	interval, maxInterval := o.StartupInitialInterval, o.StartupMaxInterval
	if interval <= 0 {
		interval = time.Second
	}
	if maxInterval <= 0 {
		maxInterval = max(30*time.Second, interval)
	}
	give := context.Background()
	if o.StartupMaxElapsedTime > 0 {
		var cancel context.CancelFunc
		give, cancel = context.WithTimeout(give, o.StartupMaxElapsedTime)
		defer cancel()
	}
	addrs := strings.Join(addrList, ",")
	reg := ro.Registerer
	for attempt := 1; ; attempt++ {
		// A failed attempt may have registered the store's metrics: each
		// attempt registers on its own list, handed on only on success.
		pending := &pendingRegisterer{}
		ro.Registerer = pending
		ctx, cancel := context.WithTimeout(give, 10*time.Second)
		st, err := redis.New(ctx, ro)
		cancel()
		if err == nil {
			if reg != nil {
				if err := pending.registerOn(reg); err != nil {
					_ = st.Close()
					return nil, err
				}
			}
			if attempt > 1 {
				a.log.Info("connected to "+what, "addr", addrs, "attempts", attempt)
			}
			return st, nil
		}
		if !errors.Is(err, store.ErrUnavailable) {
			return nil, fmt.Errorf("connect to %s %s: %w", what, addrs, err)
		}
		if give.Err() != nil {
			return nil, fmt.Errorf("connect to %s %s: gave up after %d attempts in --redis-startup-max-elapsed-time %s: %w", what, addrs, attempt, o.StartupMaxElapsedTime, err)
		}
		wait := interval/2 + rand.N(interval/2+1) // #nosec G404 -- jitter, not a secret
		a.log.Warn(what+" unavailable at startup, retrying", "addr", addrs, "in", wait.String(), "attempt", attempt, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-give.Done():
			t.Stop()
		}
		interval = min(2*interval, maxInterval)
	}
}

// pendingRegisterer keeps collectors to register later. It is safe for
// concurrent use.
type pendingRegisterer struct {
	mu sync.Mutex // protects cs
	cs []prometheus.Collector
}

var _ prometheus.Registerer = (*pendingRegisterer)(nil)

func (p *pendingRegisterer) Register(c prometheus.Collector) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cs = append(p.cs, c)
	return nil
}

func (p *pendingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = p.Register(c)
	}
}

func (p *pendingRegisterer) Unregister(c prometheus.Collector) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.cs {
		if x == c {
			p.cs = append(p.cs[:i], p.cs[i+1:]...)
			return true
		}
	}
	return false
}

// registerOn registers the kept collectors on reg.
func (p *pendingRegisterer) registerOn(reg prometheus.Registerer) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register Redis store metrics: %w", err)
		}
	}
	return nil
}

// skipHostnameVerification makes cfg verify the server's certificate
// chain against its roots (the system's when nil) but not the host name,
// as envoyproxy/ratelimit's REDIS_TLS_SKIP_HOSTNAME_VERIFICATION.
func skipHostnameVerification(cfg *tls.Config) {
	roots := cfg.RootCAs
	cfg.InsecureSkipVerify = true // #nosec G402 -- the chain is verified below
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("redis tls: no server certificate")
		}
		opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
		for _, c := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
		if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
			return fmt.Errorf("redis tls: %w", err)
		}
		return nil
	}
}
