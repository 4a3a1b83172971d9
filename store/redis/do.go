package redis

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/window"
)

// scriptSHA is batchScript's SHA-1, the name EVALSHA calls it by.
var scriptSHA = func() string {
	sum := sha1.Sum([]byte(batchScript))
	return hex.EncodeToString(sum[:])
}()

// call is one script call: the operations of a batch that share a hash
// slot (all of them outside Cluster mode).
type call struct {
	slot uint16
	ops  []int    // indexes into the batch's Ops
	keys []string // KEYS, one per op
	args []string // ARGV
}

// stage says which round of a batch a call belongs to.
type stage uint8

const (
	// stageMain is the first (usually only) round.
	stageMain stage = iota
	// stageMainDeferring is the first round of a multi-slot all-or-nothing
	// batch: refunds and resets are evaluated only.
	stageMainDeferring
	// stageCompensate gives back what a denied multi-slot all-or-nothing
	// batch took.
	stageCompensate
	// stageDeferred applies the refunds and resets of an admitted
	// multi-slot all-or-nothing batch.
	stageDeferred
)

// Do applies b at now (or at Redis's time, with Options.ClockServer), in
// one script call per hash slot group, the groups in parallel. On a single
// node or within one slot the batch is atomic. Across slots of a Cluster, an
// all-or-nothing batch that some slot denies is undone by a compensating
// refund in a second round trip; see the package doc for exactly what holds.
// Do returns within Options.Timeout; errors from an unreachable Redis wrap
// store.ErrUnavailable, a call cut short by the caller's own deadline
// included (store/fallback tells the two apart).
func (s *Store) Do(ctx context.Context, now time.Time, b store.Batch, out []store.Result) error {
	if err := b.Check(out); err != nil {
		return err
	}
	if len(b.Ops) == 0 {
		return nil
	}
	start := s.clock.Now()
	// A caller's deadline within the timeout bounds the call already (Envoy
	// sends its rate limit filter's timeout, 20ms by default); otherwise a
	// deadline shared with the calls that start about now: no timer per
	// call either way.
	callCtx := s.shared.bound(ctx)
	err := s.do(callCtx, now, b, out)
	s.m.observe(s.clock.Now().Sub(start))
	if err != nil && callCtx != ctx && ctx.Err() != nil {
		// The caller went away during a call that then failed (and was
		// counted): say so, as a call on the caller's own context would
		// have.
		return fmt.Errorf("redis: %w", ctx.Err())
	}
	return err
}

func (s *Store) do(ctx context.Context, now time.Time, b store.Batch, out []store.Result) error {
	ops := b.Ops
	var plain []int // Envoy-compatible window spends and checks
	var callBuf [1]call
	calls := callBuf[:0]
	for i := range ops {
		op := &ops[i]
		if s.envoy && op.Algorithm == store.FixedWindow && op.Kind != store.Refund && op.Kind != store.Reset {
			plain = append(plain, i)
			continue
		}
		calls = s.addOp(calls, ops, i, now)
	}
	st := stageMain
	multiAON := b.AllOrNothing && len(calls) > 1
	if multiAON {
		st = stageMainDeferring
	}
	for i := range calls {
		s.fillArgs(&calls[i], ops, now, st, b.AllOrNothing)
	}
	if err := s.exec(ctx, now, ops, calls, plain, out); err != nil {
		return err
	}
	if !multiAON {
		return nil
	}

	denied := false
	for i := range ops {
		if ops[i].Decides() && !out[i].Allowed {
			denied = true
			break
		}
	}
	calls = calls[:0]
	if denied {
		// Give back what the admitting slots took.
		for i := range ops {
			op := &ops[i]
			if op.Algorithm == store.GCRA && (op.Kind == store.Spend || op.Kind == store.SpendOnly) && out[i].Applied {
				calls = s.addOp(calls, ops, i, now)
			}
		}
		if len(calls) == 0 {
			return nil
		}
		s.m.compensations.Inc()
		for i := range calls {
			s.fillArgs(&calls[i], ops, now, stageCompensate, false)
		}
		undo := make([]store.Result, len(ops))
		if err := s.exec(ctx, now, ops, calls, nil, undo); err != nil {
			return fmt.Errorf("compensate a denied multi-slot batch: %w", err)
		}
		for _, c := range calls {
			for _, i := range c.ops {
				out[i].Applied = false
			}
		}
		return nil
	}
	// Admitted everywhere: now the refunds and resets.
	for i := range ops {
		if deferred(&ops[i]) {
			calls = s.addOp(calls, ops, i, now)
		}
	}
	if len(calls) == 0 {
		return nil
	}
	for i := range calls {
		s.fillArgs(&calls[i], ops, now, stageDeferred, false)
	}
	return s.exec(ctx, now, ops, calls, nil, out)
}

