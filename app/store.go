package app

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

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
		Addrs:           o.Redis.Addrs,
		Mode:            redis.Mode(o.Redis.Mode),
		MasterName:      o.Redis.MasterName,
		Username:        o.Redis.Username,
		Timeout:         o.Redis.Timeout,
		KeyPrefix:       o.Redis.KeyPrefix,
		ClockServer:     o.Redis.Clock == "server",
		EnvoyCompatible: o.Redis.EnvoyKeys,
		Registerer:      a.registry,
		Clock:           a.clock,
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
		ro.TLS = cfg
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	primary, err := redis.New(ctx, ro)
	if err != nil {
		return nil, fmt.Errorf("connect to Redis %s: %w", strings.Join(o.Redis.Addrs, ","), err)
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
