package adaptive

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/store"
)

// sharedState keeps the windows in a store.Store so that several proxies
// share them. Each slot of a key's window is four fixed-window buckets of
// one slot's length: admitted count, latency samples, latency sum (ms) and
// upstream errors. The limiter keeps a local mirror of the window (the
// entry's ring) and refreshes it from the store:
//
//   - on every request, the current slot (one batch of four Check ops of
//     cost 0);
//   - when the slot has moved on since the last refresh, the slots that
//     completed meanwhile, each in its own batch at that slot's time (the
//     store adds the window start to the key from the batch's now);
//   - for a key this process has not seen, the whole window once.
//
// Admitted requests are then spent (Cost 1), latencies added (Cost = ms)
// after the decision, so two proxies deciding at the same instant may both
// admit the last request of a window: the shared count may overshoot by
// about the number of proxies. On a store error the mirror decides alone.
type sharedState struct {
	st      store.Store
	prefix  string
	timeout time.Duration
}

// The four buckets of a slot, as key suffixes.
const (
	bucketCount   = ":n"
	bucketSamples = ":s"
	bucketLatency = ":l"
	bucketErrors  = ":e"
)

func (s *sharedState) ops(l *Limiter, key string, action store.Action) [4]store.Op {
	w := store.Window{Limit: math.MaxInt64, Length: time.Duration(l.slotNs)}
	base := s.prefix + key
	var ops [4]store.Op
	for i, suffix := range [4]string{bucketCount, bucketSamples, bucketLatency, bucketErrors} {
		ops[i] = store.Op{Key: base + suffix, Algorithm: store.FixedWindow, Action: action, Window: w}
	}
	return ops
}

// readSlot reads slot i of key from the store.
func (s *sharedState) readSlot(ctx context.Context, l *Limiter, key string, i int64) (slot, error) {
	ops := s.ops(l, key, store.Check)
	var out [4]store.Result
	at := time.Unix(0, i*l.slotNs)
	if err := s.st.Do(ctx, at, store.Batch{Ops: ops[:]}, out[:]); err != nil {
		return slot{}, err
	}
	return slot{count: out[0].Count, samples: out[1].Count, latNs: out[2].Count * int64(time.Millisecond), errors: out[3].Count}, nil
}

// sync refreshes e's mirror from the store: the current slot, and the
// past slots not read since they completed.
func (s *sharedState) sync(parent context.Context, l *Limiter, e *entry, cur int64) {
	n := int64(l.nslots)
	e.mu.Lock()
	from := cur // first slot to read
	switch {
	case e.synced < 0:
		from = cur - n + 1
	case e.synced < cur:
		from = max(e.synced, cur-n+1)
	}
	e.synced = cur
	e.mu.Unlock()
	from = max(from, 0)

	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), s.timeout)
	defer cancel()
	slots := make([]slot, cur-from+1)
	errs := make([]error, len(slots))
	var wg sync.WaitGroup
	for i := from; i < cur; i++ {
		wg.Go(func() { slots[i-from], errs[i-from] = s.readSlot(ctx, l, e.key, i) })
	}
	slots[cur-from], errs[cur-from] = s.readSlot(ctx, l, e.key, cur)
	wg.Wait()

	e.mu.Lock()
	e.ring.advance(cur)
	failed := false
	for j, v := range slots {
		if errs[j] != nil {
			failed = true
			continue
		}
		e.ring.setAt(from+int64(j), v)
	}
	if failed {
		e.synced = -1 // read the whole window again next time
	}
	e.mu.Unlock()
	if failed {
		l.storeError(errs)
	}
}

// spend adds an admitted request to the current slot's count.
func (s *sharedState) spend(parent context.Context, l *Limiter, e *entry, cur int64) {
	ops := s.ops(l, e.key, store.Spend)
	ops[0].Cost = 1
	s.do(parent, l, time.Unix(0, cur*l.slotNs), ops[:1])
}

// record adds a latency sample, or an upstream error, to the slot of now.
func (s *sharedState) record(l *Limiter, e *entry, now time.Time, cur int64, lat time.Duration, upstreamErr bool) {
	ops := s.ops(l, e.key, store.Spend)
	if upstreamErr {
		ops[3].Cost = 1
		s.do(context.Background(), l, now, ops[3:])
		return
	}
	ops[1].Cost = 1
	ops[2].Cost = int64(math.Round(float64(lat) / float64(time.Millisecond)))
	s.do(context.Background(), l, now, ops[1:3])
}

func (s *sharedState) do(parent context.Context, l *Limiter, now time.Time, ops []store.Op) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), s.timeout)
	defer cancel()
	out := make([]store.Result, len(ops))
	if err := s.st.Do(ctx, now, store.Batch{Ops: ops}, out); err != nil {
		l.storeError([]error{err})
	}
}

// storeError counts and logs the first of errs that is not nil.
func (l *Limiter) storeError(errs []error) {
	for _, err := range errs {
		if err != nil {
			if l.m != nil {
				l.m.storeErrors.Inc()
			}
			l.log.Warn("adaptive: store call failed; deciding from the local view", "err", err)
			return
		}
	}
}
