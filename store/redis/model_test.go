package redis_test

import (
	"time"

	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/window"
)

// model is the reference for the property test: plain Go maps and the pure
// functions of packages gcra and window, following store.Store's contract
// as literally as possible.
type model struct {
	tat   map[string]int64 // GCRA key → TAT, Unix ns
	count map[string]int64 // window key + "@" + start → hits
}

func newModel() *model {
	return &model{tat: map[string]int64{}, count: map[string]int64{}}
}

type write struct {
	del   bool
	tat   int64
	count int64
	ckey  string
	put   bool
}

// do applies b at now and returns the Results.
func (m *model) do(now time.Time, b store.Batch) []store.Result {
	n := now.UnixNano()
	out := make([]store.Result, len(b.Ops))
	writes := make([]write, len(b.Ops))
	denied := false
	for i, op := range b.Ops {
		if op.Algorithm == store.GCRA {
			out[i], writes[i] = m.gcra(n, op)
			if (op.Action == store.Spend || op.Action == store.Check) && !out[i].Allowed {
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
		case op.Action == store.Reset:
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

func (m *model) gcra(n int64, op store.Op) (store.Result, write) {
	p := op.Limit.Params()
	tat, ok := m.tat[op.Key]
	if ok && tat <= n {
		ok = false // full again: the same as no bucket
	}
	switch op.Action {
	case store.Reset:
		return store.Result{Allowed: true, Remaining: op.Limit.Burst, Applied: ok}, write{}
	case store.Refund:
		if !ok {
			return store.Result{Remaining: op.Limit.Burst}, write{}
		}
		r := p.Refund(n, tat, op.Cost)
		res := store.Result{Allowed: r.Allowed, Remaining: r.Remaining, ResetIn: time.Duration(r.ResetIn), Applied: r.Allowed}
		return res, write{put: r.Allowed, tat: r.TAT, del: r.Allowed && r.TAT == n}
	}
	if !ok {
		tat = n
	}
	r := p.Spend(n, tat, op.Cost)
	res := store.Result{Allowed: r.Allowed, Remaining: r.Remaining, RetryIn: time.Duration(r.RetryIn), ResetIn: time.Duration(r.ResetIn)}
	put := op.Action != store.Check && r.Allowed && op.Cost != 0
	res.Applied = put
	return res, write{put: put, tat: r.TAT}
}

func (m *model) window(now time.Time, op store.Op) (store.Result, write) {
	length := int64(op.Window.Length / time.Second)
	start := window.Start(now, length)
	ckey := op.Key + "@" + time.Unix(start, 0).UTC().Format(time.RFC3339)
	count, ok := m.count[ckey]
	resetIn := window.ResetIn(now, length)
	w := write{ckey: ckey}
	switch op.Action {
	case store.Reset:
		return store.Result{Allowed: true, Remaining: op.Window.Limit, ResetIn: resetIn, Applied: ok}, w
	case store.Check:
		h := window.Hit(count, op.Cost, op.Window.Limit)
		return store.Result{Allowed: !h.Over, Remaining: h.Remaining, ResetIn: resetIn, Count: count}, w
	case store.Refund:
		after := max(count-op.Cost, 0)
		h := window.Hit(after, 0, op.Window.Limit)
		w.put, w.count = ok, after
		return store.Result{Allowed: !h.Over, Remaining: h.Remaining, ResetIn: resetIn, Count: after, Applied: op.Cost != 0}, w
	}
	h := window.Hit(count, op.Cost, op.Window.Limit)
	r := store.Result{Allowed: !h.Over, Remaining: h.Remaining, ResetIn: resetIn, Count: h.After, Applied: op.Cost != 0}
	w.put, w.count = op.Cost != 0, h.After
	return r, w
}
