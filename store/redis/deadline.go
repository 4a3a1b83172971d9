package redis

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/clock"
)

// sharedDeadline hands out contexts that end between timeout and
// timeout+grain from the moment they are asked for. Calls that start
// within one grain share a context, so a busy store arms one timer per
// grain instead of one per call (a context.WithTimeout per call cost about
// a microsecond of CPU and five allocations, a tenth of the Redis client's
// cost per call). The zero value hands out nothing; it is safe for
// concurrent use.
type sharedDeadline struct {
	timeout, grain time.Duration
	cur            atomic.Pointer[deadlineCtx] // the context being handed out
}

type deadlineCtx struct {
	ctx    context.Context
	cancel context.CancelFunc // called by close only: the timer ends ctx
}

// context returns a context that ends timeout to timeout+grain from now.
func (d *sharedDeadline) context() context.Context {
	if c := d.cur.Load(); c != nil {
		if left, _ := clock.UntilDeadline(c.ctx); left >= d.timeout {
			return c.ctx
		}
	}
	// Two callers may both get here: each uses its own, one is kept.
	ctx, cancel := context.WithTimeout(context.Background(), d.timeout+d.grain)
	d.cur.Store(&deadlineCtx{ctx: ctx, cancel: cancel})
	return ctx
}

// close releases the current context's timer.
func (d *sharedDeadline) close() {
	if c := d.cur.Swap(nil); c != nil {
		c.cancel()
	}
}

// bound returns the context a call on ctx runs with: ctx itself when it
// ends within timeout+grain (its own deadline, or already cancelled), else
// a shared context that ends timeout to timeout+grain from now.
//
// The shared context does not carry ctx's cancellation: a caller that
// goes away mid-call (a client disconnecting; Envoy's own timeout is a
// deadline and takes the first path) leaves its call to finish, which
// takes one Redis round trip, or at worst the timeout. Its answer is
// thrown away as before; what it spent it had asked to spend.
func (d *sharedDeadline) bound(ctx context.Context) context.Context {
	if ctx.Err() != nil {
		return ctx
	}
	if left, ok := clock.UntilDeadline(ctx); ok && left <= d.timeout+d.grain {
		return ctx
	}
	return d.context()
}
