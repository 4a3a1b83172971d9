package descriptors

import (
	"fmt"
	"strings"
)

// descriptorInfo is what one descriptor says about itself, whether read
// from a file (parser.descriptor) or given as a Node (builder.node).
type descriptorInfo struct {
	key, value                               string
	shadow, quota, detailed, toMetric, share bool
	metadata                                 map[string]any // nil when it has none
	leaf                                     bool           // no child descriptors
	file                                     string
	line                                     int // 0 for a Node
}

// placed is a descriptor put in the tree: its node, the levels from the
// top down to it, and its stats key ("domain.key_value"); with what is
// wrong with it, as messages for the caller to locate.
type placed struct {
	nd        *node
	here      []level
	composite string // "key" or "key_value"
	statsKey  string
	// bad is set for a descriptor that must be left out: an empty key or
	// a duplicate at its level.
	bad string
	// badShare is set for share_threshold without a wildcard value.
	badShare string
}

// place puts descriptor in below path, on a level whose composite keys so
// far are seen (which it adds to), under statsPrefix (the stats key above
// it and a dot), in domain d.
func place(in *descriptorInfo, path []level, statsPrefix string, seen map[string]bool, d *Domain) placed {
	p := placed{nd: &node{key: in.key, value: in.value}, composite: in.key}
	kind := "key"
	if in.value != "" {
		p.composite, kind = in.key+"_"+in.value, "key_value"
	}
	switch {
	case in.key == "":
		p.bad = fmt.Sprintf("descriptor has an empty key in domain %q", d.name)
	case seen[p.composite]:
		p.bad = fmt.Sprintf("duplicate descriptor %s %q in domain %q", kind, strings.TrimPrefix(statsPrefix+p.composite, d.name+"."), d.name)
	}
	seen[p.composite] = true
	p.nd.pat = compilePattern(in.value)
	if in.share && !p.nd.pat.wild {
		p.badShare = fmt.Sprintf("share_threshold: true needs a wildcard value containing \"*\", descriptor %q has value %q", p.composite, in.value)
	}
	lv := level{key: in.key, value: in.value, segment: p.composite, wild: p.nd.pat.wild,
		share: in.share && p.nd.pat.wild, toMetric: in.toMetric}
	p.here = append(append(make([]level, 0, len(path)+1), path...), lv)
	p.statsKey = statsPrefix + p.composite
	return p
}

// attach gives the rules of a placed descriptor (one, or several with
// rate_limits) what they take from it, makes the first the node's rule,
// and lists them in d unless the descriptor is left out.
func (p *placed) attach(rules []*Rule, in *descriptorInfo, d *Domain) {
	for _, r := range rules {
		r.Domain, r.StatsKey, r.Key, r.Value, r.Depth = d.name, p.statsKey, in.key, in.value, len(p.here)
		if r.suffix != "" {
			r.StatsKey += "." + r.suffix
		}
		if p.nd.pat.wild {
			r.Pattern = in.value
		}
		r.ShadowMode = r.ShadowMode || in.shadow
		r.QuotaMode, r.DetailedMetric, r.ValueToMetric, r.ShareThreshold = in.quota, in.detailed, in.toMetric, in.share
		r.File, r.Line, r.levels = in.file, in.line, p.here
		if len(in.metadata) > 0 {
			r.Metadata = in.metadata
		}
		r.leaf = in.leaf
		if p.bad == "" {
			d.rules = append(d.rules, r)
		}
	}
	if len(rules) > 0 {
		p.nd.rule = rules[0]
	}
}
