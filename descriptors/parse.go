package descriptors

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/internal/yamlconf"
	"github.com/sluice-rl/sluice/window"
)

// Error is one problem in a configuration file, located by file and line
// (and column, which its text leaves out): "file:line: message". Msg
// names the field and the bad value.
type Error = yamlconf.Error

// ErrorList is every problem found in one or more configuration files, in
// file order. Parse, New and Load return it as their error; its message has
// one problem per line, and errors.Is and errors.As look at each.
type ErrorList = yamlconf.Errors

// maxDepth bounds the levels of nested descriptors, so that an alias to
// an ancestor stops. Aliases that expand exponentially are stopped by the
// node budget of internal/yamlconf ("aliases expand to too many nodes").
const maxDepth = 64

// Parse reads one configuration file: a domain and its descriptors.
// filename is used in error messages only. Every problem found is reported,
// as an ErrorList whose entries give filename and line.
func Parse(filename string, data []byte) (*Domain, error) {
	doc, err := yamlconf.Parse(filename, data, yamlconf.Options{LineOnly: true})
	if err != nil {
		return nil, ErrorList{err.(*Error)}
	}
	p := &parser{doc: doc}
	d := p.file1(doc.Root())
	if errs := doc.Errors(); len(errs) > 0 {
		return nil, errs
	}
	return d, nil
}

// parser holds the state of one Parse call.
type parser struct {
	doc    *yamlconf.Doc
	domain string
}

func (p *parser) errorf(n yamlconf.Node, format string, args ...any) {
	p.doc.Errorf(n, "", format, args...)
}

// field is one key: value pair of a YAML mapping.
type field struct {
	name     string
	key, val yamlconf.Node
}

// envoyKeys are the field names envoyproxy/ratelimit accepts anywhere in a
// file: it checks names against this one set, not per map, and ignores a
// known name in the wrong place. Parse does the same, so that every file
// it loads loads here too.
var envoyKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true, "rate_limit": true,
	"unit": true, "requests_per_unit": true, "unlimited": true, "shadow_mode": true,
	"quota_mode": true, "name": true, "replaces": true, "detailed_metric": true,
	"value_to_metric": true, "share_threshold": true,
}

// Sluice's extensions are not in envoyKeys: a file that uses one is
// refused by envoyproxy/ratelimit, and is read only where Sluice knows it.

// fields lists the pairs of mapping n, reporting keys that are not in
// known (where says what the map is), duplicated or not strings. YAML merge
// keys ("<<: *anchor") are expanded, the map's own keys winning. A key that
// is not in known but is one of envoyKeys is ignored, as
// envoyproxy/ratelimit ignores it, after checking its value as that server
// would (see ignored).
func (p *parser) fields(n yamlconf.Node, where string, known ...string) []field {
	var out, merged []field
	for e := range n.Entries() {
		k, v := e.Key, e.Value
		switch {
		case k.IsCollection():
			p.errorf(k, "%s has a key that is %s, not a field name", where, k.Describe())
		case k.IsMerge():
			merged = append(merged, p.merge(v, where, known)...)
		case !slices.Contains(known, e.Name) && envoyKeys[e.Name]:
			p.ignored(v)
		case !slices.Contains(known, e.Name):
			p.errorf(k, "unknown field %q in %s, must be one of %s", e.Name, where, strings.Join(known, ", "))
		case e.Dup():
			p.errorf(k, "duplicate field %q in %s", e.Name, where)
		default:
			out = append(out, field{name: e.Name, key: k, val: v})
		}
	}
	for _, m := range merged {
		if !slices.ContainsFunc(out, func(o field) bool { return o.name == m.name }) {
			out = append(out, m)
		}
	}
	return out
}

