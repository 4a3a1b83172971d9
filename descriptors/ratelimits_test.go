package descriptors

import (
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/window"
)

const severalLimits = `
domain: api
descriptors:
  - key: user
    shadow_mode: false
    rate_limits:
      - unit: second
        requests_per_unit: 100
      - unit: day
        requests_per_unit: 10000
      - name: burst_of_five
        unit: minute
        requests_per_unit: 2
        burst: 5
        shadow_mode: true
      - unit: minute
        unit_multiplier: 5
        requests_per_unit: 300
        replaces: [{name: old}]
  - key: plain
    rate_limit: {unit: second, requests_per_unit: 1}
`

func TestSeveralLimitsOnOneDescriptor(t *testing.T) {
	t.Parallel()
	c := configOf(t, severalLimits)
	e := entries("user", "alice")
	r := c.Match("api", e)
	if r == nil {
		t.Fatal("Match found no rule for user=alice")
	}
	if r.Limits() != 4 || len(r.Group) != 4 || r.Limit(0) != r {
		t.Fatalf("got %d limits (Group %d), Limit(0) == r %t; want 4, with the first limit matched", r.Limits(), len(r.Group), r.Limit(0) == r)
	}
	want := []struct {
		stats, cache string
		unit         window.Unit
		rpu, burst   uint32
		mult         uint32
		shadow       bool
	}{
		{"api.user.second", "{api_user_alice_}second_", window.Second, 100, 0, 1, false},
		{"api.user.day", "{api_user_alice_}day_", window.Day, 10000, 0, 1, false},
		{"api.user.burst_of_five", "{api_user_alice_}burst_of_five_", window.Minute, 2, 5, 1, true},
		{"api.user.5_minute", "{api_user_alice_}5_minute_", window.Minute, 300, 0, 5, false},
	}
	for k, w := range want {
		l := r.Limit(k)
		if got := l.CacheKeyLen(e); got != len(w.cache) {
			t.Errorf("limit %d: CacheKeyLen %d, want %d (%q)", k, got, len(w.cache), w.cache)
		}
		if l.StatsKey != w.stats || l.CacheKey(e) != w.cache || l.MetricKey(e) != w.stats {
			t.Errorf("limit %d: got stats key %q, cache key %q, metric key %q; want %q, %q, %q", k, l.StatsKey, l.CacheKey(e), l.MetricKey(e), w.stats, w.cache, w.stats)
		}
		if l.Unit != w.unit || l.RequestsPerUnit != w.rpu || l.Burst != w.burst || l.UnitMultiplier != w.mult || l.ShadowMode != w.shadow {
			t.Errorf("limit %d: got %s, want unit %s, %d per unit, burst %d, multiplier %d, shadow %t", k, l, w.unit, w.rpu, w.burst, w.mult, w.shadow)
		}
		if l.Domain != "api" || l.Key != "user" || l.Depth != 1 || len(l.Group) != 4 {
			t.Errorf("limit %d: got domain %q key %q depth %d group %d, want the descriptor's", k, l.Domain, l.Key, l.Depth, len(l.Group))
		}
	}
	if got := r.Limit(3).Replaces; len(got) != 1 || got[0] != "old" {
		t.Errorf("the last limit replaces %q, want [old]", got)
	}
	// Each limit is a rule of its own in listings; a plain rule keeps its keys.
	if got, want := len(c.Rules()), 5; got != want {
		t.Errorf("Config.Rules lists %d rules, want %d", got, want)
	}
	p := c.Match("api", entries("plain", "x"))
	if p.Limits() != 1 || p.Limit(0) != p || p.CacheKey(entries("plain", "x")) != "api_plain_x_" || p.StatsKey != "api.plain" {
		t.Errorf("a rate_limit rule: got %d limits, cache key %q, stats key %q; want 1, api_plain_x_, api.plain", p.Limits(), p.CacheKey(entries("plain", "x")), p.StatsKey)
	}
	if !strings.Contains(c.String(), "api.user.day: unit=DAY requests_per_unit=10000, shadow_mode: false") {
		t.Errorf("Config.String lacks the day limit:\n%s", c)
	}
}

