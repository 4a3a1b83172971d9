package redis_test

import (
	"time"

	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/window"
)

// model is the reference for the property test: plain Go maps for the
// buckets and store.Evaluate for the decisions, the function every backend
// shares. Redis decides in its script; the test checks that the script
// makes Evaluate's decisions and writes Evaluate's states.
type model struct {
	tat   map[string]int64 // GCRA key → TAT, Unix ns
	count map[string]int64 // window key + "@" + start → hits
}

func newModel() *model {
	return &model{tat: map[string]int64{}, count: map[string]int64{}}
}

// do applies b at now and returns the Results.
func (m *model) do(now time.Time, b store.Batch) []store.Result {
	out := make([]store.Result, len(b.Ops))
	states := make([]store.State, len(b.Ops))
	writes := make([]store.Write, len(b.Ops))
	for i, op := range b.Ops {
		if op.Algorithm == store.GCRA {
			tat, ok := m.tat[op.Key]
			states[i] = store.State{Exists: ok, TAT: tat}
			continue
		}
		start := window.Start(now, int64(op.Window.Length/time.Second))
		count, ok := m.count[windowKey(op.Key, start)]
		states[i] = store.State{Exists: ok, Start: start, Count: count}
	}
	store.Evaluate(now, b, states, out, writes)
	for i, op := range b.Ops {
		key := op.Key
		if op.Algorithm == store.FixedWindow {
			// A removed window is the current one; a put one names its
			// start.
			key = windowKey(op.Key, window.Start(now, int64(op.Window.Length/time.Second)))
		}
		switch {
		case writes[i] == store.Remove && op.Algorithm == store.GCRA:
			delete(m.tat, key)
		case writes[i] == store.Remove:
			delete(m.count, key)
		case writes[i] == store.Put && op.Algorithm == store.GCRA:
			m.tat[key] = states[i].TAT
		case writes[i] == store.Put:
			m.count[key] = states[i].Count
		}
	}
	return out
}

// windowKey is the model's key for the window of key that starts at start.
func windowKey(key string, start int64) string {
	return key + "@" + time.Unix(start, 0).UTC().Format(time.RFC3339)
}
