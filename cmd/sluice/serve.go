package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/sluice-rl/sluice/app"
	"github.com/sluice-rl/sluice/internal/gctune"
)

// serve runs the service until SIGINT or SIGTERM.
func serve(args []string, stdout, stderr io.Writer) int {
	o, err := app.ParseServe(args, os.Getenv, stderr)
	if errors.Is(err, app.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return 2
	}
	if os.Getenv("GOGC") == "" {
		// Per call the service allocates only small, short-lived objects,
		// hundreds of megabytes a second under load, while its live heap is
		// often a few megabytes: give the collector at least 64 MiB of
		// headroom (GOGC up to 3200) and never less than GOGC=400, for
		// fewer collections and half the p99 latency (BENCHMARKS.md). GOGC
		// and GOMEMLIMIT in the environment take precedence.
		go gctune.Tune(context.Background(), gctune.Options{Headroom: 64 << 20, MinPercent: 400, MaxPercent: 3200, Interval: time.Second})
	}
	log := app.NewLogger(o, stderr)
	a, err := app.New(o, app.Deps{Logger: log})
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return 1
	}
	if err := a.Run(context.Background()); err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return 1
	}
	return 0
}