// deferred reports whether op, in a multi-slot all-or-nothing batch, waits
// until every slot has admitted the batch: a write that all-or-nothing
// blocks and a refund could not undo.
func deferred(op *store.Op) bool {
	return op.Kind == store.Reset || (op.Algorithm == store.GCRA && op.Kind == store.Refund)
}

// key returns op's Redis key: for a window, with the window start unless
// the script adds it.
func (s *Store) key(op *store.Op, now time.Time) string {
	if op.Algorithm != store.FixedWindow || s.serverWindows {
		return s.prefix + op.Key
	}
	start := window.Start(now, int64(op.Window.Length/time.Second))
	// One allocation: the digits go straight into the key.
	var b strings.Builder
	b.Grow(len(s.prefix) + len(op.Key) + 20)
	b.WriteString(s.prefix)
	b.WriteString(op.Key)
	var digits [20]byte
	b.Write(strconv.AppendInt(digits[:0], start, 10))
	return b.String()
}

// addOp adds ops[i] to the call for its slot, appending a call if needed.
func (s *Store) addOp(calls []call, ops []store.Op, i int, now time.Time) []call {
	key := s.key(&ops[i], now)
	var sl uint16
	if s.cluster {
		sl = slot(key)
	}
	for j := range calls {
		if calls[j].slot == sl {
			calls[j].ops = append(calls[j].ops, i)
			calls[j].keys = append(calls[j].keys, key)
			return calls
		}
	}
	return append(calls, call{slot: sl, ops: []int{i}, keys: []string{key}})
}

// increment is cost*E, the time cost tokens stand for, saturated at
// math.MaxInt64: a cost above the burst (never allowed) may overflow, and
// must still be denied, or refund the bucket to full.
func increment(p gcra.Params, cost int64) int64 {
	if cost > math.MaxInt64/p.EmissionInterval {
		return math.MaxInt64
	}
	return cost * p.EmissionInterval
}

// fillArgs writes c's ARGV (see batchScript).
func (s *Store) fillArgs(c *call, ops []store.Op, now time.Time, st stage, aon bool) {
	args := make([]string, 0, 3+3*len(c.ops))
	nowArg := ""
	if !s.serverClock {
		nowArg = strconv.FormatInt(now.UnixNano(), 10)
	}
	args = append(args, nowArg, flag(aon), flag(s.serverWindows))
	for _, i := range c.ops {
		op := &ops[i]
		var code [2]byte
		var a, b string
		if op.Algorithm == store.GCRA {
			code[0] = 'g'
			p := op.Limit.Params()
			a = strconv.FormatInt(increment(p, op.Cost), 10)
			b = strconv.FormatInt(p.BurstOffset, 10)
		} else {
			code[0] = 'w'
			a = strconv.FormatInt(op.Cost, 10)
			length := int64(op.Window.Length / time.Second)
			b = strconv.FormatInt(length, 10)
			if s.jitter > 0 && (op.Kind == store.Spend || op.Kind == store.SpendOnly) {
				b += "," + strconv.FormatInt(s.windowTTL(length), 10)
			}
		}
		code[1] = actionLetter[op.Kind]
		switch {
		case st == stageCompensate:
			code[1] = 'f'
		case st == stageMainDeferring && deferred(op):
			code[1] -= 'a' - 'A' // upper case: evaluate only
		}
		args = append(args, string(code[:]), a, b)
	}
	c.args = args
}

