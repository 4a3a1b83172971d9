package store_test

import (
	"maps"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/window"
)

var (
	t0         = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) // on a window boundary
	tenPerSec  = gcra.Limit{Burst: 10, Count: 10, Period: time.Second}
	ms         = time.Millisecond
	fivePerMin = store.Window{Limit: 5, Length: time.Minute}
)

func gcraOp(a store.Kind, cost int64) store.Op {
	return store.Op{Key: "g", Algorithm: store.GCRA, Kind: a, Limit: tenPerSec, Cost: cost}
}

func windowOp(a store.Kind, cost int64) store.Op {
	return store.Op{Key: "w_", Algorithm: store.FixedWindow, Kind: a, Window: fivePerMin, Cost: cost}
}

func TestOpEvaluate(t *testing.T) {
	t.Parallel()
	full := t0.UnixNano() + int64(1000*ms) // a GCRA bucket with no token left
	start := t0.Unix()
	for _, tc := range []struct {
		name      string
		op        store.Op
		at        time.Time
		prior     store.State
		want      store.Result
		wantWrite store.Write
		wantNext  store.State
	}{
		{
			name:      "a spend on a missing bucket takes a token",
			op:        gcraOp(store.Spend, 1),
			at:        t0,
			want:      store.Result{Allowed: true, Remaining: 9, ResetIn: 100 * ms, Applied: true},
			wantWrite: store.Put,
			wantNext:  store.State{Exists: true, TAT: t0.UnixNano() + int64(100*ms)},
		},
		{
			name:  "a spend on an empty bucket is denied and changes nothing",
			op:    gcraOp(store.Spend, 1),
			at:    t0,
			prior: store.State{Exists: true, TAT: full},
			want:  store.Result{Remaining: 0, RetryIn: 100 * ms, ResetIn: time.Second},
		},
		{
			// A TAT in the past is a full bucket, whatever Exists says.
			name:      "a bucket past its TAT is full",
			op:        gcraOp(store.Spend, 10),
			at:        t0.Add(time.Second),
			prior:     store.State{Exists: true, TAT: full},
			want:      store.Result{Allowed: true, Remaining: 0, RetryIn: time.Second, ResetIn: time.Second, Applied: true},
			wantWrite: store.Put,
			wantNext:  store.State{Exists: true, TAT: full + int64(time.Second)},
		},
		{
			name:  "a check decides like a spend and writes nothing",
			op:    gcraOp(store.Check, 3),
			at:    t0,
			want:  store.Result{Allowed: true, Remaining: 7, ResetIn: 300 * ms},
			prior: store.State{},
		},
		{
			name: "a spend of cost 0 peeks",
			op:   gcraOp(store.Spend, 0),
			at:   t0,
			want: store.Result{Allowed: true, Remaining: 10},
		},
		{
			name:      "a refund gives tokens back",
			op:        gcraOp(store.Refund, 2),
			at:        t0,
			prior:     store.State{Exists: true, TAT: full},
			want:      store.Result{Allowed: true, Remaining: 2, ResetIn: 800 * ms, Applied: true},
			wantWrite: store.Put,
			wantNext:  store.State{Exists: true, TAT: full - int64(200*ms)},
		},
		{
			name:      "a refund back to full removes the bucket",
			op:        gcraOp(store.Refund, 50),
			at:        t0,
			prior:     store.State{Exists: true, TAT: full},
			want:      store.Result{Allowed: true, Remaining: 10, Applied: true},
			wantWrite: store.Remove,
		},
		{
			name: "a refund on a missing bucket gives nothing back",
			op:   gcraOp(store.Refund, 1),
			at:   t0,
			want: store.Result{Remaining: 10},
		},
		{
			name:      "a reset removes a live bucket",
			op:        gcraOp(store.Reset, 0),
			at:        t0,
			prior:     store.State{Exists: true, TAT: full},
			want:      store.Result{Allowed: true, Remaining: 10, Applied: true},
			wantWrite: store.Remove,
		},
		{
			name: "a reset of a missing bucket changes nothing",
			op:   gcraOp(store.Reset, 0),
			at:   t0,
			want: store.Result{Allowed: true, Remaining: 10},
		},
		{
			name:      "a window hit counts",
			op:        windowOp(store.Spend, 2),
			at:        t0.Add(20 * time.Second),
			prior:     store.State{Exists: true, Start: start, Count: 1},
			want:      store.Result{Allowed: true, Remaining: 2, ResetIn: 40 * time.Second, Count: 3, Applied: true},
			wantWrite: store.Put,
			wantNext:  store.State{Exists: true, Start: start, Count: 3},
		},
		{
			// Envoy counts every hit; over the limit until the window ends.
			name:      "a window hit over the limit counts too",
			op:        windowOp(store.Spend, 1),
			at:        t0.Add(20 * time.Second),
			prior:     store.State{Exists: true, Start: start, Count: 5},
			want:      store.Result{RetryIn: 40 * time.Second, ResetIn: 40 * time.Second, Count: 6, Applied: true},
			wantWrite: store.Put,
			wantNext:  store.State{Exists: true, Start: start, Count: 6},
		},
		{
			name:      "the state of an earlier window counts for nothing",
			op:        windowOp(store.Spend, 1),
			at:        t0.Add(time.Minute),
			prior:     store.State{Exists: true, Start: start, Count: 5},
			want:      store.Result{Allowed: true, Remaining: 4, ResetIn: time.Minute, Count: 1, Applied: true},
			wantWrite: store.Put,
			wantNext:  store.State{Exists: true, Start: start + 60, Count: 1},
		},
		{
			name:  "a window check reads the count",
			op:    windowOp(store.Check, 2),
			at:    t0,
			prior: store.State{Exists: true, Start: start, Count: 4},
			want:  store.Result{RetryIn: time.Minute, ResetIn: time.Minute, Count: 4},
		},
		{
			name:      "a window refund never goes below zero",
			op:        windowOp(store.Refund, 9),
			at:        t0,
			prior:     store.State{Exists: true, Start: start, Count: 4},
			want:      store.Result{Allowed: true, Remaining: 5, ResetIn: time.Minute, Applied: true},
			wantWrite: store.Put,
			wantNext:  store.State{Exists: true, Start: start},
		},
		{
			// Applied by convention; there is nothing to write.
			name: "a window refund on a missing window leaves it missing",
			op:   windowOp(store.Refund, 1),
			at:   t0,
			want: store.Result{Allowed: true, Remaining: 5, ResetIn: time.Minute, Applied: true},
		},
		{
			name:      "a window reset removes the window",
			op:        windowOp(store.Reset, 0),
			at:        t0,
			prior:     store.State{Exists: true, Start: start, Count: 4},
			want:      store.Result{Allowed: true, Remaining: 5, ResetIn: time.Minute, Applied: true},
			wantWrite: store.Remove,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, w, next := tc.op.Evaluate(tc.at, tc.prior)
			if got != tc.want || w != tc.wantWrite || next != tc.wantNext {
				t.Errorf("got %+v, write %d, next %+v\nwant %+v, write %d, next %+v", got, w, next, tc.want, tc.wantWrite, tc.wantNext)
			}
		})
	}
}

