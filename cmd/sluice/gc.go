package main

import (
	"context"
	"os"
	"time"

	"github.com/sluice-rl/sluice/internal/gctune"
)

// tuneGC gives the garbage collector at least 64 MiB of headroom (GOGC
// between 400 and 3200), unless GOGC is set in the environment; GOGC and
// GOMEMLIMIT take precedence. It tunes until ctx is done.
//
// Both commands that use it allocate only small, short-lived objects under
// load, hundreds of megabytes a second, over a live heap of a few
// megabytes: with Go's default GOGC=100 they would collect dozens of times
// a second. For `serve` that halves the p99 latency (BENCHMARKS.md); for
// `bench`, the load generator, it keeps its own collections from taking
// the measured server's CPU and from adding their pauses to the latencies
// it measures.
func tuneGC(ctx context.Context) {
	if os.Getenv("GOGC") != "" {
		return
	}
	go gctune.Tune(ctx, gctune.Options{Headroom: 64 << 20, MinPercent: 400, MaxPercent: 3200, Interval: time.Second})
}