// merge reads the value of a merge key: a map, or a list of maps whose
// earlier entries win.
func (p *parser) merge(v yamlconf.Node, where string, known []string) []field {
	switch v.Shape() {
	case yamlconf.Map:
		return p.fields(v, where, known...)
	case yamlconf.List:
		var out []field
		for item := range v.Items() {
			if item.Shape() != yamlconf.Map {
				p.errorf(item, "a merge key in %s must name maps, got %s", where, item.Describe())
				continue
			}
			for _, f := range p.fields(item, where, known...) {
				if !slices.ContainsFunc(out, func(o field) bool { return o.name == f.name }) {
					out = append(out, f)
				}
			}
		}
		return out
	}
	p.errorf(v, "a merge key in %s must name a map, got %s", where, v.Describe())
	return nil
}

// ignored checks a value Parse ignores as envoyproxy/ratelimit checks
// every value: maps may only have envoyKeys, lists may only hold maps, and
// no scalar may be a floating-point number.
func (p *parser) ignored(n yamlconf.Node) {
	switch n.Shape() {
	case yamlconf.Map:
		for e := range n.Entries() {
			switch {
			case e.Key.IsCollection():
				p.errorf(e.Key, "unknown field %s", e.Key.Describe())
				continue
			case !e.Key.IsMerge() && !envoyKeys[e.Name]:
				p.errorf(e.Key, "unknown field %q", e.Name)
				continue
			}
			p.ignored(e.Value)
		}
	case yamlconf.List:
		for item := range n.Items() {
			if item.Shape() != yamlconf.Map {
				p.errorf(item, "a list may only hold maps, got %s", item.Describe())
				continue
			}
			p.ignored(item)
		}
	case yamlconf.Scalar:
		p.notFloat(n, "value")
	}
}

// notFloat reports a floating-point scalar: envoyproxy/ratelimit refuses
// files with one anywhere ("1.5", "2.0", "1e3"), even where a string is
// expected; quote it to make it a string. It reports whether n is fine.
func (p *parser) notFloat(n yamlconf.Node, name string) bool {
	if n.IsFloat() {
		p.errorf(n, "invalid %s %s: a floating-point number, quote it if it is a string", name, n.Describe())
		return false
	}
	return true
}

func (p *parser) str(n yamlconf.Node, name string) string {
	switch {
	case n.IsNull():
		return ""
	case n.Shape() != yamlconf.Scalar:
		p.errorf(n, "%s must be a string, got %s", name, n.Describe())
		return ""
	case !p.notFloat(n, name):
		return ""
	}
	return n.Text()
}

// bool reads true or false, or YAML 1.1's yes, no, on and off, as
// envoyproxy/ratelimit (go-yaml v2) does.
func (p *parser) bool(n yamlconf.Node, name string) bool {
	if n.IsNull() {
		return false
	}
	b, ok := n.Bool()
	if !ok {
		p.errorf(n, "invalid %s %s, must be true or false", name, n.Describe())
	}
	return b
}

// uint32 reads a whole number between lo and math.MaxUint32.
func (p *parser) uint32(n yamlconf.Node, name string, lo int64) uint32 {
	if n.IsNull() {
		return 0
	}
	// Int64 refuses 1.5, which the YAML decoder would truncate to 1, and
	// 2.0 and 1e3, as envoyproxy/ratelimit refuses any floating-point number.
	v, ok := n.Int64()
	switch {
	case !ok:
		p.errorf(n, "invalid %s %s, must be a whole number", name, n.Describe())
		return 0
	case v < lo && lo == 1:
		p.errorf(n, "invalid %s %d, must be > 0", name, v)
		return 0
	case v < lo || v > math.MaxUint32:
		p.errorf(n, "invalid %s %d, must be between %d and %d", name, v, lo, uint32(math.MaxUint32))
		return 0
	}
	return uint32(v)
}