func TestEvaluateAllOrNothing(t *testing.T) {
	t.Parallel()
	empty := store.State{Exists: true, TAT: t0.UnixNano() + int64(time.Second)}
	live := store.State{Exists: true, TAT: t0.UnixNano() + int64(500*ms)}
	window := store.State{Exists: true, Start: t0.Unix(), Count: 1}
	ops := []store.Op{
		gcraOp(store.Spend, 1),
		gcraOp(store.SpendOnly, 1),
		gcraOp(store.Refund, 1),
		gcraOp(store.Reset, 0),
		windowOp(store.Spend, 1),
		windowOp(store.Refund, 1),
		windowOp(store.Reset, 0),
	}
	for i := range ops {
		ops[i].Key += strconv.Itoa(i)
	}
	for _, tc := range []struct {
		name         string
		allOrNothing bool
		first        store.State // the Spend's bucket
		wantApplied  []bool
	}{
		{name: "an allowed batch applies everything", allOrNothing: true, first: live,
			wantApplied: []bool{true, true, true, true, true, true, true}},
		{name: "a denied spend blocks GCRA writes and resets, not window hits", allOrNothing: true, first: empty,
			wantApplied: []bool{false, false, false, false, true, true, false}},
		{name: "a denied spend blocks nothing in a batch that is not all-or-nothing", first: empty,
			wantApplied: []bool{false, true, true, true, true, true, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			states := []store.State{tc.first, live, live, live, window, window, window}
			out := make([]store.Result, len(ops))
			writes := make([]store.Write, len(ops))
			store.Evaluate(t0, store.Batch{Ops: ops, AllOrNothing: tc.allOrNothing}, states, out, writes)
			for i := range ops {
				if out[i].Applied != tc.wantApplied[i] || (writes[i] != store.Keep) != tc.wantApplied[i] {
					t.Errorf("op %d (%s %s): got applied %v, write %d, want applied %v", i, ops[i].Kind, ops[i].Key, out[i].Applied, writes[i], tc.wantApplied[i])
				}
			}
		})
	}
}

