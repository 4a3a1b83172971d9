package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

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
	tuneGC(context.Background())
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
