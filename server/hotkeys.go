package server

import (
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
)

// hotKeys counts the busiest request keys. The zero value is not usable;
// create it with newHotKeys. It is safe for concurrent use.
type hotKeys struct {
	seen atomic.Uint64 // descriptors seen, for sampling

	mu    sync.Mutex // protects cur, prev, start
	cur   map[string]*hotCount
	prev  map[string]*hotCount
	start time.Time // when cur began
}

// hotCount is one key's estimated hits; err bounds the overestimate the
// space-saving algorithm adds when the key replaced another.
type hotCount struct{ hits, over, err uint64 }

// HotKey is one of the hottest request keys in state.json: a domain and a
// descriptor's entries, with estimated hits (a sample, scaled) and how
// many of them were over the limit.
type HotKey struct {
	Key       string `json:"key"`
	Hits      uint64 `json:"hits"`
	OverLimit uint64 `json:"over_limit"`
}

func newHotKeys() *hotKeys {
	return &hotKeys{cur: map[string]*hotCount{}, prev: map[string]*hotCount{}}
}

// add counts c, over the limit when over, if it is sampled.
func (h *hotKeys) add(clk clock.Clock, c *check, over bool) {
	if (h.seen.Add(1)-1)%hotKeysSample != 0 || c.rule == nil {
		return
	}
	var b strings.Builder
	b.WriteString(c.rule.Domain)
	for i, e := range c.entries {
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
	w := c.hits * hotKeysSample
	var o uint64
	if over {
		o = w
	}
	now := clk.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rotate(now)
	if hc, ok := h.cur[key]; ok {
		hc.hits += w
		hc.over += o
		return
	}
	if len(h.cur) < hotKeysCap {
		h.cur[key] = &hotCount{hits: w, over: o}
		return
	}
	// Space saving: the new key takes the least counted key's place and
	// inherits its count as the possible overestimate.
	var minKey string
	var least *hotCount
	for k, hc := range h.cur {
		if least == nil || hc.hits < least.hits {
			minKey, least = k, hc
		}
	}
	delete(h.cur, minKey)
	h.cur[key] = &hotCount{hits: least.hits + w, over: o, err: least.hits}
}

// rotate starts a new half when the current one is over. It requires h.mu
// held.
func (h *hotKeys) rotate(now time.Time) {
	if h.start.IsZero() {
		h.start = now
	}
	switch since := now.Sub(h.start); {
	case since >= 2*hotKeysHalf:
		h.prev, h.cur, h.start = map[string]*hotCount{}, map[string]*hotCount{}, now
	case since >= hotKeysHalf:
		h.prev, h.cur, h.start = h.cur, map[string]*hotCount{}, h.start.Add(hotKeysHalf)
	}
}

// top returns the hottest keys of the last half minute or two, hottest
// first.
func (h *hotKeys) top(now time.Time) []HotKey {
	h.mu.Lock()
	h.rotate(now)
	sum := map[string]*HotKey{}
	for _, m := range []map[string]*hotCount{h.prev, h.cur} {
		for k, hc := range m {
			s := sum[k]
			if s == nil {
				s = &HotKey{Key: k}
				sum[k] = s
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
