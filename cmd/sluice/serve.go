package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/sluice-rl/sluice/app"
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
		// Collect garbage less often than Go's default: per call the service
		// allocates only small, short-lived objects, and at GOGC=400 it spends
		// 15-20% less CPU per call (BENCHMARKS.md). GOGC and GOMEMLIMIT in
		// the environment take precedence.
		debug.SetGCPercent(400)
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
