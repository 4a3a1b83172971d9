package app

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

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
	memOpts := memory.Options{MaxEntries: o.MemoryMaxEntries}
	if o.Store == "memory" {
		return memory.New(memOpts), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var primary store.Store
	var err error
	if o.Store == "memcache" {
		primary, err = a.newMemcache(ctx)
	} else {
		primary, err = a.newRedis(ctx)
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
func (a *App) newRedis(ctx context.Context) (store.Store, error) {
	o := a.opts
	ro, err := a.redisOptions(o.Redis, "redis")
	if err != nil {
		return nil, err
	}
	main, err := redis.New(ctx, ro)
	if err != nil {
		return nil, fmt.Errorf("connect to Redis %s: %w", strings.Join(o.Redis.Addrs, ","), err)
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
	po.KeyPrefix, po.ClockServer, po.EnvoyCompatible = ro.KeyPrefix, ro.ClockServer, ro.EnvoyCompatible
	po.Registerer = nil
	perSecond, err := redis.New(ctx, po)
	if err != nil {
		_ = main.Close()
		return nil, fmt.Errorf("connect to the per-second Redis %s: %w", strings.Join(o.PerSecondRedis.Addrs, ","), err)
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
		Timeout:         r.Timeout,
		KeyPrefix:       r.KeyPrefix,
		ClockServer:     r.Clock == "server",
		EnvoyCompatible: r.EnvoyKeys,
		Registerer:      a.registry,
		Clock:           a.clock,
	}
	if r.PasswordFile != "" {
		pw, err := os.ReadFile(r.PasswordFile)
		if err != nil {
			return ro, fmt.Errorf("--%s-password-file: %w", flag, err)
		}
		ro.Password = strings.TrimRight(string(pw), "\r\n")
	}
	if r.TLS {
		cfg, err := redis.TLSConfig(r.TLSCA, r.TLSCert, r.TLSKey, "", r.TLSInsecure)
		if err != nil {
			return ro, fmt.Errorf("--%s-tls: %w", flag, err)
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
