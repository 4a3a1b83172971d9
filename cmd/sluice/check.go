package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sluice-rl/sluice/adaptive"
	"github.com/sluice-rl/sluice/descriptors"
	"github.com/sluice-rl/sluice/limits"
)

// check validates configuration files: exit 0 when every file given is
// valid, 1 with every error and its location otherwise, 2 for bad usage.
func check(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	config := fs.String("config", "", "descriptor config file or directory")
	limitsPath := fs.String("limits", "", "key-value limits defaults file")
	overrides := fs.String("overrides", "", "key-value limits overrides file")
	adaptivePath := fs.String("adaptive", "", "adaptive limiter config file")
	strict := fs.Bool("strict", false, "treat warnings as errors, such as an override id that can never match")
	merge := fs.Bool("merge-domain-config", false, "merge descriptor files that declare the same domain instead of rejecting them (MERGE_DOMAIN_CONFIG)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sluice check: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *config == "" && *limitsPath == "" && *overrides == "" && *adaptivePath == "" {
		fmt.Fprintln(stderr, "sluice check: nothing to check: give --config, --limits, --overrides or --adaptive")
		return 2
	}
	failed := false
	report := func(what, path string, err error) {
		if err == nil {
			fmt.Fprintf(stdout, "%s %s: ok\n", what, path)
			return
		}
		failed = true
		for _, line := range errorLines(err) {
			fmt.Fprintln(stderr, line)
		}
	}
	if *config != "" {
		_, err := descriptors.LoadWith(*config, descriptors.LoadOptions{MergeDomains: *merge})
		report("config", *config, err)
	}
	if *adaptivePath != "" {
		_, err := adaptive.LoadConfig(*adaptivePath)
		report("adaptive", *adaptivePath, err)
	}
	if *limitsPath != "" || *overrides != "" {
		set, err := limits.Load(*limitsPath, *overrides)
		if err == nil {
			if w := set.Warnings(); len(w) > 0 {
				if *strict {
					err = w
				} else {
					for _, e := range w {
						fmt.Fprintf(stderr, "warning: %s (ignored)\n", e)
					}
				}
			}
		}
		report("limits", strings.TrimPrefix(*limitsPath+" "+*overrides, " "), err)
	}
	if failed {
		return 1
	}
	return 0
}

// errorLines splits a joined error into its lines.
func errorLines(err error) []string {
	var lines []string
	start := 0
	s := err.Error()
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			lines = append(lines, s[start:i])
			start = i + 1
		}
	}
	return append(lines, s[start:])
}
