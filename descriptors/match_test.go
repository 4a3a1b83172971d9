package descriptors

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/window"
)

// configOf builds a Config from domain files given as YAML text.
func configOf(t testing.TB, files ...string) *Config {
	t.Helper()
	var domains []*Domain
	for i, f := range files {
		d, err := Parse(fmt.Sprintf("file%d.yaml", i), []byte(f))
		if err != nil {
			t.Fatalf("Parse: %v", err)
		}
		domains = append(domains, d)
	}
	c, err := New(domains...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

// entries builds a descriptor from alternating keys and values.
func entries(kv ...string) []Entry {
	var es []Entry
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, Entry{Key: kv[i], Value: kv[i+1]})
	}
	return es
}

const messagingYAML = `
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
`

const edgeYAML = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: remote_address
    value: 10.0.0.1
    rate_limit: {unlimited: true}
  - key: remote_address
    value: 10.0.0.2
  - key: path
    value: foo*
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: bar*b
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: foo*bar*baz
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    value: foobar
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: path
    value: "*.css"
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 6}
  - key: order
    value: a*
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: order
    value: ab*
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: order
    value: "*z"
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: service
    value: api*
    descriptors:
      - key: user
        value: vip-*
        descriptors:
          - key: method
            value: P*T
            rate_limit: {unit: second, requests_per_unit: 50}
      - key: user
        rate_limit: {unit: second, requests_per_unit: 2}
  - key: service
    value: api-internal
    rate_limit: {unit: second, requests_per_unit: 1000}
  - key: container
    value: c
    rate_limit: {unit: second, requests_per_unit: 7}
    descriptors:
      - key: sub
        rate_limit: {unit: second, requests_per_unit: 8}