func TestSeveralLimitsShareDescriptorFlags(t *testing.T) {
	t.Parallel()
	c := configOf(t, `
domain: d
descriptors:
  - key: k
    value: "v*"
    shadow_mode: true
    detailed_metric: true
    metadata: {team: a}
    rate_limits:
      - {unit: second, requests_per_unit: 1}
      - {unit: hour, requests_per_unit: 10, name: hourly}
`)
	e := entries("k", "v1")
	r := c.Match("d", e)
	for k := range r.Limits() {
		l := r.Limit(k)
		if !l.ShadowMode || !l.DetailedMetric || l.Metadata["team"] != "a" || l.Pattern != "v*" {
			t.Errorf("limit %d: got shadow %t detailed %t metadata %v pattern %q; want the descriptor's", k, l.ShadowMode, l.DetailedMetric, l.Metadata, l.Pattern)
		}
	}
	if got, want := r.Limit(1).MetricKey(e), "d.k_v1.hourly"; got != want {
		t.Errorf("detailed metric key: got %q, want %q", got, want)
	}
}

func TestSeveralLimitsRejects(t *testing.T) {
	t.Parallel()
	head := "domain: d\ndescriptors:\n  - key: k\n"
	tests := []struct {
		name, yaml, want string
	}{
		{"rate_limit and rate_limits together",
			"    rate_limit: {unit: second, requests_per_unit: 1}\n    rate_limits: [{unit: day, requests_per_unit: 5}]\n",
			`x.yaml:5: descriptor "k" has both rate_limit and rate_limits, give it one or the other`},
		{"two limits of one window without names",
			"    rate_limits:\n      - {unit: second, requests_per_unit: 1}\n      - {unit: second, requests_per_unit: 2}\n",
			`x.yaml:6: descriptor "k" has two rate_limits named "second" (the other at line 5): give each limit its own name or window`},
		{"a name used twice",
			"    rate_limits:\n      - {unit: second, requests_per_unit: 1, name: a}\n      - {unit: day, requests_per_unit: 2, name: a}\n",
			`x.yaml:6: descriptor "k" has two rate_limits named "a" (the other at line 5): give each limit its own name or window`},
		{"an unlimited item",
			"    rate_limits:\n      - {unlimited: true}\n",
			`x.yaml:5: a rate_limits item cannot be unlimited: use rate_limit: {unlimited: true} for a descriptor without a limit`},
		{"an empty list", "    rate_limits: []\n",
			`x.yaml:4: rate_limits is empty, it must list one or more rate_limit blocks`},
		{"a map instead of a list", "    rate_limits: {unit: second, requests_per_unit: 1}\n",
			`x.yaml:4: rate_limits must be a list of one or more rate_limit blocks, got a map`},
		{"an item that is not a map", "    rate_limits: [5]\n",
			`x.yaml:4: a rate_limits item must be a map, got "5"`},
		{"an unknown field in an item",
			"    rate_limits:\n      - {unit: second, requests_per_unit: 1, per: day}\n",
			`x.yaml:5: unknown field "per" in a rate_limits item, must be one of unit, requests_per_unit, unlimited, name, replaces, burst, unit_multiplier, shadow_mode`},
		{"an item without a unit",
			"    rate_limits:\n      - {requests_per_unit: 1}\n",
			`x.yaml:5: rate_limit needs a unit (second, minute, hour, day, week, month or year) or unlimited: true`},
		{"shadow_mode is not a rate_limit field",
			"    rate_limit: {unit: second, requests_per_unit: 1, shadow_mode: true}\n",
			"<nil>"}, // ignored, as envoyproxy/ratelimit ignores a known field in the wrong place
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("x.yaml", []byte(head+tt.yaml))
			if got := errString(err); got != tt.want {
				t.Errorf("got error\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}