var actionLetter = [...]byte{
	store.Spend:     's',
	store.Check:     'c',
	store.SpendOnly: 'o',
	store.Refund:    'f',
	store.Reset:     'r',
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// command builds the command name on key with args, marked read-only
// (retried, and served by a replica where rueidis is told to) when
// readOnly. rueidis's typed builders mark every key as one, working out
// its Cluster slot (a CRC16 of the key); with one connection to a single
// node nothing needs it (s.keyless), and the key goes as a plain argument.
func (s *Store) command(readOnly bool, name, key string, args ...string) rueidis.Completed {
	c := s.client.B().Arbitrary(name)
	if s.keyless {
		c = c.Args(key)
	} else {
		c = c.Keys(key)
	}
	c = c.Args(args...)
	if readOnly {
		return c.ReadOnly()
	}
	return c.Build()
}

// exec sends calls (as EVALSHA) and the Envoy-compatible commands for the
// plain ops in one pipelined round trip per node, reloads the script where
// a node answers NOSCRIPT, and writes the ops' Results into out.
func (s *Store) exec(ctx context.Context, now time.Time, ops []store.Op, calls []call, plain []int, out []store.Result) error {
	cmds := make(rueidis.Commands, 0, len(calls)+2*len(plain))
	for i := range calls {
		c := &calls[i]
		cmds = append(cmds, retryable(c, s.client.B().Evalsha().Sha1(s.sha).Numkeys(int64(len(c.keys))).Key(c.keys...).Arg(c.args...).Build()))
	}
	for _, i := range plain {
		op := &ops[i]
		key := s.key(op, now)
		if op.Kind == store.Check {
			cmds = append(cmds, s.command(true, "GET", key))
			continue
		}
		// envoyproxy/ratelimit's fixed cache: INCRBY key hits, EXPIRE key
		// unitSeconds, pipelined.
		cmds = append(cmds,
			s.command(false, "INCRBY", key, strconv.FormatInt(op.Cost, 10)).ToRetryable(),
			s.command(false, "EXPIRE", key, strconv.FormatInt(s.windowTTL(int64(op.Window.Length/time.Second)), 10)).ToRetryable())
	}
	var resps []rueidis.RedisResult
	if len(cmds) == 1 {
		resps = []rueidis.RedisResult{s.client.Do(ctx, cmds[0])}
	} else {
		resps = s.client.DoMulti(ctx, cmds...)
	}

	// Nodes that lost the script (restarted, SCRIPT FLUSH, failover) get
	// it again through EVAL, which also caches it.
	var again []int
	for i := range calls {
		if re, ok := rueidis.IsRedisErr(resps[i].Error()); ok && re.IsNoScript() {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		s.m.scriptLoads.Add(float64(len(again)))
		retry := make(rueidis.Commands, 0, len(again))
		for _, i := range again {
			c := &calls[i]
			retry = append(retry, retryable(c, s.client.B().Eval().Script(batchScript).Numkeys(int64(len(c.keys))).Key(c.keys...).Arg(c.args...).Build()))
		}
		for j, r := range s.client.DoMulti(ctx, retry...) {
			resps[again[j]] = r
		}
	}

	for i := range calls {
		if err := s.scriptResults(now, ops, &calls[i], resps[i], out); err != nil {
			return err
		}
	}
	k := len(calls)
	for _, i := range plain {
		op := &ops[i]
		if op.Kind == store.Check {
			count, err := resps[k].AsInt64()
			if err != nil && !rueidis.IsRedisNil(err) {
				return s.fail(err)
			}
			out[i] = result(op, now, count, true, false)
			k++
			continue
		}
		after, err := resps[k].AsInt64()
		if isOverflow(err) {
			// The count would pass the largest integer Redis holds:
			// saturated, over any limit, and this hit not counted.
			out[i] = result(op, now, math.MaxInt64, true, false)
			k += 2
			continue
		}
		if err == nil {
			err = resps[k+1].Error()
		}
		if err != nil {
			return s.fail(err)
		}
		out[i] = result(op, now, after-op.Cost, true, op.Cost != 0)
		k += 2
	}
	return nil
}

// isOverflow tells Redis's answer to an INCRBY past the int64 range.
func isOverflow(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && strings.Contains(re.Error(), "overflow")
}

// scriptResults reads one call's reply into out.
func (s *Store) scriptResults(now time.Time, ops []store.Op, c *call, resp rueidis.RedisResult, out []store.Result) error {
	arr, err := resp.ToArray()
	if err != nil {
		return s.fail(err)
	}
	if len(arr) != 1+2*len(c.ops) {
		return s.fail(fmt.Errorf("%w: script returned %d values for %d operations", errProtocol, len(arr), len(c.ops)))
	}
	nowStr, err := arr[0].ToString()
	if err != nil {
		return s.fail(fmt.Errorf("%w: now: %w", errProtocol, err))
	}
	gnow, err := parseInt(nowStr)
	if err != nil {
		return s.fail(err)
	}
	wnow := now
	if s.serverWindows {
		wnow = time.Unix(0, gnow)
	}
	for j, i := range c.ops {
		st, err1 := arr[1+2*j].ToString()
		applied, err2 := arr[2+2*j].AsInt64()
		if err1 != nil || err2 != nil {
			return s.fail(fmt.Errorf("%w: op %d: %v %v", errProtocol, i, err1, err2))
		}
		var v int64
		if st != "" {
			if v, err = parseInt(st); err != nil {
				return s.fail(err)
			}
		}
		op := &ops[i]
		if op.Algorithm == store.GCRA {
			out[i] = result(op, time.Unix(0, gnow), v, st != "", applied == 1)
		} else {
			out[i] = result(op, wnow, v, st != "", applied == 1)
		}
	}
	return nil
}

// result is op's Result at now on the state Redis read for its bucket, a
// GCRA TAT or a window count v (ok: the key existed), as store.Evaluate
// decides it, but with Applied as Redis reports it: the script or the
// Envoy commands changed the bucket, not Go, and what they did can differ
// from what Evaluate would say of op alone (an all-or-nothing slot group,
// an evaluate-only first round, a count past the int64 range).
func result(op *store.Op, now time.Time, v int64, ok, applied bool) store.Result {
	st := store.State{Exists: ok}
	if op.Algorithm == store.GCRA {
		st.TAT = v
	} else {
		// The key names its window: the count is the current window's.
		st.Start, st.Count = window.Start(now, int64(op.Window.Length/time.Second)), v
	}
	r, _, _ := op.Evaluate(now, st)
	r.Applied = applied
	return r
}

// retryable marks cmd, c's script call, for one immediate retry on a
// connection error (see New's RetryDelay), unless c gives tokens back. A
// connection error usually means the command never reached Redis (an idle
// connection to a server that restarted); if it did, running it twice
// spends or counts twice, which can deny too much but never admit too
// much. Refunds are not retried: twice would give back too much.
func retryable(c *call, cmd rueidis.Completed) rueidis.Completed {
	for j := 3; j < len(c.args); j += 3 {
		if code := c.args[j]; code == "gf" || code == "wf" {
			return cmd
		}
	}
	return cmd.ToRetryable()
}

// windowTTL is the TTL of a window key of length seconds: the length plus,
// with Options.ExpirationJitter, a random 0 to jitter seconds.
func (s *Store) windowTTL(length int64) int64 {
	if s.jitter <= 0 {
		return length
	}
	return length + rand.Int64N(s.jitter+1) // #nosec G404 -- spreads expiries, not a secret
}
