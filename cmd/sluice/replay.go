package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/sluice-rl/sluice/descriptors"
	"github.com/sluice-rl/sluice/internal/replay"
)

// replayCmd runs "sluice replay": a request log through a descriptor
// config (and a second one with --compare) on a simulated clock, printing
// per rule what the service would have answered. Exit 0 when the whole log
// was replayed, 1 when a config does not load, the log cannot be read or
// a line is bad (without --skip-bad), 2 for bad usage.
func replayCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	config := fs.String("config", "", "descriptor config file or directory to replay against (required)")
	logPath := fs.String("log", "", `request log: one /json request body with a "time" per line, as serve --request-log writes it; "-" reads standard input (required)`)
	compare := fs.String("compare", "", "a second descriptor config file or directory: replay the log through both and show them side by side")
	asJSON := fs.Bool("json", false, "print one JSON object per rule: rule, allowed, over_limit, near_limit, first_over (with --compare, also config)")
	skipBad := fs.Bool("skip-bad", false, "skip a bad line (reported on standard error) instead of stopping at it")
	maxBackstep := fs.Duration("max-backstep", replay.DefaultMaxBackstep, "how much earlier than a line before it a line may be; it is replayed at its own time (a line further back is bad)")
	nearRatio := fs.Float64("near-limit-ratio", 0.8, "as serve's: share of a limit past which hits count as near the limit")
	shadow := fs.Bool("global-shadow-mode", false, "as serve's: answer OK to every request while still counting")
	quota := fs.Bool("global-quota-mode", false, "as serve's: treat every descriptor as quota_mode")
	requestLimits := fs.Bool("request-limits", true, "as serve's: honour a limit a request carries for a descriptor")
	negativeHits := fs.Bool("negative-hits", true, "as serve's: honour is_negative_hits, giving hits back")
	merge := fs.Bool("merge-domain-config", false, "as serve's: merge descriptor files that declare the same domain")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	usage := func(format string, args ...any) int {
		fmt.Fprintf(stderr, "sluice replay: "+format+"\n", args...)
		return 2
	}
	switch {
	case fs.NArg() > 0:
		return usage("unexpected argument %q", fs.Arg(0))
	case *config == "":
		return usage("--config is required: the descriptor config to replay against")
	case *logPath == "":
		return usage("--log is required: the request log to replay")
	case *logPath == "-" && *compare != "":
		return usage("--compare reads the log twice: give a file, not standard input")
	case *nearRatio <= 0 || *nearRatio > 1:
		return usage("--near-limit-ratio %s is outside (0, 1]", strconv.FormatFloat(*nearRatio, 'g', -1, 64))
	case *maxBackstep < 0:
		return usage("--max-backstep %s is negative: give how far back a line may go, 0 for not at all", *maxBackstep)
	}
	if os.Getenv("GOGC") == "" {
		// A replay allocates only short-lived responses: as serve does,
		// collect less often (BENCHMARKS.md, Replay).
		debug.SetGCPercent(400)
	}
	o := replay.Options{
		NearLimitRatio: *nearRatio, GlobalShadowMode: *shadow, GlobalQuotaMode: *quota,
		IgnoreRequestLimits: !*requestLimits, IgnoreNegativeHits: !*negativeHits,
		MaxBackstep: *maxBackstep, SkipBad: *skipBad,
		OnSkip: func(err error) { fmt.Fprintf(stderr, "skipped %v\n", err) },
	}
	if *maxBackstep == 0 {
		o.MaxBackstep = -1 // 0 on the command line: no line may go back
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	runOne := func(dir string) (replay.Summary, bool) {
		cfg, err := descriptors.LoadWith(dir, descriptors.LoadOptions{MergeDomains: *merge})
		if err != nil {
			for _, line := range errorLines(err) {
				fmt.Fprintln(stderr, line)
			}
			return replay.Summary{}, false
		}
		in, name := io.Reader(os.Stdin), "stdin"
		if *logPath != "-" {
			f, err := os.Open(*logPath)
			if err != nil {
				fmt.Fprintf(stderr, "sluice replay: %v\n", err)
				return replay.Summary{}, false
			}
			defer f.Close()
			in, name = f, *logPath
		}
		s, err := replay.Run(ctx, cfg, name, in, o)
		if err != nil {
			fmt.Fprintf(stderr, "sluice replay: %v\n", err)
			return replay.Summary{}, false
		}
		return s, true
	}
	a, ok := runOne(*config)
	if !ok {
		return 1
	}
	if *compare == "" {
		if *asJSON {
			writeJSON(stdout, "", a.Rules)
		} else {
			writeTable(stdout, a)
		}
		return 0
	}
	b, ok := runOne(*compare)
	if !ok {
		return 1
	}
	if *asJSON {
		writeJSON(stdout, *config, a.Rules)
		writeJSON(stdout, *compare, b.Rules)
	} else {
		writeComparison(stdout, *config, *compare, a, b)
	}
	return 0
}