// file1 reads the document of one file.
func (p *parser) file1(root yamlconf.Node) *Domain {
	if root.IsNull() {
		p.doc.Add(&Error{File: p.doc.File(), Line: 1, Msg: "empty domain"})
		return nil
	}
	if root.Shape() != yamlconf.Map {
		p.errorf(root, "a domain file must be a map with domain and descriptors, got %s", root.Describe())
		return nil
	}
	d := &Domain{file: p.doc.File(), line: root.Line()}
	var list yamlconf.Node
	found := false
	for _, f := range p.fields(root, "the domain file", "domain", "descriptors") {
		switch f.name {
		case "domain":
			d.name, d.line, found = p.str(f.val, "domain"), f.val.Line(), true
			if d.name == "" {
				p.errorf(f.val, "empty domain")
			}
		case "descriptors":
			list = f.val
		}
	}
	if !found {
		p.errorf(root, "empty domain")
	}
	p.domain = d.name
	p.list(list, &d.root, nil, d.name+".", d, 1)
	return d
}

// list reads a descriptors list into idx. path describes the nodes above
// it, statsPrefix is their stats key with a trailing dot.
func (p *parser) list(n yamlconf.Node, idx *levelIndex, path []level, statsPrefix string, d *Domain, depth int) {
	if n.IsNull() {
		return
	}
	if n.Shape() != yamlconf.List {
		p.errorf(n, "descriptors must be a list, got %s", n.Describe())
		return
	}
	if depth > maxDepth {
		p.errorf(n, "descriptors nested more than %d levels deep", maxDepth)
		return
	}
	seen := make(map[string]bool) // composite keys ("key" or "key_value") of this level
	for item := range n.Items() {
		if item.Shape() != yamlconf.Map {
			p.errorf(item, "a descriptor must be a map with a key, got %s", item.Describe())
			continue
		}
		p.descriptor(item, idx, seen, path, statsPrefix, d, depth)
	}
}

// descriptor reads one descriptor into idx.
func (p *parser) descriptor(item yamlconf.Node, idx *levelIndex, seen map[string]bool, path []level, statsPrefix string, d *Domain, depth int) {
	var key, value string
	var (
		rl, rls, rlsKey, children, shareNode, metadata yamlconf.Node
		flags                                          [5]bool // shadow, quota, detailed, toMetric, share
	)
	fs := p.fields(item, "a descriptor", "key", "value", "rate_limit", "rate_limits", "descriptors",
		"shadow_mode", "quota_mode", "detailed_metric", "value_to_metric", "share_threshold", "metadata")
	for _, f := range fs {
		switch f.name {
		case "key":
			key = p.str(f.val, "key")
		case "value":
			value = p.str(f.val, "value")
		case "rate_limit":
			rl = f.val
		case "rate_limits":
			rls, rlsKey = f.val, f.key
		case "descriptors":
			children = f.val
		case "shadow_mode":
			flags[0] = p.bool(f.val, f.name)
		case "quota_mode":
			flags[1] = p.bool(f.val, f.name)
		case "detailed_metric":
			flags[2] = p.bool(f.val, f.name)
		case "value_to_metric":
			flags[3] = p.bool(f.val, f.name)
		case "share_threshold":
			flags[4], shareNode = p.bool(f.val, f.name), f.val
		case "metadata":
			if !f.val.IsNull() && f.val.Shape() != yamlconf.Map {
				p.errorf(f.val, "metadata must be a map, got %s", f.val.Describe())
			}
			metadata = f.val
		}
	}
	in := descriptorInfo{key: key, value: value, shadow: flags[0], quota: flags[1], detailed: flags[2],
		toMetric: flags[3], share: flags[4], leaf: children.Len() == 0, file: p.doc.File(), line: item.Line()}
	if metadata.Shape() == yamlconf.Map && metadata.Len() > 0 {
		in.metadata, _ = metadata.Value().(map[string]any)
	}
	pl := place(&in, path, statsPrefix, seen, d)
	if pl.bad != "" {
		p.errorf(item, "%s", pl.bad)
	}
	if pl.badShare != "" {
		p.errorf(shareNode, "%s", pl.badShare)
	}
	var rules []*Rule
	switch {
	case !rl.IsNull() && !rls.IsNull():
		p.errorf(rlsKey, "descriptor %q has both rate_limit and rate_limits, give it one or the other", pl.composite)
	case !rl.IsNull():
		if r := p.rateLimit(rl, false); r != nil {
			rules = []*Rule{r}
		}
	case !rls.IsNull():
		rules = p.rateLimits(rls, pl.composite)
	}
	pl.attach(rules, &in, d)
	sub := &levelIndex{}
	p.list(children, sub, pl.here, pl.statsKey+".", d, depth+1)
	if sub.byKey != nil {
		pl.nd.children = sub
	}
	if pl.bad == "" {
		idx.add(pl.nd)
	}
}