func TestEvaluateAllocatesNothing(t *testing.T) {
	ops := []store.Op{gcraOp(store.Spend, 1), windowOp(store.Spend, 1)}
	states := make([]store.State, 2)
	out := make([]store.Result, 2)
	writes := make([]store.Write, 2)
	n := testing.AllocsPerRun(100, func() {
		store.Evaluate(t0, store.Batch{Ops: ops, AllOrNothing: true}, states, out, writes)
	})
	if n != 0 {
		t.Errorf("got %v allocations per batch, want 0", n)
	}
}

// literal is a reference for Evaluate written from store.Store's contract
// as literally as possible, over plain maps.
type literal struct {
	tat   map[string]int64
	count map[string]int64 // window key + "@" + start → hits
}

type literalWrite struct {
	del, put bool
	tat      int64
	count    int64
	ckey     string
}

func (m *literal) do(now time.Time, b store.Batch) []store.Result {
	n := now.UnixNano()
	out := make([]store.Result, len(b.Ops))
	writes := make([]literalWrite, len(b.Ops))
	denied := false
	for i, op := range b.Ops {
		if op.Algorithm == store.GCRA {
			out[i], writes[i] = m.gcra(n, op)
			if (op.Kind == store.Spend || op.Kind == store.Check) && !out[i].Allowed {
				denied = true
			}
		} else {
			out[i], writes[i] = m.window(now, op)
			if !out[i].Allowed {
				out[i].RetryIn = out[i].ResetIn // over the limit until the window ends
			}
		}
	}
	blocked := b.AllOrNothing && denied
	for i, op := range b.Ops {
		w := writes[i]
		switch {
		case op.Kind == store.Reset:
			if blocked {
				out[i].Applied = false
				continue
			}
			if op.Algorithm == store.GCRA {
				delete(m.tat, op.Key)
			} else {
				delete(m.count, w.ckey)
			}
		case op.Algorithm == store.FixedWindow:
			// Every hit counts, blocked or not.
			if w.put {
				m.count[w.ckey] = w.count
			}
		case blocked:
			out[i].Applied = false
		case w.del:
			delete(m.tat, op.Key)
		case w.put:
			m.tat[op.Key] = w.tat
		}
	}
	return out
}

func (m *literal) gcra(n int64, op store.Op) (store.Result, literalWrite) {
	p := op.Limit.Params()
	tat, ok := m.tat[op.Key]
	if ok && tat <= n {
		ok = false // full again: the same as no bucket
	}
	switch op.Kind {
	case store.Reset:
		return store.Result{Allowed: true, Remaining: op.Limit.Burst, Applied: ok}, literalWrite{}
	case store.Refund:
		if !ok {
			return store.Result{Remaining: op.Limit.Burst}, literalWrite{}
		}
		r := p.Refund(n, tat, op.Cost)
		res := store.Result{Allowed: r.Allowed, Remaining: r.Remaining, ResetIn: time.Duration(r.ResetIn), Applied: r.Allowed}
		return res, literalWrite{put: r.Allowed, tat: r.TAT, del: r.Allowed && r.TAT == n}
	}
	if !ok {
		tat = n
	}
	r := p.Spend(n, tat, op.Cost)
	res := store.Result{Allowed: r.Allowed, Remaining: r.Remaining, RetryIn: time.Duration(r.RetryIn), ResetIn: time.Duration(r.ResetIn)}
	put := op.Kind != store.Check && r.Allowed && op.Cost != 0
	res.Applied = put
	return res, literalWrite{put: put, tat: r.TAT}
}

func (m *literal) window(now time.Time, op store.Op) (store.Result, literalWrite) {
	length := int64(op.Window.Length / time.Second)
	start := window.Start(now, length)
	ckey := windowKey(op.Key, start)
	count, ok := m.count[ckey]
	resetIn := window.ResetIn(now, length)
	w := literalWrite{ckey: ckey}
	switch op.Kind {
	case store.Reset:
		return store.Result{Allowed: true, Remaining: op.Window.Limit, ResetIn: resetIn, Applied: ok}, w
	case store.Check:
		h := window.Hit(count, op.Cost, op.Window.Limit)
		return store.Result{Allowed: !h.Over, Remaining: h.Remaining, ResetIn: resetIn, Count: count}, w
	case store.Refund:
		after := max(count-op.Cost, 0)
		h := window.Hit(after, 0, op.Window.Limit)
		w.put, w.count = ok && op.Cost != 0, after
		return store.Result{Allowed: !h.Over, Remaining: h.Remaining, ResetIn: resetIn, Count: after, Applied: op.Cost != 0}, w
	}
	h := window.Hit(count, op.Cost, op.Window.Limit)
	r := store.Result{Allowed: !h.Over, Remaining: h.Remaining, ResetIn: resetIn, Count: h.After, Applied: op.Cost != 0}
	w.put, w.count = op.Cost != 0, h.After
	return r, w
}