// ruleJSON is one line of --json: exactly these fields, first_over null
// when the rule never went over; config only with --compare.
type ruleJSON struct {
	Config    string  `json:"config,omitempty"`
	Rule      string  `json:"rule"`
	Allowed   uint64  `json:"allowed"`
	OverLimit uint64  `json:"over_limit"`
	NearLimit uint64  `json:"near_limit"`
	FirstOver *string `json:"first_over"`
}

func writeJSON(w io.Writer, config string, rules []replay.Result) {
	enc := json.NewEncoder(w)
	for _, r := range rules {
		j := ruleJSON{Config: config, Rule: r.Rule, Allowed: r.Allowed, OverLimit: r.OverLimit, NearLimit: r.NearLimit}
		if !r.FirstOver.IsZero() {
			s := r.FirstOver.Format(time.RFC3339Nano)
			j.FirstOver = &s
		}
		_ = enc.Encode(j)
	}
}

// firstOver is a rule's first_over in the table: "-" when never.
func firstOver(r replay.Result) string {
	if r.FirstOver.IsZero() {
		return "-"
	}
	return r.FirstOver.Format(time.RFC3339Nano)
}

// span describes what a replay covered.
func span(s replay.Summary) string {
	if s.Lines == 0 {
		return "0 requests"
	}
	line := fmt.Sprintf("%d requests from %s to %s", s.Lines, s.First.Format(time.RFC3339Nano), s.Last.Format(time.RFC3339Nano))
	if s.Backsteps > 0 {
		line += fmt.Sprintf(", %d replayed a little back in time", s.Backsteps)
	}
	if s.Skipped > 0 {
		line += fmt.Sprintf(", %d bad line(s) skipped", s.Skipped)
	}
	return line
}

func writeTable(w io.Writer, s replay.Summary) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "rule\tallowed\tover_limit\tnear_limit\tfirst_over")
	for _, r := range s.Rules {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\n", r.Rule, r.Allowed, r.OverLimit, r.NearLimit, firstOver(r))
	}
	_ = tw.Flush()
	fmt.Fprintln(w, span(s))
}

// writeComparison prints the rules of both replays side by side, each
// figure for A (--config) then B (--compare); "-" where a config has no
// such rule.
func writeComparison(w io.Writer, dirA, dirB string, a, b replay.Summary) {
	fmt.Fprintf(w, "A: %s\nB: %s\n", dirA, dirB)
	byRule := map[string][2]*replay.Result{}
	var names []string
	for k, s := range []replay.Summary{a, b} {
		for i := range s.Rules {
			r := &s.Rules[i]
			pair, ok := byRule[r.Rule]
			if !ok {
				names = append(names, r.Rule)
			}
			pair[k] = r
			byRule[r.Rule] = pair
		}
	}
	slices.Sort(names)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "rule\tallowed A\tallowed B\tover_limit A\tover_limit B\tnear_limit A\tnear_limit B\tfirst_over A\tfirst_over B")
	for _, name := range names {
		pair := byRule[name]
		fmt.Fprint(tw, name)
		for _, f := range []func(replay.Result) string{
			func(r replay.Result) string { return strconv.FormatUint(r.Allowed, 10) },
			func(r replay.Result) string { return strconv.FormatUint(r.OverLimit, 10) },
			func(r replay.Result) string { return strconv.FormatUint(r.NearLimit, 10) },
			firstOver,
		} {
			for _, r := range pair {
				if r == nil {
					fmt.Fprint(tw, "\t-")
				} else {
					fmt.Fprint(tw, "\t"+f(*r))
				}
			}
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "A: %s\nB: %s\n", span(a), span(b))
}
