// Package descriptors reads envoyproxy/ratelimit domain configuration files
// and matches the descriptors of a rate limit request to their rules.
//
// A configuration file holds one domain and a tree of descriptors:
//
//	domain: mongo_cps
//	descriptors:
//	  - key: database
//	    value: users
//	    rate_limit:
//	      unit: second
//	      requests_per_unit: 500
//
// The format, its validation and its matching rules are those of
// envoyproxy/ratelimit, so its configuration files load unchanged and give
// the same answers. Two Sluice extensions may appear in a rate_limit block:
// burst (a GCRA bucket of that size refilled at requests_per_unit per
// window) and unit_multiplier (a window of that many units); and a
// descriptor may have several limits, a rate_limits list of rate_limit
// blocks (see Rule.Group). Files that do not use them behave exactly as
// they do in envoyproxy/ratelimit.
//
// The package only parses, validates and matches; it counts nothing. A
// [Config] is immutable once built and safe for concurrent use; the service
// builds a new one on every reload and swaps it in.
package descriptors

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/window"
)

// Entry is one key/value pair of a request's descriptor, as in Envoy's
// RateLimitDescriptor.Entry.
type Entry struct {
	Key   string
	Value string
}

// Rule is a rate limit from the configuration: the rate_limit block of one
// descriptor node, with the node's flags and where it was defined.
//
// Rules are owned by their Config and shared by every caller that matches
// them: treat every field, Replaces included, as read-only. The zero value
// is not a meaningful rule. A Rule is safe for concurrent use.
type Rule struct {
	// Domain is the domain the rule belongs to.
	Domain string
	// StatsKey names the rule in metrics, as envoyproxy/ratelimit does: the
	// domain, then one dot-separated segment per level, "key_value" for a
	// node with a value (the pattern text for a wildcard) and "key" for a
	// node without one: "mongo_cps.database_users",
	// "messaging.message_type_marketing.to_number".
	StatsKey string
	// Key is the descriptor key of the rule's node.
	Key string
	// Value is the node's configured value: "" for a node that matches any
	// value of Key, text containing "*" for a wildcard.
	Value string
	// Pattern is Value when the node is a wildcard (Value contains "*"),
	// "" otherwise. Counter keys of a share_threshold node use it in place
	// of the request's value.
	Pattern string
	// Depth is the number of request entries that reach the rule: its level
	// in the tree, 1 for a top-level descriptor.
	Depth int

	// RequestsPerUnit is the number of requests allowed per window; 0 means
	// every request is over the limit. With Burst set it is the refill rate
	// per window.
	RequestsPerUnit uint32
	// Unit is the window unit; window.Unknown when Unlimited.
	Unit window.Unit
	// UnitMultiplier is the number of units in one window (Sluice
	// extension); 1 unless configured.
	UnitMultiplier uint32
	// Burst, when above 0, selects GCRA (Sluice extension): a bucket of
	// Burst requests refilled at RequestsPerUnit per window. 0 selects
	// Envoy's fixed window.
	Burst uint32
	// Unlimited rules always answer OK without counting.
	Unlimited bool
	// Name is the rule's optional name, which other rules may replace.
	Name string
	// Replaces lists the names of the rules this rule replaces when both
	// match one request.
	Replaces []string

	// ShadowMode rules are counted but always answer OK.
	ShadowMode bool
	// QuotaMode rules count as usual, but over the limit they answer OK
	// (reporting the limit and 0 remaining) and never make the request
	// over the limit, as in envoyproxy/ratelimit.
	QuotaMode bool
	// DetailedMetric asks for metrics keyed by the request's values (see
	// MetricKey).
	DetailedMetric bool
	// ValueToMetric asks for the request's value in this node's metric
	// segment (see MetricKey).
	ValueToMetric bool
	// ShareThreshold makes every value matching this wildcard node share
	// one counter (see AppendCacheKey).
	ShareThreshold bool

	// Metadata is the descriptor's metadata map, as YAML reads it (see
	// yamlconf.Node.Value), returned in responses' dynamic metadata; nil
	// when the descriptor has none. Read-only.
	Metadata map[string]any

	// Group lists every limit of a descriptor with rate_limits (a Sluice
	// extension: several limits on one descriptor), this rule among them,
	// in file order; nil for a descriptor with one rate_limit. Config.Match
	// answers with the first; a request's descriptor is counted against
	// each, in one store call, and is over the limit when any is.
	Group []*Rule

	// File and Line locate the descriptor that defines the rule.
	File string
	Line int

	// suffix tells apart the limits of a Group: the limit's name, else its
	// window ("second", "5_minute"). It ends the stats key (after a dot)
	// and the counter key (before the window start). "" outside a Group.
	suffix string

	// leaf reports a rule node without child descriptors.
	leaf bool

	// levels describes the nodes from the top level down to the rule's
	// node, one per request entry.
	levels []level
}

