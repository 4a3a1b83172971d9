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

// ShouldRateLimits answers each call as ShouldRateLimit would, counting
// the descriptors of many requests in one limiter call: with Redis, one
// round trip where each request would make its own. Requests that count
// a window together (a busy key) go to different limiter calls, made side
// by side, as concurrent requests are counted; so do requests past
// limiter.MaxOpsPerCall descriptors in all, and every request when the
// limiter stops counting a request's descriptors once one is over its
// limit (limiter.Options.StopIncrementWhenOverLimit). The answers are
// those of the requests made in some order, at one instant. An invalid
// request fails alone; a store that fails fails the requests counted in
// its call. No call's cancellation cuts the counting short for the
// others: it ends with the latest of the calls' deadlines, when they all
// have one, or else with the store's own timeout. With a Tracer the calls
// are answered one by one, each with its span.
func (s *RLS) ShouldRateLimits(calls []RLSCall) {
	if len(calls) == 1 || s.opts.Tracer != nil {
		for i := range calls {
			c := &calls[i]
			c.Resp, c.Err = s.ShouldRateLimit(c.Ctx, c.Req)
		}
		return
	}
	start := s.opts.Clock.Now()
	// With StopIncrementWhenOverLimit one request's descriptors are
	// counted together, apart from any other request's.
	alone := s.opts.Limiter.StopsIncrementWhenOverLimit()
	b := rlsBatchPool.Get().(*rlsBatch)
	defer b.release()
	for i := range calls {
		c := &calls[i]
		sc := scratchPool.Get().(*scratch)
		b.scratches = append(b.scratches, sc)
		b.group = append(b.group, -1)
		if err := s.prepare(c.Req, sc); err != nil {
			c.Err = err
			continue
		}
		if len(sc.txns) > 0 {
			b.group[i] = b.place(sc.txns, alone)
		}
	}
	var at time.Time // zero: the limiter's now
	if s.opts.RequestLog != nil || len(b.groups) > 1 {
		at = s.opts.Clock.Now()
	}
	s.countGroups(calls, b, at)
	for i := range calls {
		c, sc := &calls[i], b.scratches[i]
		if c.Err == nil {
			if g := b.group[i]; g >= 0 {
				grp := b.groups[g]
				if grp.err != nil {
					c.Err = grp.err
				} else {
					copy(sc.decisions, grp.decisions[grp.off:grp.off+len(sc.txns)])
					grp.off += len(sc.txns)
				}
			}
			if c.Err == nil {
				c.Resp = s.answer(c.Ctx, c.Req, sc, at)
			}
		}
		s.finished(c.Ctx, c.Req, start, c.Resp, c.Err)
		if c.Err != nil {
			c.Resp, c.Err = nil, grpcError(c.Err)
		}
	}
}

// place adds a request's transactions to the first group that counts
// none of their buckets yet (nor any later group counts them) and has
// room, or to a new group, and returns the group. alone: always a new
// group.
func (b *rlsBatch) place(txns []limiter.Transaction, alone bool) int {
	first := 0 // groups before this one count some of the request's buckets
	if alone {
		first = len(b.groups)
	}
	for i := range txns {
		first = max(first, b.seen[txns[i].Key])
	}
	g := first
	for ; g < len(b.groups); g++ {
		if n := len(b.groups[g].txns); n == 0 || n+len(txns) <= limiter.MaxOpsPerCall {
			break
		}
	}
	if g == len(b.groups) {
		b.groups = append(b.groups, b.newGroup())
	}
	grp := b.groups[g]
	grp.txns = append(grp.txns, txns...)
	for i := range txns {
		b.seen[txns[i].Key] = g + 1
	}
	return g
}

// countGroups counts each group's transactions at at (zero: the
// limiter's now) in one limiter call, the groups side by side.
func (s *RLS) countGroups(calls []RLSCall, b *rlsBatch, at time.Time) {
	if len(b.groups) == 0 {
		return
	}
	ctx, cancel := batchContext(calls)
	defer cancel()
	count := func(g *rlsGroup) {
		g.decisions = sized(g.decisions, len(g.txns))
		if err := s.opts.Limiter.CountWithAt(ctx, &g.count, at, g.txns, g.decisions); err != nil {
			g.err = fmt.Errorf("count descriptors: %w", err)
		}
	}
	var wg sync.WaitGroup
	for _, g := range b.groups[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			count(g)
		}()
	}
	count(b.groups[0])
	wg.Wait()
}

// batchContext is the context of a batch's limiter calls: no call's
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
	scratches []*scratch     // one per call
	group     []int          // each call's group; -1: none
	groups    []*rlsGroup    // the limiter calls
	seen      map[string]int // a bucket key → 1 + the last group counting it
	spare     []*rlsGroup    // groups of earlier batches, for reuse
}

// rlsGroup is the transactions of one limiter call of a batch.
type rlsGroup struct {
	txns      []limiter.Transaction
	decisions []limiter.Decision
	count     limiter.Scratch
	off       int // decisions handed out so far
	err       error
}

var rlsBatchPool = sync.Pool{New: func() any { return &rlsBatch{seen: map[string]int{}} }}

func (b *rlsBatch) newGroup() *rlsGroup {
	if n := len(b.spare); n > 0 {
		g := b.spare[n-1]
		b.spare = b.spare[:n-1]
		return g
	}
	return new(rlsGroup)
}

// release returns the calls' scratches and b to their pools.
func (b *rlsBatch) release() {
	for _, sc := range b.scratches {
		sc.release()
	}
	clear(b.scratches)
	clear(b.seen)
	for _, g := range b.groups {
		if cap(g.txns) > 4*maxScratch {
			continue // an unusually large group: left to the collector
		}
		clear(g.txns)
		clear(g.decisions)
		g.txns, g.decisions, g.off, g.err = g.txns[:0], g.decisions[:0], 0, nil
		b.spare = append(b.spare, g)
	}
	clear(b.groups)
	b.scratches, b.group, b.groups = b.scratches[:0], b.group[:0], b.groups[:0]
	if len(b.spare) > 8 {
		clear(b.spare[8:])
		b.spare = b.spare[:8]
	}
	rlsBatchPool.Put(b)
}