`

const example4LeafYAML = `
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
`

const example4NestedYAML = `
domain: example4_nested
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
`

func TestMatch(t *testing.T) {
	t.Parallel()
	c := configOf(t, messagingYAML, edgeYAML, example4LeafYAML, example4NestedYAML)
	tests := []struct {
		name    string
		domain  string
		entries []Entry
		wantKey string // the matched rule's StatsKey; "" for no limit
		wantRPU uint32
	}{
		// The seed's messaging example.
		{name: "a marketing message to a number gets the nested 5 per day", domain: "messaging",
			entries: entries("message_type", "marketing", "to_number", "2061111111"), wantKey: "messaging.message_type_marketing.to_number", wantRPU: 5},
		{name: "a marketing message to another number gets the same nested rule", domain: "messaging",
			entries: entries("message_type", "marketing", "to_number", "2062222222"), wantKey: "messaging.message_type_marketing.to_number", wantRPU: 5},
		{name: "a number alone gets the top-level 100 per day", domain: "messaging",
			entries: entries("to_number", "2061111111"), wantKey: "messaging.to_number", wantRPU: 100},
		{name: "the marketing placeholder alone has no limit", domain: "messaging",
			entries: entries("message_type", "marketing")},
		{name: "another message type finds no node and has no limit", domain: "messaging",
			entries: entries("message_type", "transactional", "to_number", "2061111111")},
		{name: "an unknown key has no limit", domain: "messaging",
			entries: entries("from_number", "2061111111")},
		{name: "a request deeper than the config has no limit", domain: "messaging",
			entries: entries("to_number", "2061111111", "message_type", "marketing")},
		{name: "an unknown domain has no limit", domain: "nope",
			entries: entries("to_number", "2061111111")},
		{name: "an empty descriptor has no limit", domain: "messaging"},

		// Most specific match first.
		{name: "any address gets the keyed default", domain: "edge",
			entries: entries("remote_address", "50.0.0.1"), wantKey: "edge.remote_address", wantRPU: 10},
		{name: "a blocked address gets its key_value rule over the keyed default", domain: "edge",
			entries: entries("remote_address", "50.0.0.5"), wantKey: "edge.remote_address_50.0.0.5", wantRPU: 0},
		{name: "an allow-listed address gets its unlimited rule", domain: "edge",
			entries: entries("remote_address", "10.0.0.1"), wantKey: "edge.remote_address_10.0.0.1"},
		{name: "a value without limit or children allows everything, shadowing the keyed default", domain: "edge",
			entries: entries("remote_address", "10.0.0.2")},
		{name: "an empty request value falls back to the keyed default", domain: "edge",
			entries: entries("remote_address", ""), wantKey: "edge.remote_address", wantRPU: 10},

		// Wildcards.
		{name: "a trailing wildcard matches a longer value", domain: "edge",
			entries: entries("path", "foo/x"), wantKey: "edge.path_foo*", wantRPU: 1},
		{name: "a trailing wildcard matches the bare prefix", domain: "edge",
			entries: entries("path", "foo"), wantKey: "edge.path_foo*", wantRPU: 1},
		{name: "an inner wildcard matches", domain: "edge",
			entries: entries("path", "barxxb"), wantKey: "edge.path_bar*b", wantRPU: 2},
		{name: "an inner wildcard matches the empty run", domain: "edge",
			entries: entries("path", "barb"), wantKey: "edge.path_bar*b", wantRPU: 2},
		{name: "an inner wildcard needs the suffix", domain: "edge",
			entries: entries("path", "barbx"), wantKey: "edge.path", wantRPU: 6},
		{name: "prefix and suffix may not overlap", domain: "edge",
			entries: entries("path", "bar"), wantKey: "edge.path", wantRPU: 6},
		{name: "a leading wildcard matches a suffix", domain: "edge",
			entries: entries("path", "site/main.css"), wantKey: "edge.path_*.css", wantRPU: 5},
		{name: "two stars are matched in order, but the earlier foo* wins", domain: "edge",
			entries: entries("path", "foo-bar-baz"), wantKey: "edge.path_foo*", wantRPU: 1},
		{name: "an exact value beats every wildcard that matches it", domain: "edge",
			entries: entries("path", "foobar"), wantKey: "edge.path_foobar", wantRPU: 4},
		{name: "a value no wildcard matches falls back to the keyed rule", domain: "edge",
			entries: entries("path", "/index.html"), wantKey: "edge.path", wantRPU: 6},
		{name: "the first matching wildcard in file order wins", domain: "edge",
			entries: entries("order", "abc"), wantKey: "edge.order_a*", wantRPU: 1},
		{name: "a later wildcard matches what the earlier ones do not", domain: "edge",
			entries: entries("order", "xyz"), wantKey: "edge.order_*z", wantRPU: 3},
		{name: "a value matching no wildcard and with no keyed rule has no limit", domain: "edge",
			entries: entries("order", "xyx")},
		{name: "nested wildcards match at every level", domain: "edge",
			entries: entries("service", "api-public", "user", "vip-7", "method", "POST"), wantKey: "edge.service_api*.user_vip-*.method_P*T", wantRPU: 50},
		{name: "a nested wildcard falls back to the keyed node at its level", domain: "edge",
			entries: entries("service", "api-public", "user", "bob"), wantKey: "edge.service_api*.user", wantRPU: 2},
		{name: "a nested wildcard node without a limit gives none", domain: "edge",
			entries: entries("service", "api-public", "user", "vip-7")},
		{name: "a nested wildcard that does not match gives no limit", domain: "edge",
			entries: entries("service", "api-public", "user", "vip-7", "method", "GET")},
		{name: "an exact value beats the wildcard at the top of a tree", domain: "edge",
			entries: entries("service", "api-internal"), wantKey: "edge.service_api-internal", wantRPU: 1000},
		{name: "an exact leaf ends the walk even when the wildcard sibling goes deeper", domain: "edge",
			entries: entries("service", "api-internal", "user", "bob")},

		// Depth.
		{name: "a node with a limit and children limits the one-entry request", domain: "edge",
			entries: entries("container", "c"), wantKey: "edge.container_c", wantRPU: 7},
		{name: "a node with a limit and children gives the child's limit to the two-entry request", domain: "edge",
			entries: entries("container", "c", "sub", "s"), wantKey: "edge.container_c.sub", wantRPU: 8},
		{name: "an entry after a leaf is not matched at the leaf's own level", domain: "edge",
			entries: entries("remote_address", "1.2.3.4", "remote_address", "5.6.7.8")},
		{name: "a request deeper than a leaf has no limit", domain: "example4",
			entries: entries("key", "value", "subkey", "subvalue")},
		{name: "a request as deep as the nested config matches it", domain: "example4_nested",
			entries: entries("key", "value", "subkey", "subvalue"), wantKey: "example4_nested.key_value.subkey", wantRPU: 300},
		{name: "a request shallower than the nested config has no limit", domain: "example4_nested",
			entries: entries("key", "value")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := c.Match(tt.domain, tt.entries)
			if r == nil {
				if tt.wantKey != "" {
					t.Fatalf("Match(%q, %v) = no limit, want %s", tt.domain, tt.entries, tt.wantKey)
				}
				return
			}
			if r.StatsKey != tt.wantKey {
				t.Fatalf("Match(%q, %v) = %s, want %q", tt.domain, tt.entries, r.StatsKey, tt.wantKey)
			}
			if r.RequestsPerUnit != tt.wantRPU {
				t.Errorf("requests_per_unit: got %d, want %d", r.RequestsPerUnit, tt.wantRPU)
			}
			if r.Depth != len(tt.entries) {
				t.Errorf("depth: got %d, want %d", r.Depth, len(tt.entries))
			}
		})
	}
}

func TestMatchNilConfig(t *testing.T) {
	t.Parallel()
	var c *Config
	if r := c.Match("d", entries("k", "v")); r != nil {
		t.Errorf("nil Config matched %s, want no limit", r.StatsKey)
	}
	if got := (&Config{}).Match("d", entries("k", "v")); got != nil {
		t.Errorf("zero Config matched %s, want no limit", got.StatsKey)
	}
}

func TestMatchReturnsTheRuleFields(t *testing.T) {
	t.Parallel()
	c := configOf(t, edgeYAML)
	t.Run("an unlimited rule says so and has no unit", func(t *testing.T) {
		r := c.Match("edge", entries("remote_address", "10.0.0.1"))
		if r == nil || !r.Unlimited || r.Unit != window.Unknown {
			t.Fatalf("got %+v, want an unlimited rule with no unit", r)
		}
	})
	t.Run("a wildcard rule carries its pattern", func(t *testing.T) {
		r := c.Match("edge", entries("path", "barxb"))
		if r == nil || r.Pattern != "bar*b" || r.Value != "bar*b" || r.Key != "path" {
			t.Fatalf("got %+v, want key path, value and pattern bar*b", r)
		}
	})
	t.Run("an exact rule has no pattern", func(t *testing.T) {
		r := c.Match("edge", entries("path", "foobar"))
		if r == nil || r.Pattern != "" {
			t.Fatalf("got %+v, want no pattern", r)
		}
	})
	t.Run("a rule knows its file and line", func(t *testing.T) {
		r := c.Match("edge", entries("path", "foobar"))
		if r.File != "file0.yaml" || r.Line != 23 {
			t.Errorf("got %s:%d, want file0.yaml:23", r.File, r.Line)
		}
	})
	t.Run("a plain rule is a one-unit fixed window", func(t *testing.T) {
		r := c.Match("edge", entries("remote_address", "1.2.3.4"))
		if r.UnitMultiplier != 1 || r.Burst != 0 || r.Unit != window.Second || r.WindowSeconds() != 1 {
			t.Errorf("got multiplier %d burst %d unit %v window %ds, want 1, 0, second, 1s",
				r.UnitMultiplier, r.Burst, r.Unit, r.WindowSeconds())
		}
	})
}

func TestPattern(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, value string
		want           bool
	}{
		{"foo*", "foo", true},
		{"foo*", "foobar", true},
		{"foo*", "fo", false},
		{"foo*", "xfoo", false},
		{"*", "", true},
		{"*", "anything", true},
		{"**", "x", true},
		{"bar*b", "barb", true},
		{"bar*b", "bar", false},
		{"bar*b", "barbb", true},
		{"bar*b", "barba", false},
		{"foo*bar*baz", "foobarbaz", true},
		{"foo*bar*baz", "foo-bar-baz", true},
		{"foo*bar*baz", "foobazbar", false},
		{"foo*bar*baz", "foobarbarbaz", true},
		{"foo*bar*baz", "foobaz", false},
		{"a*a*a", "aa", false},
		{"a*a*a", "aaa", true},
		{"a*ab*b", "aabb", true},
		{"a*ab*b", "abb", false},
		{"a*ab*b", "aabab", true},
		{"*x*", "x", true},
		{"*x*", "y", false},
		{"*ab*ab*", "xab", false},
		{"*ab*ab*", "abab", true},
		{"*aba*aba*", "ababa", false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("pattern %q against %q is %t", tt.pattern, tt.value, tt.want), func(t *testing.T) {
			t.Parallel()
			p := compilePattern(tt.pattern)
			if got := p.match(tt.value); got != tt.want {
				t.Errorf("got %t, want %t", got, tt.want)
			}
		})
	}
}

const shareYAML = `
domain: share
descriptors:
  - key: tenant
    value: acme*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: tenant
    value: globex*
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: org
    value: eu-*-prod
    share_threshold: true
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 5}
`

func TestCacheKey(t *testing.T) {
	t.Parallel()
	c := configOf(t, shareYAML, messagingYAML,
		`{domain: mongo_cps, descriptors: [{key: database, value: users, rate_limit: {unit: second, requests_per_unit: 500}}]}`)
	tests := []struct {
		name    string
		domain  string
		entries []Entry
		want    string
	}{
		{name: "one key_value entry", domain: "mongo_cps",
			entries: entries("database", "users"), want: "mongo_cps_database_users_"},
		{name: "a valueless node keeps the request's value", domain: "messaging",
			entries: entries("to_number", "2061111111"), want: "messaging_to_number_2061111111_"},
		{name: "nested entries are joined in request order", domain: "messaging",
			entries: entries("message_type", "marketing", "to_number", "2061111111"), want: "messaging_message_type_marketing_to_number_2061111111_"},
		{name: "a share_threshold wildcard puts its pattern in place of the value", domain: "share",
			entries: entries("tenant", "acme-east"), want: "share_tenant_acme*_"},
		{name: "a wildcard without share_threshold keeps the value", domain: "share",
			entries: entries("tenant", "globex-east"), want: "share_tenant_globex-east_"},
		{name: "a shared level above a valueless level shares only its own value", domain: "share",
			entries: entries("org", "eu-1-prod", "user", "ann"), want: "share_org_eu-*-prod_user_ann_"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := c.Match(tt.domain, tt.entries)
			if r == nil {
				t.Fatalf("Match(%q, %v) = no limit, want a rule", tt.domain, tt.entries)
			}
			if got := r.CacheKey(tt.entries); got != tt.want {
				t.Errorf("CacheKey: got %q, want %q", got, tt.want)
			}
			if got := r.CacheKeyLen(tt.entries); got != len(tt.want) {
				t.Errorf("CacheKeyLen: got %d, want %d", got, len(tt.want))
			}
			if got := string(r.AppendCacheKey([]byte("prefix:"), tt.entries)); got != "prefix:"+tt.want {
				t.Errorf("AppendCacheKey: got %q, want %q", got, "prefix:"+tt.want)
			}
		})
	}
}

func TestShareThresholdSharesOneCounter(t *testing.T) {
	t.Parallel()
	c := configOf(t, shareYAML)
	key := func(value string) string {
		e := entries("tenant", value)
		r := c.Match("share", e)
		if r == nil {
			t.Fatalf("tenant %q matched no rule", value)
		}
		return r.CacheKey(e)
	}
	t.Run("two values matching a share_threshold wildcard count in one counter", func(t *testing.T) {
		if a, b := key("acme-east"), key("acme-west"); a != b {
			t.Errorf("got %q and %q, want the same key", a, b)
		}
	})
	t.Run("two values matching a plain wildcard count in two counters", func(t *testing.T) {
		if a, b := key("globex-east"), key("globex-west"); a == b {
			t.Errorf("got %q for both, want different keys", a)
		}
	})
}

func TestMetricKey(t *testing.T) {
	t.Parallel()
	c := configOf(t, `
