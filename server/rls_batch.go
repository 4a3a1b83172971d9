package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/limiter"
)

// RLSCall is one request of a batch that ShouldRateLimits answers.
type RLSCall struct {
	Ctx context.Context
	Req *rlsv3.RateLimitRequest
	// Resp or Err is the answer, as ShouldRateLimit would return them.
	Resp *rlsv3.RateLimitResponse
	Err  error
}

// ShouldRateLimits answers each call as ShouldRateLimit would, and counts
// the descriptors of all of them in one limiter call: with Redis, one
// round trip for the batch where each request would make its own. The
// answers are those of the requests made one after another in the
// batch's order (two requests counting the same window count in that
// order), at one instant; a batch of more than limiter.MaxOpsPerCall
// descriptors is counted in groups of whole requests side by side, as
// concurrent requests are. An invalid request fails alone, and a store
// that fails fails every valid request of the batch. No call's
// cancellation cuts the count short for the others; it ends with the
// latest of the calls' deadlines, when they all have one, or else with
// the store's own timeout. With a Tracer the calls are answered one by
// one, each with its span.
func (s *RLS) ShouldRateLimits(calls []RLSCall) {
	if len(calls) == 1 || s.opts.Tracer != nil {
		for i := range calls {
			c := &calls[i]
			c.Resp, c.Err = s.ShouldRateLimit(c.Ctx, c.Req)
		}
		return
	}
	start := s.opts.Clock.Now()
	b := rlsBatchPool.Get().(*rlsBatch)
	defer b.release()
	for i := range calls {
		c := &calls[i]
		sc := scratchPool.Get().(*scratch)
		b.scratches = append(b.scratches, sc)
		if err := s.prepare(c.Req, sc); err != nil {
			c.Err = err
			continue
		}
		b.txns = append(b.txns, sc.txns...)
	}
	b.decisions = sized(b.decisions, len(b.txns))
	var at time.Time // zero: the limiter's now
	if s.opts.RequestLog != nil {
		at = s.opts.Clock.Now()
	}
	err := s.countBatch(calls, b, at)
	off := 0
	for i := range calls {
		c, sc := &calls[i], b.scratches[i]
		if c.Err == nil {
			n := len(sc.txns)
			if err != nil {
				c.Err = err
			} else {
				copy(sc.decisions, b.decisions[off:off+n])
				c.Resp = s.answer(c.Req, sc, at)
			}
			off += n
		}
		s.finished(c.Ctx, c.Req, start, c.Resp, c.Err)
		if c.Err != nil {
			c.Resp, c.Err = nil, grpcError(c.Err)
		}
	}
}

// countBatch counts b's transactions at at (zero: the limiter's now) in
// one limiter call, or, past MaxOpsPerCall, in calls of whole requests
// side by side.
func (s *RLS) countBatch(calls []RLSCall, b *rlsBatch, at time.Time) error {
	if len(b.txns) == 0 {
		return nil
	}
	ctx, cancel := batchContext(calls)
	defer cancel()
	if len(b.txns) <= limiter.MaxOpsPerCall {
		if err := s.opts.Limiter.CountWithAt(ctx, &b.count, at, b.txns, b.decisions); err != nil {
			return fmt.Errorf("count descriptors: %w", err)
		}
		return nil
	}
	// A batch of large requests: each group of whole requests at most
	// MaxOpsPerCall transactions (or one request), the groups at once,
	// so that none waits for the others' round trips in turn.
	if at.IsZero() {
		at = s.opts.Clock.Now()
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	lo, hi := 0, 0
	group := func(lo, hi int) {
		defer wg.Done()
		var sc limiter.Scratch
		if err := s.opts.Limiter.CountWithAt(ctx, &sc, at, b.txns[lo:hi], b.decisions[lo:hi]); err != nil {
			mu.Lock()
			if firstErr == nil {
				firstErr = fmt.Errorf("count descriptors: %w", err)
			}
			mu.Unlock()
		}
	}
	for i := range calls {
		if calls[i].Err != nil {
			continue
		}
		n := len(b.scratches[i].txns)
		if hi > lo && hi-lo+n > limiter.MaxOpsPerCall {
			wg.Add(1)
			go group(lo, hi)
			lo = hi
		}
		hi += n
	}
	wg.Add(1)
	group(lo, hi)
	wg.Wait()
	return firstErr
}

// batchContext is the context of a batch's limiter call: no call's
// cancellation ends it, and it has the latest of the calls' deadlines
// when every call has one.
func batchContext(calls []RLSCall) (context.Context, context.CancelFunc) {
	ctx := context.WithoutCancel(calls[0].Ctx)
	var latest time.Time
	for i := range calls {
		dl, ok := calls[i].Ctx.Deadline()
		if !ok {
			return ctx, func() {}
		}
		if dl.After(latest) {
			latest = dl
		}
	}
	return context.WithDeadline(ctx, latest)
}

// rlsBatch is a batch's working state, reused from batch to batch.
type rlsBatch struct {
	scratches []*scratch // one per call
	txns      []limiter.Transaction
	decisions []limiter.Decision
	count     limiter.Scratch
}

var rlsBatchPool = sync.Pool{New: func() any { return new(rlsBatch) }}

// release returns the calls' scratches and b to their pools.
func (b *rlsBatch) release() {
	for _, sc := range b.scratches {
		sc.release()
	}
	clear(b.scratches)
	if cap(b.txns) > 4*maxScratch {
		return
	}
	clear(b.txns)
	clear(b.decisions)
	b.scratches, b.txns, b.decisions = b.scratches[:0], b.txns[:0], b.decisions[:0]
	rlsBatchPool.Put(b)
}