func windowKey(key string, start int64) string {
	return key + "@" + strconv.FormatInt(start, 10)
}

// evaluated keeps buckets in maps as literal does, and decides with
// store.Evaluate.
type evaluated literal

func (m *evaluated) do(now time.Time, b store.Batch) []store.Result {
	out := make([]store.Result, len(b.Ops))
	states := make([]store.State, len(b.Ops))
	writes := make([]store.Write, len(b.Ops))
	keys := make([]string, len(b.Ops))
	for i, op := range b.Ops {
		if op.Algorithm == store.GCRA {
			keys[i] = op.Key
			tat, ok := m.tat[op.Key]
			states[i] = store.State{Exists: ok, TAT: tat}
			continue
		}
		start := window.Start(now, int64(op.Window.Length/time.Second))
		keys[i] = windowKey(op.Key, start)
		count, ok := m.count[keys[i]]
		states[i] = store.State{Exists: ok, Start: start, Count: count}
	}
	store.Evaluate(now, b, states, out, writes)
	for i, op := range b.Ops {
		switch {
		case writes[i] == store.Remove && op.Algorithm == store.GCRA:
			delete(m.tat, keys[i])
		case writes[i] == store.Remove:
			delete(m.count, keys[i])
		case writes[i] == store.Put && op.Algorithm == store.GCRA:
			m.tat[keys[i]] = states[i].TAT
		case writes[i] == store.Put:
			m.count[keys[i]] = states[i].Count
		}
	}
	return out
}

func TestEvaluateMatchesTheLiteralReading(t *testing.T) {
	t.Parallel()
	limits := []gcra.Limit{
		{Burst: 5, Count: 5, Period: time.Second},
		{Burst: 10, Count: 1, Period: 365 * 24 * time.Hour},
		{Burst: 4, Count: 3, Period: 1000000007},
	}
	windows := []store.Window{{Limit: 3, Length: time.Second}, {Limit: 10, Length: time.Minute}}
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		want := &literal{tat: map[string]int64{}, count: map[string]int64{}}
		got := &evaluated{tat: map[string]int64{}, count: map[string]int64{}}
		now := t0
		for step := range 3000 {
			now = now.Add(time.Duration(rng.Int64N(int64([]time.Duration{1, time.Microsecond, 300 * ms, 20 * time.Second}[rng.IntN(4)]))))
			b := store.Batch{AllOrNothing: rng.IntN(2) == 0}
			for _, k := range rng.Perm(6)[:1+rng.IntN(4)] {
				op := store.Op{Key: strconv.Itoa(k), Kind: store.Kind(1 + rng.IntN(5))}
				if k < 4 {
					op.Algorithm, op.Limit = store.GCRA, limits[k%len(limits)]
					op.Cost = rng.Int64N(op.Limit.Burst + 2)
				} else {
					op.Algorithm, op.Window = store.FixedWindow, windows[k-4]
					op.Cost = rng.Int64N(op.Window.Limit + 2)
				}
				b.Ops = append(b.Ops, op)
			}
			w, g := want.do(now, b), got.do(now, b)
			for i := range w {
				if g[i] != w[i] {
					t.Fatalf("seed %d step %d, batch %+v, op %d:\ngot  %+v\nwant %+v", seed, step, b, i, g[i], w[i])
				}
			}
			// A GCRA bucket past its TAT is the same as none.
			maps.DeleteFunc(got.tat, func(_ string, tat int64) bool { return tat <= now.UnixNano() })
			maps.DeleteFunc(want.tat, func(_ string, tat int64) bool { return tat <= now.UnixNano() })
			if !maps.Equal(got.tat, want.tat) || !maps.Equal(got.count, want.count) {
				t.Fatalf("seed %d step %d, batch %+v: buckets\ngot  %v %v\nwant %v %v", seed, step, b, got.tat, got.count, want.tat, want.count)
			}
		}
	}
}
