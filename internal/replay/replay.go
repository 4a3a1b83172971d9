// Package replay runs a log of Envoy rate limit requests through the real
// engine on a simulated clock, in memory, and reports per rule what the
// service would have answered: the engine of `sluice replay`.
//
// The log has one request a line: a /json request body (domain,
// descriptors with entries, hits_addend, is_negative_hits and limit) plus
// a "time" in RFC 3339, as `sluice serve --request-log` writes it (see
// docs/replay.md). Each line sets a fake clock to its time and is answered
// by server.RLS over the memory store, with the service's per-rule
// statistics collected; nothing goes over the network. The figures per
// rule are those statistics (hits, as envoyproxy/ratelimit's stats count
// them), so they equal what `sluice serve` reports in its metrics for the
// same requests.
package replay

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/descriptors"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/server"
	"github.com/sluice-rl/sluice/stats"
	"github.com/sluice-rl/sluice/store/memory"
)

// Options change how a log is replayed. The zero value replays with the
// service's defaults.
type Options struct {
	// NearLimitRatio is serve's --near-limit-ratio: the share of a limit
	// past which hits count as near it. Default 0.8; range (0, 1].
	NearLimitRatio float64
	// GlobalShadowMode and GlobalQuotaMode are serve's
	// --global-shadow-mode and --global-quota-mode.
	GlobalShadowMode, GlobalQuotaMode bool
	// IgnoreRequestLimits is serve's --request-limits=false, and
	// IgnoreNegativeHits its --negative-hits=false.
	IgnoreRequestLimits, IgnoreNegativeHits bool
	// MaxBackstep is how much earlier than the latest line before it a
	// line may be: such a line is replayed at its own time (requests
	// answered concurrently reach the log a little out of order). A line
	// further back is an error (or skipped with SkipBad). Default
	// DefaultMaxBackstep; negative: no line may go back at all.
	MaxBackstep time.Duration
	// SkipBad skips a line that does not decode, goes back too far in
	// time, or that the service refuses (such as an empty domain), and
	// tells OnSkip; by default such a line stops the replay with its error.
	SkipBad bool
	// OnSkip, when not nil, receives each skipped line's *LineError.
	OnSkip func(error)
}

// DefaultMaxBackstep is Options.MaxBackstep's default.
const DefaultMaxBackstep = time.Second

// MaxLineBytes bounds a log line: the most a /json request body may be
// (server.MaxBodyBytes) and room for its time.
const MaxLineBytes = server.MaxBodyBytes + 1024

// Result is what one rule would have answered, in hits (each request
// counts its hits_addend, 1 by default), as the service's statistics
// count them: Allowed is within_limit, the hits of answers within the
// limit; OverLimit the hits past the limit (a shadow-mode rule's too,
// though answered OK); NearLimit the hits past the near-limit ratio.
// FirstOver is the log time of the first answer over the limit; zero
// when the rule never went over.
type Result struct {
	Rule                          string // the rule's stats key, as the metrics label names it
	Allowed, OverLimit, NearLimit uint64
	FirstOver                     time.Time
}

// Summary is the outcome of a replay.
type Summary struct {
	Lines     int64     // requests replayed
	Skipped   int64     // lines skipped (Options.SkipBad)
	Backsteps int64     // lines earlier than a line before them, replayed at their own time
	First     time.Time // the time of the first replayed line
	Last      time.Time // the latest time of a replayed line
	Rules     []Result  // one per rule that counted a hit, by rule
}

// LineError is a line that could not be replayed: File:Line and why.
type LineError struct {
	File string
	Line int64
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err) }

func (e *LineError) Unwrap() error { return e.Err }

// ErrBackstep is a line too far back in time (see Options.MaxBackstep).
var ErrBackstep = errors.New("line goes back in time")

// Replayer replays logs against one configuration; the rules' counters
// and statistics carry over from one Replay call to the next, as one log
// split over files. Create it with New. It is not safe for concurrent use.
type Replayer struct {
	opts    Options
	clock   *simClock
	store   *memory.Store
	rls     *server.RLS
	metrics *server.Metrics
	dec     *decoder

	sum    Summary
	latest time.Time

	cfg *descriptors.Config

	// The statistics' rules by stats key, those that have not been seen
	// over the limit yet (some may have been since: see noteOver), and
	// how many of the statistics' rules have been looked at.
	byKey     map[string]*stats.Rule
	pending   []*stats.Rule
	known     int
	firstOver map[*stats.Rule]time.Time
	entries   []descriptors.Entry // scratch for ruleOf
}