// level is what a rule needs to know about one node on its path.
type level struct {
	key      string
	value    string // the node's configured value; "" for a key-only node
	segment  string // the node's stats segment: "key" or "key_value"
	wild     bool   // value is a wildcard pattern
	share    bool   // the node has share_threshold (so it is a wildcard)
	toMetric bool   // the node has value_to_metric
}

// Limits is the number of limits of r's descriptor: len(Group), or 1.
func (r *Rule) Limits() int { return max(1, len(r.Group)) }

// Limit is the k-th limit of r's descriptor, 0 <= k < Limits(): Group[k],
// or r itself for a descriptor with one rate_limit.
func (r *Rule) Limit(k int) *Rule {
	if r.Group == nil {
		return r
	}
	return r.Group[k]
}

// Window is the length of one window: Unit times UnitMultiplier. It is 0
// for an unlimited rule.
func (r *Rule) Window() time.Duration {
	return time.Duration(r.WindowSeconds()) * time.Second
}

// WindowSeconds is the length of one window in seconds, Unit times
// UnitMultiplier, as the fixed-window arithmetic and cache keys use it. It
// is 0 for an unlimited rule.
func (r *Rule) WindowSeconds() int64 {
	return r.Unit.Seconds() * int64(max(r.UnitMultiplier, 1))
}

// AppendCacheKey appends the counter key for a request descriptor matched
// by r to dst and returns the extended slice. It allocates nothing when dst
// has room.
//
// The layout is envoyproxy/ratelimit's, so both servers can share one
// Redis:
//
//	<domain>_<key1>_<value1>_<key2>_<value2>_..._<keyN>_<valueN>_
//
// with one "<key>_<value>_" pair per request entry, in request order, using
// the request's key and value (so a node without a value, or a wildcard,
// still counts each request value separately). When the node matched by
// entry i has share_threshold, the request's value is replaced by the
// node's pattern, star included ("foo*"), so every value the wildcard
// matches shares one counter. The caller appends the window start
// in decimal Unix seconds (and, for Redis, prepends its key prefix):
// "mongo_cps_database_users_1700000000".
//
// A limit of a descriptor with rate_limits (see Group) adds its name, or
// its window, and "_" after the entries, so that each limit has a counter
// of its own, and braces the common part as a Redis Cluster hash tag, so
// that every limit of the descriptor is in one hash slot and counted in
// one call: "{mongo_cps_database_users_}day_1700000000".
//
// entries must be the descriptor that matched r.
func (r *Rule) AppendCacheKey(dst []byte, entries []Entry) []byte {
	if r.suffix != "" {
		dst = append(dst, '{')
	}
	dst = append(dst, r.Domain...)
	dst = append(dst, '_')
	for i, e := range entries {
		dst = append(dst, e.Key...)
		dst = append(dst, '_')
		if i < len(r.levels) && r.levels[i].share {
			dst = append(dst, r.levels[i].value...)
		} else {
			dst = append(dst, e.Value...)
		}
		dst = append(dst, '_')
	}
	if r.suffix != "" {
		dst = append(dst, '}')
		dst = append(dst, r.suffix...)
		dst = append(dst, '_')
	}
	return dst
}

// CacheKey is AppendCacheKey as a string: "mongo_cps_database_users_" for
// the entry (database, users) of domain mongo_cps. The caller appends the
// window start.
func (r *Rule) CacheKey(entries []Entry) string {
	return string(r.AppendCacheKey(make([]byte, 0, r.CacheKeyLen(entries)), entries))
}

// CacheKeyLen is the length of the key AppendCacheKey appends for
// entries, so that a caller can make room for several keys at once.
func (r *Rule) CacheKeyLen(entries []Entry) int {
	n := len(r.Domain) + 1
	if r.suffix != "" {
		n += len(r.suffix) + 3
	}
	for i, e := range entries {
		n += len(e.Key) + 2
		if i < len(r.levels) && r.levels[i].share {
			n += len(r.levels[i].value)
		} else {
			n += len(e.Value)
		}
	}
	return n
}