domain: m
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: key1
    value: value1
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: svc
    value: a*
    value_to_metric: true
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: vm
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: shared
    value: p*
    share_threshold: true
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: st
    value: x*
    share_threshold: true
    descriptors:
      - key: sub
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: dm
    detailed_metric: true
    descriptors:
      - key: sub
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 1}
`)
	tests := []struct {
		name    string
		entries []Entry
		want    string
	}{
		{name: "detailed_metric uses the request's value", entries: entries("key1", "unspecified_value"), want: "m.key1_unspecified_value"},
		{name: "an explicit value uses the rule's key", entries: entries("key1", "value1"), want: "m.key1_value1"},
		{name: "value_to_metric replaces only its own level's segment", entries: entries("svc", "abc", "user", "u1"), want: "m.svc_abc.user"},
		{name: "a plain rule reports its stats key", entries: entries("plain", "x"), want: "m.plain"},
		{name: "value_to_metric with an empty value reports the key alone", entries: entries("vm", ""), want: "m.vm"},
		{name: "value_to_metric on a share_threshold wildcard keeps the pattern", entries: entries("shared", "p1"), want: "m.shared_p*"},
		{name: "detailed_metric below a share_threshold wildcard keeps the pattern", entries: entries("st", "x1", "sub", "s"), want: "m.st_x*.sub_s"},
		{name: "detailed_metric below a share_threshold wildcard drops the _ of an empty value", entries: entries("st", "x1", "sub", ""), want: "m.st_x*.sub"},
		{name: "detailed_metric keeps the _ of an empty value", entries: entries("dm", "", "sub", ""), want: "m.dm_.sub_"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := c.Match("m", tt.entries)
			if r == nil {
				t.Fatalf("no rule for %v", tt.entries)
			}
			if got := r.MetricKey(tt.entries); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestReplacesAndExtensions(t *testing.T) {
	t.Parallel()
	c, err := Load("testdata/good_all_fields.yaml")
	if err != nil {
		t.Fatal(err)
	}
	t.Run("replaces lists every name in order", func(t *testing.T) {
		r := c.Match("everything", entries("service", "auth", "user", "bob"))
		if r == nil || r.Name != "per_user" || strings.Join(r.Replaces, ",") != "global_auth,legacy_auth" {
			t.Fatalf("got %+v, want per_user replacing global_auth,legacy_auth", r)
		}
		if !r.QuotaMode || !r.ValueToMetric || r.ShadowMode || r.Unit != window.Minute {
			t.Errorf("got quota %t value_to_metric %t shadow %t unit %v, want true true false minute",
				r.QuotaMode, r.ValueToMetric, r.ShadowMode, r.Unit)
		}
	})
	t.Run("flags and an upper-case unit are read", func(t *testing.T) {
		r := c.Match("everything", entries("service", "auth", "user", "user-a"))
		if r == nil || !r.ShadowMode || !r.DetailedMetric || r.QuotaMode || r.Unit != window.Second || r.Name != "user_a_limit" {
			t.Fatalf("got %+v, want shadow, detailed, per second, named user_a_limit", r)
		}
	})
	t.Run("burst and unit_multiplier are read and reported", func(t *testing.T) {
		r := c.Match("everything", entries("upload", "x"))
		if r == nil || r.Burst != 10 || r.UnitMultiplier != 2 || r.WindowSeconds() != 7200 || r.Window().Hours() != 2 {
			t.Fatalf("got %+v, want burst 10 over 2 hours", r)
		}
		want := "everything.upload: unit=HOUR requests_per_unit=100 unit_multiplier=2 burst=10, shadow_mode: false, quota_mode: false"
		if got := r.String(); got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	})
	t.Run("a YAML 1.1 yes is true and a lone star shares one counter", func(t *testing.T) {
		e := entries("token", "t-123")
		r := c.Match("everything", e)
		if r == nil || !r.ShareThreshold || r.UnitMultiplier != 3 || r.Unit != window.Week {
			t.Fatalf("got %+v, want a shared weekly rule over 3 weeks", r)
		}
		if got, want := r.CacheKey(e), "everything_token_*_"; got != want {
			t.Errorf("cache key: got %q, want %q", got, want)
		}
	})
	t.Run("a numeric value is read as its text", func(t *testing.T) {
		r := c.Match("everything", entries("port", "8080"))
		if r == nil || r.RequestsPerUnit != 4294967295 || r.Unit != window.Year {
			t.Fatalf("got %+v, want 4294967295 a year", r)
		}
	})
}

func TestConfigString(t *testing.T) {
	t.Parallel()
	c := configOf(t, messagingYAML, `
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 100
`)
	want := `internal.ldap: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false
internal.azure: unit=MINUTE requests_per_unit=100, shadow_mode: true, quota_mode: false
messaging.message_type_marketing.to_number: unit=DAY requests_per_unit=5, shadow_mode: false, quota_mode: false
messaging.to_number: unit=DAY requests_per_unit=100, shadow_mode: false, quota_mode: false
`
	if got := c.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if got, want := strings.Join(c.Domains(), ","), "internal,messaging"; got != want {
		t.Errorf("domains: got %s, want %s", got, want)
	}
	if got := len(c.Domain("messaging").Rules()); got != 2 {
		t.Errorf("messaging rules: got %d, want 2", got)
	}
}
