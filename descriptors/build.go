package descriptors

import (
	"fmt"

	"github.com/sluice-rl/sluice/window"
)

// Node is one descriptor of a domain given as Go values rather than YAML,
// for Build: the fields of a descriptor in a configuration file. The zero
// value is a descriptor with an empty key, which Build refuses.
type Node struct {
	// Key is the descriptor key; it must not be empty.
	Key string
	// Value is the value to match; "" matches any value of Key, and text
	// containing "*" is a wildcard.
	Value string
	// RateLimit is the node's limit; nil for a node without one.
	RateLimit *RateLimit
	// Descriptors are the nested descriptors, in configuration order.
	Descriptors []Node

	ShadowMode, QuotaMode, DetailedMetric, ValueToMetric, ShareThreshold bool

	// Metadata is returned in responses' dynamic metadata (Rule.Metadata);
	// values are what encoding/json would decode (nil, bool, float64,
	// string, []any, map[string]any). Read-only once built.
	Metadata map[string]any
}

// RateLimit is the rate_limit block of a Node. The Sluice extensions burst
// and unit_multiplier have no field here: a RateLimit is always an Envoy
// fixed window.
type RateLimit struct {
	// Unit is second, minute, hour, day, week, month or year, in any case;
	// it must be "" (or a name Unit does not know) when Unlimited is set.
	Unit string
	// RequestsPerUnit is the number of requests allowed per unit.
	RequestsPerUnit uint32
	// Unlimited rules answer OK without counting.
	Unlimited bool
	// Name is the rule's optional name; Replaces names the rules it
	// replaces, each non-empty and none its own Name.
	Name     string
	Replaces []string
}

// Build makes a Domain from Go values, checking them as Parse checks a
// configuration file: a non-empty domain and keys, no duplicate key or
// key/value pair at one level, share_threshold only on wildcards, a known
// unit unless unlimited, no unit with unlimited, replaces names that are
// non-empty and not the rule's own. source names where the values came
// from (an xDS resource, say); it stands in for the file name in errors
// and in Rule.File. Every problem is reported, as an ErrorList whose
// entries give source and the path of the bad field
// ("descriptors[0].descriptors[2].rate_limit.unit"). Build with a valid
// input gives the same Domain Parse gives for the equivalent file, except
// that rules have Line 0.
func Build(source, domain string, nodes []Node) (*Domain, error) {
	b := &builder{source: source, domain: domain}
	d := &Domain{name: domain, file: source}
	if domain == "" {
		b.errorf("domain", "empty domain")
	}
	b.list(nodes, &d.root, nil, domain+".", d, 1, "descriptors")
	if len(b.errs) > 0 {
		return nil, b.errs
	}
	return d, nil
}

// builder holds the state of one Build call.
type builder struct {
	source, domain string
	errs           ErrorList
}

func (b *builder) errorf(field, format string, args ...any) {
	b.errs = append(b.errs, &Error{File: b.source, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// list builds one level of descriptors into idx, as parser.list does.
func (b *builder) list(nodes []Node, idx *levelIndex, path []level, statsPrefix string, d *Domain, depth int, field string) {
	if len(nodes) == 0 {
		return
	}
	if depth > maxDepth {
		b.errorf(field, "descriptors nested more than %d levels deep", maxDepth)
		return
	}
	seen := make(map[string]bool) // composite keys ("key" or "key_value") of this level
	for i := range nodes {
		b.node(&nodes[i], idx, seen, path, statsPrefix, d, depth, fmt.Sprintf("%s[%d]", field, i))
	}
}

// node builds one descriptor into idx, as parser.descriptor does.
func (b *builder) node(in *Node, idx *levelIndex, seen map[string]bool, path []level, statsPrefix string, d *Domain, depth int, field string) {
	info := descriptorInfo{key: in.Key, value: in.Value, shadow: in.ShadowMode, quota: in.QuotaMode, detailed: in.DetailedMetric,
		toMetric: in.ValueToMetric, share: in.ShareThreshold, metadata: in.Metadata, leaf: len(in.Descriptors) == 0, file: b.source}
	pl := place(&info, path, statsPrefix, seen, d)
	if pl.bad != "" {
		b.errorf(field, "%s", pl.bad)
	}
	if pl.badShare != "" {
		b.errorf(field+".share_threshold", "%s", pl.badShare)
	}
	if in.RateLimit != nil {
		if r := b.rateLimit(in.RateLimit, field+".rate_limit"); r != nil {
			pl.attach([]*Rule{r}, &info, d)
		}
	}
	sub := &levelIndex{}
	b.list(in.Descriptors, sub, pl.here, pl.statsKey+".", d, depth+1, field+".descriptors")
	if sub.byKey != nil {
		pl.nd.children = sub
	}
	if pl.bad == "" {
		idx.add(pl.nd)
	}
}

// rateLimit checks a RateLimit as parser.rateLimit checks a rate_limit
// block. It returns nil when it is invalid (the problems are recorded).
func (b *builder) rateLimit(in *RateLimit, field string) *Rule {
	before := len(b.errs)
	r := &Rule{UnitMultiplier: 1, RequestsPerUnit: in.RequestsPerUnit, Unlimited: in.Unlimited, Name: in.Name}
	switch {
	case in.Unlimited && validUnit(in.Unit):
		// As in a file, a unit Unit does not know is ignored here.
		b.errorf(field+".unit", "should not specify rate limit unit %q when unlimited is true", in.Unit)
	case in.Unlimited:
	case in.Unit == "":
		b.errorf(field, "rate_limit needs a unit (second, minute, hour, day, week, month or year) or unlimited: true")
	default:
		u, err := window.ParseUnit(in.Unit)
		if err != nil {
			b.errorf(field+".unit", "invalid rate limit unit %q, must be one of second, minute, hour, day, week, month, year", in.Unit)
		}
		r.Unit = u
	}
	for i, name := range in.Replaces {
		switch {
		case name == "":
			b.errorf(fmt.Sprintf("%s.replaces[%d]", field, i), "a replaces entry has an empty name")
		case name == in.Name:
			b.errorf(fmt.Sprintf("%s.replaces[%d]", field, i), "rule %q replaces itself", name)
		default:
			r.Replaces = append(r.Replaces, name)
		}
	}
	if len(b.errs) > before {
		return nil
	}
	return r
}