// rateLimits reads the rate_limits list of the descriptor composite: its
// limits, each with its suffix (its name, else its window), or nil when
// the list has a problem (recorded).
func (p *parser) rateLimits(n yamlconf.Node, composite string) []*Rule {
	switch {
	case n.Shape() != yamlconf.List:
		p.errorf(n, "rate_limits must be a list of one or more rate_limit blocks, got %s", n.Describe())
		return nil
	case n.Len() == 0:
		p.errorf(n, "rate_limits is empty, it must list one or more rate_limit blocks")
		return nil
	}
	before := p.doc.ErrorCount()
	var rules []*Rule
	at := map[string]int{} // suffix -> line of the limit that has it
	for item := range n.Items() {
		r := p.rateLimit(item, true)
		if r == nil {
			continue
		}
		r.suffix = r.Name
		if r.suffix == "" {
			r.suffix = r.Unit.String()
			if r.UnitMultiplier > 1 {
				r.suffix = fmt.Sprintf("%d_%s", r.UnitMultiplier, r.Unit)
			}
		}
		if line, ok := at[r.suffix]; ok {
			p.errorf(item, "descriptor %q has two rate_limits named %q (the other at line %d): give each limit its own name or window", composite, r.suffix, line)
			continue
		}
		at[r.suffix] = item.Line()
		rules = append(rules, r)
	}
	if p.doc.ErrorCount() > before {
		return nil
	}
	for _, r := range rules {
		r.Group = rules
	}
	return rules
}