// New returns a Replayer for cfg.
func New(cfg *descriptors.Config, o Options) *Replayer {
	if o.MaxBackstep == 0 {
		o.MaxBackstep = DefaultMaxBackstep
	}
	clk := new(simClock)
	st := memory.New(memory.Options{})
	m := server.NewMetrics(nil)
	rls := server.NewRLS(server.RLSOptions{
		Limiter:             limiter.New(st, clk),
		Clock:               clk,
		Metrics:             m,
		NearLimitRatio:      o.NearLimitRatio,
		GlobalShadowMode:    o.GlobalShadowMode,
		GlobalQuotaMode:     o.GlobalQuotaMode,
		IgnoreRequestLimits: o.IgnoreRequestLimits,
		IgnoreNegativeHits:  o.IgnoreNegativeHits,
		NoHotKeys:           true,
	})
	rls.SetConfig(cfg)
	return &Replayer{opts: o, clock: clk, store: st, rls: rls, metrics: m, dec: newDecoder(), cfg: cfg,
		byKey: map[string]*stats.Rule{}, firstOver: map[*stats.Rule]time.Time{}}
}

// simClock is the replay's simulated clock: the time of the line being
// replayed. It is clock.Fake without the lock, which costs a tenth of the
// replay's time budget: a Replayer runs in one goroutine, and neither the
// limiter nor the memory store reads the clock from another.
type simClock struct{ now time.Time }

// Now returns the time of the line being replayed.
func (c *simClock) Now() time.Time { return c.now }

var _ clock.Clock = (*simClock)(nil)

// Close releases the replayer's store.
func (r *Replayer) Close() error { return r.store.Close() }

// Run replays the log in (named name in errors) against cfg and returns
// the summary.
func Run(ctx context.Context, cfg *descriptors.Config, name string, in io.Reader, o Options) (Summary, error) {
	r := New(cfg, o)
	defer r.Close()
	if err := r.Replay(ctx, name, in); err != nil {
		return Summary{}, err
	}
	return r.Summary(), nil
}

// Replay replays every line of in, named name in errors. It stops at the
// first bad line (a *LineError) unless Options.SkipBad, or when ctx ends.
// Empty lines are ignored.
func (r *Replayer) Replay(ctx context.Context, name string, in io.Reader) error {
	br := bufio.NewReaderSize(in, 1<<20)
	var long []byte // a line longer than br's buffer
	var n int64
	for {
		line, err := br.ReadSlice('\n')
		tooLong := false
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = br.ReadSlice('\n')
				if len(long) <= MaxLineBytes {
					long = append(long, line...)
				} // else read on to the line's end, keeping nothing
			}
			line, tooLong = long, len(long) > MaxLineBytes
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read %s: %w", name, err)
		}
		if len(line) > 0 {
			n++
			if n&4095 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			var lerr error
			if tooLong {
				lerr = fmt.Errorf("line longer than %d bytes", MaxLineBytes)
			} else {
				lerr = r.line(ctx, line)
			}
			if lerr != nil {
				le := &LineError{File: name, Line: n, Err: lerr}
				if !r.opts.SkipBad {
					return le
				}
				r.sum.Skipped++
				if r.opts.OnSkip != nil {
					r.opts.OnSkip(le)
				}
			}
		}
		if err != nil {
			return nil // io.EOF
		}
	}
}

// line replays one line.
func (r *Replayer) line(ctx context.Context, line []byte) error {
	line = bytes.TrimRight(line, "\r\n")
	if len(bytes.TrimSpace(line)) == 0 {
		return nil
	}
	at, req, err := r.dec.decode(line)
	if err != nil {
		return err
	}
	if r.sum.Lines > 0 && at.Before(r.latest) {
		back := r.latest.Sub(at)
		if back > r.opts.MaxBackstep || r.opts.MaxBackstep < 0 {
			return fmt.Errorf("%w: time %s is %s before an earlier line's %s, more than the %s allowed (--max-backstep); sort the log by time",
				ErrBackstep, at.Format(time.RFC3339Nano), back, r.latest.Format(time.RFC3339Nano), max(r.opts.MaxBackstep, 0))
		}
		r.sum.Backsteps++
	}
	r.clock.now = at
	resp, err := r.rls.Decide(ctx, req)
	if err != nil {
		return err
	}
	if r.sum.Lines == 0 {
		r.sum.First, r.latest = at, at
	} else if at.After(r.latest) {
		r.latest = at
	}
	r.sum.Lines++
	for _, st := range resp.GetStatuses() {
		if overSuspect(st) {
			r.noteOver(at, req, resp)
			break
		}
	}
	return nil
}

