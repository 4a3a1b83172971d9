package app

import (
	"context"
	"time"

	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/server"
)

// overridesRetry is how often a first read of the runtime overrides that
// failed is tried again when --kv-overrides-refresh is 0.
const overridesRetry = 10 * time.Second

// overridesTimeout bounds one read of the runtime overrides.
const overridesTimeout = 5 * time.Second

// newOverrides builds the runtime overrides over the limits files and reads
// the store's, once the files are loaded. A store that cannot be read is
// logged and retried by the refresh loop (startOverrides): the service
// starts with the files.
func (a *App) newOverrides() {
	a.overrides = server.NewOverrides(server.OverridesOptions{
		Limiter: a.limiter, Files: a.limits.Load, Clock: a.clock, Logger: a.log, StoreKind: a.opts.Store, Registerer: a.registry,
	})
	a.overridesState = a.refreshOverrides(context.Background())
	if a.opts.KVAdminTokenFile == "" && a.opts.KVAdminClientSAN == "" {
		a.log.Info("key-value runtime overrides API closed: every call is refused until --kv-admin-token-file or --kv-admin-client-san is set")
	}
}

// overridesState is the outcome of a read of the runtime overrides.
type overridesState uint8

const (
	overridesFailed      overridesState = iota // the store did not answer; retry
	overridesRead                              // read and in force
	overridesUnsupported                       // the store keeps none: stop trying
)

// refreshOverrides reads the runtime overrides from the store and puts
// them in force, logging a failure.
func (a *App) refreshOverrides(ctx context.Context) overridesState {
	ctx, cancel := context.WithTimeout(ctx, overridesTimeout)
	defer cancel()
	err := a.overrides.Refresh(ctx)
	switch {
	case err == nil:
		return overridesRead
	case limiter.KindOf(err) == limiter.Unsupported:
		a.log.Info("key-value runtime overrides are off: the store does not keep them", "store", a.opts.Store)
		return overridesUnsupported
	case ctx.Err() != nil && limiter.KindOf(err) == limiter.Canceled:
		return overridesFailed // shutting down
	}
	a.log.Warn("key-value runtime overrides not read from the store; keeping those in force and retrying", "err", err)
	return overridesFailed
}

// startOverrides reads the runtime overrides again every
// --kv-overrides-refresh (with 0, only until a first read succeeds) and
// returns the function that stops it.
func (a *App) startOverrides() (stop func()) {
	every := a.opts.KVOverridesRefresh
	state := a.overridesState
	if state == overridesUnsupported || (every == 0 && state == overridesRead) {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			wait := every
			if wait == 0 {
				wait = overridesRetry
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			state := a.refreshOverrides(ctx)
			if state == overridesUnsupported || (every == 0 && state == overridesRead) {
				return
			}
		}
	}()
	return func() { cancel(); <-done }
}
