package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/sluice-rl/sluice/limits"
)

// limitsCmd runs "sluice limits show": which limit applies to an id, for
// every name whose id format accepts it (or for one name), and where in the
// files it comes from. Exit 0 when some name accepts the id, 1 when none
// does or the files do not load, 2 for bad usage.
func limitsCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "show" {
		fmt.Fprintln(stderr, "usage: sluice limits show [--limits FILE] [--overrides FILE] [--name NAME] ID")
		return 2
	}
	fs := flag.NewFlagSet("sluice limits show", flag.ContinueOnError)
	fs.SetOutput(stderr)
	limitsPath := fs.String("limits", os.Getenv("SLUICE_LIMITS"), "key-value limits defaults file (SLUICE_LIMITS)")
	overrides := fs.String("overrides", os.Getenv("SLUICE_OVERRIDES"), "key-value limits overrides file (SLUICE_OVERRIDES)")
	name := fs.String("name", "", "show only this limit name")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "sluice limits show: want exactly one id, as a caller would give it (an address, an account id, a domain, regId:domain, ...)")
		return 2
	}
	id := fs.Arg(0)
	set, err := limits.Load(*limitsPath, *overrides)
	if err != nil {
		for _, line := range errorLines(err) {
			fmt.Fprintln(stderr, line)
		}
		return 1
	}
	for _, w := range set.Warnings() {
		fmt.Fprintf(stderr, "warning: %s (ignored)\n", w)
	}
	names := set.Names()
	if *name != "" {
		n, err := limits.ParseName(*name)
		if err != nil {
			fmt.Fprintf(stderr, "sluice limits show: %v\n", err)
			return 1
		}
		names = []limits.Name{n}
	}
	shown := 0
	for _, n := range names {
		b, err := set.Resolve(n.Text, id)
		if err != nil {
			if *name != "" {
				fmt.Fprintf(stderr, "sluice limits show: %v\n", err)
				return 1
			}
			continue // the id is not in this name's format
		}
		shown++
		fmt.Fprintf(stdout, "%s: bucket %s: %s\n", n.Text, b.Key, describeBucket(set, n, b))
	}
	if shown == 0 {
		fmt.Fprintf(stderr, "sluice limits show: no limit name takes id %q\n", id)
		return 1
	}
	return 0
}

// describeBucket says which limit applies to b and where it is written.
func describeBucket(set *limits.Set, n limits.Name, b limits.Bucket) string {
	if !b.Enabled {
		return "not limited (no override, no default)"
	}
	lim := fmt.Sprintf("burst %d, count %d per %s", b.Limit.Burst, b.Limit.Count, b.Limit.Period)
	if !b.Override {
		file, line, _ := set.DefaultAt(n.Text)
		return fmt.Sprintf("%s (default, %s:%d)", lim, file, line)
	}
	o, _ := set.Override(b.OverrideKey)
	where := fmt.Sprintf("override %q, %s:%d", o.ID, o.File, o.Line)
	if b.OverrideKey != b.Key {
		where = fmt.Sprintf("override for the whole account %q, %s:%d", o.ID, o.File, o.Line)
	}
	if o.Comment != "" {
		where += fmt.Sprintf(", %q", o.Comment)
	}
	if d, ok := set.Default(n.Text); ok {
		where += fmt.Sprintf("; the default would be burst %d, count %d per %s", d.Burst, d.Count, d.Period)
	}
	return fmt.Sprintf("%s (%s)", lim, where)
}