// overSuspect reports whether a descriptor's status may be over its
// limit: it is OVER_LIMIT, or (a shadow-mode rule answers OK when over)
// it has a limit and nothing remains.
func overSuspect(st *rlsv3.RateLimitResponse_DescriptorStatus) bool {
	return st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT || (st.GetCurrentLimit() != nil && st.GetLimitRemaining() == 0)
}

// noteOver gives every rule that has just gone over the limit, answering
// req with resp, its first time, at. It looks at the rules of req's
// suspect descriptors when it can tell which they are, and at every rule
// not yet over otherwise (a descriptor counted under a stats key it
// cannot name).
func (r *Replayer) noteOver(at time.Time, req *rlsv3.RateLimitRequest, resp *rlsv3.RateLimitResponse) {
	all := r.metrics.Stats().Rules()
	for _, st := range all[r.known:] {
		r.byKey[st.Key] = st
		r.pending = append(r.pending, st)
	}
	r.known = len(all)
	for i, st := range resp.GetStatuses() {
		if !overSuspect(st) {
			continue
		}
		matched := r.ruleOf(req, i)
		if matched == nil {
			r.scan(at)
			return
		}
		// Every limit of the descriptor (several with rate_limits): the
		// status names only the closest.
		for k := range matched.Limits() {
			rule := r.byKey[matched.Limit(k).MetricKey(r.entries)]
			if rule == nil {
				r.scan(at)
				return
			}
			if _, seen := r.firstOver[rule]; !seen && rule.OverLimit.Load() > 0 {
				r.firstOver[rule] = at
			}
		}
	}
}

// scan gives every rule over the limit and not seen so yet its first
// time, at, and drops it from the pending rules.
func (r *Replayer) scan(at time.Time) {
	kept := r.pending[:0]
	for _, st := range r.pending {
		if _, seen := r.firstOver[st]; seen {
			continue
		}
		if st.OverLimit.Load() > 0 {
			r.firstOver[st] = at
			continue
		}
		kept = append(kept, st)
	}
	clear(r.pending[len(kept):])
	r.pending = kept
}

// ruleOf is the rule that counted descriptor i of req, as the service
// chose it (the request's own limit, or the configured rule that
// matches), with its entries in r.entries, or nil when there is none.
func (r *Replayer) ruleOf(req *rlsv3.RateLimitRequest, i int) *descriptors.Rule {
	d := req.GetDescriptors()[i]
	r.entries = r.entries[:0]
	for _, e := range d.GetEntries() {
		r.entries = append(r.entries, descriptors.Entry{Key: e.GetKey(), Value: e.GetValue()})
	}
	if l := d.GetLimit(); l != nil && !r.opts.IgnoreRequestLimits {
		rule, err := descriptors.Override(req.GetDomain(), r.entries, int32(l.GetUnit()), l.GetRequestsPerUnit(), l.GetUnitMultiplier().GetValue(), l.GetUnitMultiplier() != nil)
		if err != nil {
			return nil
		}
		return rule
	}
	return r.cfg.Match(req.GetDomain(), r.entries)
}

// Summary returns the outcome so far. Rules whose stats keys share a
// metrics label (stats.Name) are summed under it, as the metrics are.
func (r *Replayer) Summary() Summary {
	s := r.sum
	s.Last = r.latest
	byName := map[string]int{}
	s.Rules = nil
	for _, st := range r.metrics.Stats().Rules() {
		name := stats.Name(st.Key)
		i, ok := byName[name]
		if !ok {
			i = len(s.Rules)
			byName[name] = i
			s.Rules = append(s.Rules, Result{Rule: name})
		}
		res := &s.Rules[i]
		res.Allowed += st.WithinLimit.Load()
		res.OverLimit += st.OverLimit.Load()
		res.NearLimit += st.NearLimit.Load()
		if t, ok := r.firstOver[st]; ok && (res.FirstOver.IsZero() || t.Before(res.FirstOver)) {
			res.FirstOver = t
		}
	}
	slices.SortFunc(s.Rules, func(a, b Result) int { return strings.Compare(a.Rule, b.Rule) })
	return s
}
