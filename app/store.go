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
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/redis"
)

// newStore builds the store the options describe: the embedded memory
// store, or Redis wrapped by the --on-store-error policy.
func (a *App) newStore() (store.Store, error) {
	o := a.opts
	memOpts := memory.Options{MaxEntries: o.MemoryMaxEntries}
	if o.Store == "memory" {
		return memory.New(memOpts), nil
	}
	ro := redis.Options{
		Addrs:            o.Redis.Addrs,
		Mode:             redis.Mode(o.Redis.Mode),
		MasterName:       o.Redis.MasterName,
		Username:         o.Redis.Username,
		Password:         o.Redis.Password,
		SentinelUsername: o.Redis.SentinelUsername,
		SentinelPassword: o.Redis.SentinelPassword,
		MaxFlushDelay:    o.Redis.MaxFlushDelay,
		Timeout:          o.Redis.Timeout,
		KeyPrefix:        o.Redis.KeyPrefix,
		ClockServer:      o.Redis.Clock == "server",
		EnvoyCompatible:  o.Redis.EnvoyKeys,
		Registerer:       a.registry,
		Clock:            a.clock,
	}
	if o.Redis.PasswordFile != "" {
		pw, err := os.ReadFile(o.Redis.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("--redis-password-file: %w", err)
		}
		ro.Password = strings.TrimRight(string(pw), "\r\n")
	}
	if o.Redis.TLS {
		cfg, err := redis.TLSConfig(o.Redis.TLSCA, o.Redis.TLSCert, o.Redis.TLSKey, "", o.Redis.TLSInsecure)
		if err != nil {
			return nil, fmt.Errorf("--redis-tls: %w", err)
		}
		if o.Redis.TLSSkipHostname && !o.Redis.TLSInsecure {
			skipHostnameVerification(cfg)
		}
		ro.TLS = cfg
	}
	primary, err := a.connectRedis(ro)
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

// connectRedis connects to Redis, retrying while it is unavailable (not
// listening, not ready) with a backoff that starts at
// --redis-startup-initial-interval and doubles, with jitter, up to
// --redis-startup-max-interval, until --redis-startup-max-elapsed-time
// (0: forever). Other errors, such as a server that is not a cluster when
// one was asked for, fail at once.
func (a *App) connectRedis(ro redis.Options) (*redis.Store, error) {
	o := a.opts.Redis
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
	addrs := strings.Join(o.Addrs, ",")
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
				a.log.Info("connected to Redis", "addr", addrs, "attempts", attempt)
			}
			return st, nil
		}
		if !errors.Is(err, store.ErrUnavailable) {
			return nil, fmt.Errorf("connect to Redis %s: %w", addrs, err)
		}
		if give.Err() != nil {
			return nil, fmt.Errorf("connect to Redis %s: gave up after %d attempts in --redis-startup-max-elapsed-time %s: %w", addrs, attempt, o.StartupMaxElapsedTime, err)
		}
		wait := interval/2 + rand.N(interval/2+1) // #nosec G404 -- jitter, not a secret
		a.log.Warn("Redis unavailable at startup, retrying", "addr", addrs, "in", wait.String(), "attempt", attempt, "err", err)
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
