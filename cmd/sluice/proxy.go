package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/sluice-rl/sluice/app"
)

// proxy runs the adaptive reverse proxy until SIGINT or SIGTERM.
func proxy(args []string, stdout, stderr io.Writer) int {
	p, err := app.ParseProxy(args, os.Getenv, stderr)
	if errors.Is(err, app.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice proxy: %v\n", err)
		return 2
	}
	if err := app.RunProxy(p, app.NewLogger(p.Store, stderr)); err != nil {
		fmt.Fprintf(stderr, "sluice proxy: %v\n", err)
		return 1
	}
	return 0
}