// MetricKey is the key under which metrics for a request descriptor matched
// by r are reported, as envoyproxy/ratelimit names its stats. entries must
// be the descriptor that matched r. Only the two flags below cost an
// allocation; otherwise it is StatsKey.
//
// With DetailedMetric every level is the request's "key_value"
// ("domain.key1_value1.key2_value2", the "_" kept for an empty value),
// except that when a level's node has share_threshold, that level is
// "key_pattern" ("key_foo*") and the other levels drop the "_" of an empty
// value.
//
// Otherwise, when a node on the path has value_to_metric, its level is the
// request's "key_value" (just "key" for an empty value), unless the node is
// a share_threshold wildcard, which keeps "key_pattern"; the other levels
// keep their configured segments.
//
// A limit of a Group ends its key with "." and its name or window, as its
// StatsKey does.
func (r *Rule) MetricKey(entries []Entry) string {
	toMetric, share := false, false
	for _, l := range r.levels {
		toMetric = toMetric || l.toMetric
		share = share || l.share
	}
	if !r.DetailedMetric && !toMetric {
		return r.StatsKey
	}
	var b strings.Builder
	b.WriteString(r.Domain)
	for i, e := range entries {
		b.WriteByte('.')
		var l level
		if i < len(r.levels) {
			l = r.levels[i]
		}
		switch {
		case l.share:
			b.WriteString(e.Key)
			b.WriteByte('_')
			b.WriteString(l.value)
		case r.DetailedMetric && !share:
			b.WriteString(e.Key)
			b.WriteByte('_')
			b.WriteString(e.Value)
		case r.DetailedMetric, l.toMetric:
			b.WriteString(e.Key)
			if e.Value != "" {
				b.WriteByte('_')
				b.WriteString(e.Value)
			}
		default:
			b.WriteString(l.segment)
		}
	}
	if r.suffix != "" {
		b.WriteByte('.')
		b.WriteString(r.suffix)
	}
	return b.String()
}

// ResponseMetadata is the metadata envoyproxy/ratelimit returns for a
// request descriptor that r matched, whose stats key is metricKey
// (MetricKey's answer): r.Metadata, except where upstream loses it because
// it rebuilds the rule for its statistics — with detailed_metric on a node
// without child descriptors, and without detailed_metric when
// value_to_metric made the stats key differ from StatsKey.
func (r *Rule) ResponseMetadata(metricKey string) map[string]any {
	if r.DetailedMetric && r.leaf || !r.DetailedMetric && metricKey != r.StatsKey {
		return nil
	}
	return r.Metadata
}

// String describes the rule on one line, in the style of
// envoyproxy/ratelimit's /rlconfig page:
//
//	mongo_cps.database_users: unit=SECOND requests_per_unit=500, shadow_mode: false, quota_mode: false
//
// The Sluice extensions appear only when set, as " unit_multiplier=N" and
// " burst=N" after requests_per_unit.
func (r *Rule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: unit=%s requests_per_unit=%d", r.StatsKey, strings.ToUpper(r.Unit.String()), r.RequestsPerUnit)
	if r.UnitMultiplier > 1 {
		fmt.Fprintf(&b, " unit_multiplier=%d", r.UnitMultiplier)
	}
	if r.Burst > 0 {
		fmt.Fprintf(&b, " burst=%d", r.Burst)
	}
	fmt.Fprintf(&b, ", shadow_mode: %t, quota_mode: %t", r.ShadowMode, r.QuotaMode)
	return b.String()
}

// Domain is one parsed configuration file: a domain name and its
// descriptor tree. Build a Config from Domains with New. A Domain is
// immutable and safe for concurrent use.
type Domain struct {
	name  string
	file  string
	line  int
	root  levelIndex
	rules []*Rule // in file order, depth first
}

// Name is the domain's name.
func (d *Domain) Name() string { return d.name }

// File is the name of the file the domain was parsed from.
func (d *Domain) File() string { return d.file }

// Rules lists the domain's rules in file order, depth first. The slice is
// a copy; the rules are shared and read-only.
func (d *Domain) Rules() []*Rule { return append([]*Rule(nil), d.rules...) }

// Config is a set of domains with unique names, ready for matching. A nil
// or zero Config has no domains and limits nothing. A Config is immutable
// and safe for concurrent use.
type Config struct {
	domains map[string]*Domain
	names   []string // sorted domain names
}

