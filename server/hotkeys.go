package server

import (
	"container/heap"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sluice-rl/sluice/clock"
)

// The hottest request keys are counted in bounded memory: a space-saving
// top-k of hotKeysCap keys per half minute, the current half and the one
// before kept, so that the dashboard shows the last 30 to 60 seconds. One
// descriptor in hotKeysSample is counted, weighted by hotKeysSample, so
// the serving path rarely takes the lock.
const (
	hotKeysCap    = 64
	hotKeysHalf   = 30 * time.Second
	hotKeysSample = 8
	hotKeysShown  = 20

	// hotKeyMaxBytes bounds a key's text: a longer one is cut at a
	// character's start and ends in "…", so that the kept keys hold
	// kilobytes, not the megabytes of 64 entries of
	// --max-descriptor-entry-bytes each. Keys alike in their first
	// hotKeyMaxBytes count as one.
	hotKeyMaxBytes = 512
)

// hotKeys counts the busiest request keys. The zero value is not usable;
// create it with newHotKeys. It is safe for concurrent use.
type hotKeys struct {
	seen atomic.Uint64 // descriptors seen, for sampling

	mu    sync.Mutex // protects cur, prev, start
	cur   *topK
	prev  *topK
	start time.Time // when cur began
}

// hotCount is one key's estimated hits; err bounds the overestimate the
// space-saving algorithm adds when the key replaced another.
type hotCount struct {
	key             string
	hits, over, err uint64
}

// topK is a space-saving top-k: at most hotKeysCap counts in a min-heap
// by hits, so that the least counted key, which a new key replaces when
// the heap is full, is at its root (one sift, not a scan of every key).
type topK struct {
	at     map[string]int // where each key's count is in counts
	counts []hotCount
}

func newTopK() *topK { return &topK{at: map[string]int{}} }

// add counts w hits, o of them over the limit, for key.
func (t *topK) add(key string, w, o uint64) {
	if i, ok := t.at[key]; ok {
		t.counts[i].hits += w
		t.counts[i].over += o
		heap.Fix(t, i)
		return
	}
	if len(t.counts) < hotKeysCap {
		t.counts = append(t.counts, hotCount{key: key, hits: w, over: o})
		t.at[key] = len(t.counts) - 1
		heap.Fix(t, len(t.counts)-1)
		return
	}
	// Space saving: the new key takes the least counted key's place and
	// inherits its count as the possible overestimate.
	least := t.counts[0]
	delete(t.at, least.key)
	t.counts[0] = hotCount{key: key, hits: least.hits + w, over: o, err: least.hits}
	t.at[key] = 0
	heap.Fix(t, 0)
}

// heap.Interface, for the heap package's sifting only: Push and Pop are
// never called.
func (t *topK) Len() int           { return len(t.counts) }
func (t *topK) Less(i, j int) bool { return t.counts[i].hits < t.counts[j].hits }
func (t *topK) Swap(i, j int) {
	t.counts[i], t.counts[j] = t.counts[j], t.counts[i]
	t.at[t.counts[i].key], t.at[t.counts[j].key] = i, j
}
func (t *topK) Push(any) { panic("server: topK.Push") }
func (t *topK) Pop() any { panic("server: topK.Pop") }

// HotKey is one of the hottest request keys in state.json: a domain and a
// descriptor's entries, with estimated hits (a sample, scaled) and how
// many of them were over the limit.
type HotKey struct {
	Key       string `json:"key"`
	Hits      uint64 `json:"hits"`
	OverLimit uint64 `json:"over_limit"`
}

func newHotKeys() *hotKeys {
	return &hotKeys{cur: newTopK(), prev: newTopK()}
}

// add counts c, over the limit when over, if it is sampled.
func (h *hotKeys) add(clk clock.Clock, c *check, over bool) {
	if (h.seen.Add(1)-1)%hotKeysSample != 0 || c.rule == nil {
		return
	}
	var b strings.Builder
	b.WriteString(c.rule.Domain)
	for i, e := range c.entries {
		if b.Len() > hotKeyMaxBytes {
			break
		}
		if i == 0 {
			b.WriteByte(' ')
		} else {
			b.WriteByte(',')
		}
		b.WriteString(e.Key)
		b.WriteByte('=')
		b.WriteString(e.Value)
	}
	key := b.String()
	if len(key) > hotKeyMaxBytes {
		cut := hotKeyMaxBytes
		for cut > 0 && !utf8.RuneStart(key[cut]) {
			cut--
		}
		key = key[:cut] + "…" // a copy: the long text is not kept
	}
	w := c.hits * hotKeysSample
	var o uint64
	if over {
		o = w
	}
	now := clk.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rotate(now)
	h.cur.add(key, w, o)
}

// rotate starts a new half when the current one is over. It requires h.mu
// held.
func (h *hotKeys) rotate(now time.Time) {
	if h.start.IsZero() {
		h.start = now
	}
	switch since := now.Sub(h.start); {
	case since >= 2*hotKeysHalf:
		h.prev, h.cur, h.start = newTopK(), newTopK(), now
	case since >= hotKeysHalf:
		h.prev, h.cur, h.start = h.cur, newTopK(), h.start.Add(hotKeysHalf)
	}
}

// top returns the hottest keys of the last half minute or two, hottest
// first.
func (h *hotKeys) top(now time.Time) []HotKey {
	h.mu.Lock()
	h.rotate(now)
	sum := map[string]*HotKey{}
	for _, t := range []*topK{h.prev, h.cur} {
		for _, hc := range t.counts {
			s := sum[hc.key]
			if s == nil {
				s = &HotKey{Key: hc.key}
				sum[hc.key] = s
			}
			s.Hits += hc.hits
			s.OverLimit += hc.over
		}
	}
	h.mu.Unlock()
	out := make([]HotKey, 0, len(sum))
	for _, s := range sum {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Hits != out[j].Hits {
			return out[i].Hits > out[j].Hits
		}
		return out[i].Key < out[j].Key
	})
	return out[:min(len(out), hotKeysShown)]
}
