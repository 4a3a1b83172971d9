package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/sluice-rl/sluice/internal/bench"
)

// benchCmd measures a running rate limit server over gRPC.
func benchCmd(args []string, stdout, stderr io.Writer) int {
	o, err := bench.ParseOptions(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice bench: %v\n", err)
		return 2
	}
	tuneGC(context.Background())
	r, err := bench.Run(context.Background(), o)
	if r.Calls > r.Errors { // a line of nothing but failures measures nothing
		fmt.Fprintf(stdout, "addr=%s descriptors=%d concurrency=%d %s\n", o.Addr, o.Descriptors, o.Concurrency, r)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice bench: %v\n", err)
		return 1
	}
	return 0
}
