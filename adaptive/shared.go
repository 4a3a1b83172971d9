package adaptive

import (
	"context"
	"math"
	"strconv"
	"time"

	"github.com/sluice-rl/sluice/limiter"
)

// sharedState keeps the windows in the store behind a limiter.Limiter so
// that several proxies share them. Slot j of a key's window is four fixed-window buckets whose
// keys name the slot: "<prefix><key>|<j>|n" (admitted count), "|s"
// (latency samples), "|l" (latency sum, ms) and "|e" (upstream errors).
//
// The store aligns a fixed window to the Unix epoch from the call's now
// and forgets the bucket when that window ends. So every operation on slot
// j passes the same now (limiter.CountAt), the start of the epoch-aligned window of length
// span (window + one slot) that ends after slot j has left the sliding
// window: the bucket is found by every reader and lives at least as long
// as it is needed, and at most about three windows. This needs a store that
// uses the caller's now (the memory store, or Redis without its server
// clock).
//
// The limiter keeps a local mirror of each window (the entry's ring) and
// refreshes it: on every request the current slot (one batch of four Check
// ops of cost 0); when the slot has moved on, the slots that completed
// since the last refresh; for a key this process has not seen, the whole
// window once (slots are read in one batch per span, at most three).
// Admitted requests are then spent (Cost 1) and latencies added (Cost =
// ms), so two proxies deciding at the same instant may both admit the last
// request of a window: the shared count may overshoot by about the number
// of proxies. On a store error the mirror decides alone.
type sharedState struct {
	lim     *limiter.Limiter
	prefix  string
	timeout time.Duration
}

// The four buckets of a slot, as key suffixes.
var bucketSuffixes = [4]string{"|n", "|s", "|l", "|e"}

const (
	bucketCount = iota
	bucketSamples
	bucketLatency
	bucketErrors
)

// spanSec is the store windows' length in seconds: the sliding window plus
// one slot. requires store mode (slots of whole seconds).
func (l *Limiter) spanSec() int64 {
	return (l.slotNs*int64(l.nslots) + l.slotNs) / int64(time.Second)
}

// slotNow is the now every store operation on slot j passes (see
// sharedState).
func (l *Limiter) slotNow(j int64) time.Time {
	span := l.spanSec()
	leaves := (j*l.slotNs + l.slotNs*int64(l.nslots)) / int64(time.Second)
	return time.Unix(leaves/span*span, 0)
}

// txns appends slot j's four transactions on key to dst: fixed windows
// that never fill, counting hits (kind CheckAndSpend) or peeking
// (CheckOnly).
func (s *sharedState) txns(dst []limiter.Transaction, l *Limiter, key string, j int64, kind limiter.Kind) []limiter.Transaction {
	w := limiter.Window{Limit: math.MaxInt64, Length: time.Duration(l.spanSec()) * time.Second}
	base := s.prefix + key + "|" + strconv.FormatInt(j, 10)
	for _, suffix := range bucketSuffixes {
		dst = append(dst, limiter.Transaction{Key: base + suffix, Window: w, Kind: kind})
	}
	return dst
}

// readSlots reads slots from..to (inclusive) of key, one batch per
// distinct slotNow.
func (s *sharedState) readSlots(ctx context.Context, l *Limiter, key string, from, to int64) ([]slot, error) {
	out := make([]slot, 0, to-from+1)
	for j := from; j <= to; {
		at := l.slotNow(j)
		first := j
		var txns []limiter.Transaction
		for ; j <= to && l.slotNow(j).Equal(at); j++ {
			txns = s.txns(txns, l, key, j, limiter.CheckOnly)
		}
		res := make([]limiter.Decision, len(txns))
		if err := s.lim.CountAt(ctx, at, txns, res); err != nil {
			return nil, err
		}
		for k := range j - first {
			r := res[4*k : 4*k+4]
			out = append(out, slot{
				count:   r[bucketCount].Count,
				samples: r[bucketSamples].Count,
				latNs:   r[bucketLatency].Count * int64(time.Millisecond),
				errors:  r[bucketErrors].Count,
			})
		}
	}
	return out, nil
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
	slots, err := s.readSlots(ctx, l, e.key, from, cur)

	e.mu.Lock()
	if err != nil {
		e.synced = -1 // read the whole window again next time
	} else {
		e.ring.advance(cur)
		for j, v := range slots {
			e.ring.setAt(from+int64(j), v)
		}
	}
	e.mu.Unlock()
	if err != nil {
		l.storeError(err)
	}
}

// spend adds an admitted request to the current slot's count.
func (s *sharedState) spend(parent context.Context, l *Limiter, e *entry, cur int64) {
	var buf [4]limiter.Transaction
	txns := s.txns(buf[:0], l, e.key, cur, limiter.CheckAndSpend)
	txns[bucketCount].Cost = 1
	s.do(parent, l, cur, txns[bucketCount:bucketCount+1])
}

// record adds a latency sample, or an upstream error, to the slot of now.
func (s *sharedState) record(l *Limiter, e *entry, now time.Time, cur int64, lat time.Duration, upstreamErr bool) {
	var buf [4]limiter.Transaction
	txns := s.txns(buf[:0], l, e.key, cur, limiter.CheckAndSpend)
	if upstreamErr {
		txns[bucketErrors].Cost = 1
		s.do(context.Background(), l, cur, txns[bucketErrors:])
		return
	}
	txns[bucketSamples].Cost = 1
	txns[bucketLatency].Cost = int64(math.Round(float64(lat) / float64(time.Millisecond)))
	s.do(context.Background(), l, cur, txns[bucketSamples:bucketLatency+1])
}

// do counts txns, all on slot j, within the store timeout.
func (s *sharedState) do(parent context.Context, l *Limiter, j int64, txns []limiter.Transaction) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), s.timeout)
	defer cancel()
	var buf [4]limiter.Decision
	if err := s.lim.CountAt(ctx, l.slotNow(j), txns, buf[:len(txns)]); err != nil {
		l.storeError(err)
	}
}

// storeError counts and logs a failed store call.
func (l *Limiter) storeError(err error) {
	if l.m != nil {
		l.m.storeErrors.Inc()
	}
	l.log.Warn("adaptive: store call failed; deciding from the local view", "err", err)
}
