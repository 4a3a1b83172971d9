package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/sluice-rl/sluice/app"
)

// bench measures a running rate limit server over gRPC.
func bench(args []string, stdout, stderr io.Writer) int {
	b, err := app.ParseBench(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice bench: %v\n", err)
		return 2
	}
	r, err := app.RunBench(context.Background(), b)
	if r.Calls > r.Errors { // a line of nothing but failures measures nothing
		fmt.Fprintf(stdout, "addr=%s descriptors=%d concurrency=%d %s\n", b.Addr, b.Descriptors, b.Concurrency, r)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice bench: %v\n", err)
		return 1
	}
	return 0
}