// rateLimit reads a rate_limit block, or one item of a rate_limits list
// (inList), which may have its own shadow_mode but may not be unlimited.
// It returns nil when the block is invalid (the problems are recorded) or
// not a map.
func (p *parser) rateLimit(n yamlconf.Node, inList bool) *Rule {
	where, known := "rate_limit", []string{"unit", "requests_per_unit", "unlimited", "name", "replaces", "burst", "unit_multiplier"}
	if inList {
		where, known = "a rate_limits item", append(known[:len(known):len(known)], "shadow_mode")
	}
	if n.Shape() != yamlconf.Map {
		p.errorf(n, "%s must be a map, got %s", where, n.Describe())
		return nil
	}
	before := p.doc.ErrorCount()
	r := &Rule{UnitMultiplier: 1}
	var unit, burst, mult, unlimited yamlconf.Node // the zero Node when absent
	var replaced []yamlconf.Node
	for _, f := range p.fields(n, where, known...) {
		switch f.name {
		case "shadow_mode":
			r.ShadowMode = p.bool(f.val, f.name)
		case "unit":
			unit = f.val
		case "requests_per_unit":
			r.RequestsPerUnit = p.uint32(f.val, f.name, 0)
		case "unlimited":
			r.Unlimited, unlimited = p.bool(f.val, f.name), f.val
		case "name":
			r.Name = p.str(f.val, f.name)
		case "replaces":
			r.Replaces, replaced = p.replaces(f.val)
		case "burst":
			burst = f.val
			r.Burst = p.uint32(f.val, f.name, 1)
		case "unit_multiplier":
			mult = f.val
			if r.UnitMultiplier = p.uint32(f.val, f.name, 1); r.UnitMultiplier == 0 {
				r.UnitMultiplier = 1
			}
		}
	}
	unitName := ""
	if !unit.IsZero() {
		unitName = p.str(unit, "unit")
	}
	switch {
	case r.Unlimited && inList:
		p.errorf(unlimited, "a rate_limits item cannot be unlimited: use rate_limit: {unlimited: true} for a descriptor without a limit")
	case r.Unlimited && validUnit(unitName):
		// envoyproxy/ratelimit ignores a unit it does not know here.
		p.errorf(unit, "should not specify rate limit unit %q when unlimited is true", unitName)
	case r.Unlimited && !burst.IsZero():
		p.errorf(burst, "should not specify burst when unlimited is true")
	case r.Unlimited && !mult.IsZero():
		p.errorf(mult, "should not specify unit_multiplier when unlimited is true")
	case r.Unlimited:
	case unitName == "":
		p.errorf(n, "rate_limit needs a unit (second, minute, hour, day, week, month or year) or unlimited: true")
	default:
		u, err := window.ParseUnit(unitName)
		if err != nil {
			p.errorf(unit, "invalid rate limit unit %q, must be one of second, minute, hour, day, week, month, year", unitName)
		}
		r.Unit = u
		per := u.String()
		if r.UnitMultiplier > 1 {
			per = fmt.Sprintf("%d %ss", r.UnitMultiplier, u)
		}
		tooLong := err == nil && int64(r.UnitMultiplier) > int64(window.MaxLength/u.Duration())
		if tooLong {
			p.errorf(mult, "unit_multiplier %d makes a window of %s, must be at most %s", r.UnitMultiplier, per, years(window.MaxLength))
		}
		switch {
		case r.Burst == 0:
		case r.RequestsPerUnit == 0:
			p.errorf(burst, "burst needs requests_per_unit > 0 to refill")
		case err != nil || tooLong:
		case r.Window()/time.Duration(r.RequestsPerUnit) == 0:
			p.errorf(burst, "burst needs requests_per_unit %d per %s to be at most one a nanosecond", r.RequestsPerUnit, per)
		case (gcra.Limit{Burst: int64(r.Burst), Count: int64(r.RequestsPerUnit), Period: r.Window()}).Valid() != nil:
			p.errorf(burst, "burst %d at %d per %s takes more than %s to fill", r.Burst, r.RequestsPerUnit, per, years(gcra.MaxBurstOffset))
		}
	}
	for i, name := range r.Replaces {
		if name == r.Name {
			p.errorf(replaced[i], "rule %q replaces itself", name)
		}
	}
	if p.doc.ErrorCount() > before {
		return nil
	}
	return r
}

// years writes d, a whole number of 365-day years, as "100 years".
func years(d time.Duration) string {
	return fmt.Sprintf("%d years", d/(365*24*time.Hour))
}

func validUnit(name string) bool {
	_, err := window.ParseUnit(name)
	return err == nil
}

// replaces reads the list of rules a rate_limit replaces: their names
// (never empty) and the entries that named them.
func (p *parser) replaces(n yamlconf.Node) (names []string, at []yamlconf.Node) {
	if n.IsNull() {
		return nil, nil
	}
	if n.Shape() != yamlconf.List {
		p.errorf(n, "replaces must be a list of {name: ...}, got %s", n.Describe())
		return nil, nil
	}
	for item := range n.Items() {
		if item.Shape() != yamlconf.Map {
			p.errorf(item, "a replaces entry must be a map with a name, got %s", item.Describe())
			continue
		}
		name := ""
		for _, f := range p.fields(item, "a replaces entry", "name") {
			name = p.str(f.val, "name")
		}
		if name == "" {
			p.errorf(item, "a replaces entry has an empty name")
			continue
		}
		names, at = append(names, name), append(at, item)
	}
	return names, at
}
