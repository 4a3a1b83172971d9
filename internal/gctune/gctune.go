// Package gctune gives Go's garbage collector a floor of heap headroom.
//
// GOGC sets the headroom as a share of the live heap: at GOGC=400 the heap
// may grow by four times the live data before the next collection. A rate
// limit server's live heap is often a few megabytes while it allocates
// hundreds of megabytes a second in short-lived per-call objects, so a
// share of a small live heap means many collections a second, and each
// costs CPU and lengthens the latency tail. Tune keeps the headroom at
// least a fixed number of bytes, by raising GOGC while the live heap is
// small; once the live heap is large the share is the larger and the
// percentage falls back to its minimum.
package gctune

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Percent is the GOGC value that gives a live heap of live bytes at least
// headroom bytes to grow (and at least minPercent), capped at maxPercent.
func Percent(live, headroom uint64, minPercent, maxPercent int) int {
	if live == 0 {
		return maxPercent
	}
	p := headroom * 100 / live
	if p < uint64(minPercent) {
		return minPercent
	}
	if p > uint64(maxPercent) {
		return maxPercent
	}
	return int(p)
}

// Options configure Tune.
type Options struct {
	Headroom   uint64        // bytes the heap may grow between collections, at least
	MinPercent int           // GOGC never below this
	MaxPercent int           // GOGC never above this
	Interval   time.Duration // how often the live heap is read; default 1s
}

// Tune sets GOGC from the live heap now and then every Interval until ctx
// is done. It changes GOGC only when the value moves by more than a tenth,
// and leaves it as it last set it on return.
func Tune(ctx context.Context, o Options) {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	current := -1
	t := time.NewTicker(o.Interval)
	defer t.Stop()
	for {
		metrics.Read(sample)
		var live uint64
		if sample[0].Value.Kind() == metrics.KindUint64 {
			live = sample[0].Value.Uint64()
		}
		p := Percent(live, o.Headroom, o.MinPercent, o.MaxPercent)
		if current < 0 || p*10 < current*9 || p*10 > current*11 {
			debug.SetGCPercent(p)
			current = p
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