// New builds a Config from parsed domains. Two domains with the same name
// are an error naming both files; every duplicate is reported.
func New(domains ...*Domain) (*Config, error) {
	c := &Config{domains: make(map[string]*Domain, len(domains))}
	var errs ErrorList
	for _, d := range domains {
		if prev, ok := c.domains[d.name]; ok {
			errs = append(errs, &Error{File: d.file, Line: d.line,
				Msg: fmt.Sprintf("duplicate domain %q, already defined in %s:%d", d.name, prev.file, prev.line)})
			continue
		}
		c.domains[d.name] = d
		c.names = append(c.names, d.name)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	sort.Strings(c.names)
	return c, nil
}

// Domains lists the names of the configured domains, sorted.
func (c *Config) Domains() []string {
	if c == nil {
		return nil
	}
	return append([]string(nil), c.names...)
}

// Domain returns the named domain, or nil when it is not configured.
func (c *Config) Domain(name string) *Domain {
	if c == nil {
		return nil
	}
	return c.domains[name]
}

// Rules lists every rule: domains sorted by name, each domain's rules in
// file order, depth first.
func (c *Config) Rules() []*Rule {
	if c == nil {
		return nil
	}
	var rules []*Rule
	for _, name := range c.names {
		rules = append(rules, c.domains[name].rules...)
	}
	return rules
}

// String lists every rule, one per line in the order of Rules, each as
// Rule.String writes it, for the /rlconfig debug page.
func (c *Config) String() string {
	var b strings.Builder
	for _, r := range c.Rules() {
		b.WriteString(r.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// Match finds the rule for one request descriptor of domain, or nil for no
// limit. It allocates nothing.
//
// The entries walk the descriptor tree one level each. At each level the
// entry selects, in this order: the node with the same key and value; else
// the first node, in file order, with the same key whose wildcard value
// matches (each "*" matches any run of characters, the empty one included);
// else the node with the same key and no value. Only the node selected by
// the last entry supplies the limit, so the answer is nil when an entry
// selects no node, when a node without nested descriptors is reached before
// the last entry, when the last node has no rate_limit (it allows
// everything), and for an unknown domain or an empty descriptor.
func (c *Config) Match(domain string, entries []Entry) *Rule {
	if c == nil || len(entries) == 0 {
		return nil
	}
	d := c.domains[domain]
	if d == nil {
		return nil
	}
	idx := &d.root
	var n *node
	for _, e := range entries {
		if idx == nil {
			return nil // a leaf was reached before the last entry
		}
		n = idx.find(e)
		if n == nil {
			return nil
		}
		idx = n.children
	}
	return n.rule
}

// ErrInvalidOverride reports a request's limit override that cannot be
// counted: an unknown unit, a unit_multiplier of 0, or a window longer than
// window.MaxLength.
var ErrInvalidOverride = errors.New("invalid limit override")

// Override is the rule a request's own limit makes for the descriptor
// entries in domain, as envoyproxy/ratelimit counts a descriptor that
// carries a limit override: requestsPerUnit per window of unit (Envoy's
// RateLimitUnit number) times multiplier (1 when hasMultiplier is false),
// with the stats key "domain.key1_value1.key2" ("domain." for no entries,
// as upstream joins them) and the counter key of AppendCacheKey. The error
// wraps ErrInvalidOverride.
func Override(domain string, entries []Entry, unit int32, requestsPerUnit uint32, multiplier uint32, hasMultiplier bool) (*Rule, error) {
	u := window.Unit(unit)
	if u.Seconds() == 0 {
		return nil, fmt.Errorf("%w: limit override has unknown unit %d", ErrInvalidOverride, unit)
	}
	if !hasMultiplier {
		multiplier = 1
	}
	if multiplier == 0 {
		return nil, fmt.Errorf("%w: limit override has unit_multiplier 0, must be > 0", ErrInvalidOverride)
	}
	if int64(multiplier) > int64(window.MaxLength/u.Duration()) {
		return nil, fmt.Errorf("%w: limit override of %d %ss makes a window longer than %s", ErrInvalidOverride, multiplier, u, years(window.MaxLength))
	}
	var key strings.Builder
	key.WriteString(domain)
	if len(entries) == 0 {
		key.WriteByte('.')
	}
	for _, e := range entries {
		key.WriteByte('.')
		key.WriteString(e.Key)
		if e.Value != "" {
			key.WriteByte('_')
			key.WriteString(e.Value)
		}
	}
	return &Rule{Domain: domain, StatsKey: key.String(), Depth: len(entries),
		RequestsPerUnit: requestsPerUnit, Unit: u, UnitMultiplier: multiplier}, nil
}
