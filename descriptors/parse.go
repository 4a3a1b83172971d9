package descriptors

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/window"
)

// Error is one problem in a configuration file, located by file and line.
type Error struct {
	File string
	Line int // 1-based; 0 when unknown
	Msg  string
}

// Error formats the problem as "file:line: message".
func (e *Error) Error() string {
	if e.Line <= 0 {
		return e.File + ": " + e.Msg
	}
	return e.File + ":" + strconv.Itoa(e.Line) + ": " + e.Msg
}

// ErrorList is every problem found in one or more configuration files, in
// file order. Parse, New and Load return it as their error; its message has
// one problem per line.
type ErrorList []*Error

// Error lists the problems one per line.
func (l ErrorList) Error() string {
	msgs := make([]string, len(l))
	for i, e := range l {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// Unwrap gives the problems to errors.Is and errors.As.
func (l ErrorList) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}

// Limits on what one file may make the parser do, so that a hostile file
// (aliases that expand exponentially, or refer to their own ancestors)
// fails quickly instead of exhausting memory or the stack. A file without
// aliases has fewer YAML nodes than bytes, so the node budget, twice the
// file's size, only ever stops alias expansion.
const (
	minNodes = 1024 // the node budget of a tiny file
	maxDepth = 64   // levels of nested descriptors
)

// Parse reads one configuration file: a domain and its descriptors.
// filename is used in error messages only. Every problem found is reported,
// as an ErrorList whose entries give filename and line.
func Parse(filename string, data []byte) (*Domain, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, ErrorList{yamlError(filename, err)}
	}
	p := &parser{file: filename, budget: minNodes + 2*len(data)}
	d := p.file1(&doc)
	if len(p.errs) > 0 {
		return nil, p.errs
	}
	return d, nil
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlError turns a YAML syntax error into an Error with its line.
func yamlError(file string, err error) *Error {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &Error{File: file, Line: line, Msg: m[2]}
	}
	return &Error{File: file, Msg: strings.TrimPrefix(msg, "yaml: ")}
}

// parser holds the state of one Parse call.
type parser struct {
	file   string
	domain string
	errs   ErrorList
	budget int  // nodes left to visit
	broke  bool // the budget ran out; stop
}

func (p *parser) errorf(n *yaml.Node, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Msg: fmt.Sprintf(format, args...)})
}

// deref follows aliases to the node they name and charges the visit to the
// budget. It returns nil once the budget is spent.
func (p *parser) deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 32; i++ {
		n = n.Alias
	}
	if p.broke {
		return nil
	}
	if p.budget--; p.budget < 0 {
		p.broke = true
		p.errorf(n, "aliases expand to too many nodes")
		return nil
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a map"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "nothing"
}

// field is one key: value pair of a YAML mapping.
type field struct {
	name     string
	key, val *yaml.Node
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

// fields lists the pairs of mapping n, reporting keys that are not in
// known (where says what the map is), duplicated or not strings. YAML merge
// keys ("<<: *anchor") are expanded, the map's own keys winning. A key that
// is not in known but is one of envoyKeys is ignored, as
// envoyproxy/ratelimit ignores it, after checking its value as that server
// would (see ignored).
func (p *parser) fields(n *yaml.Node, where string, known ...string) []field {
	var out, merged []field
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := p.deref(n.Content[i]), p.deref(n.Content[i+1])
		if k == nil || v == nil {
			return out
		}
		if k.Kind != yaml.ScalarNode {
			p.errorf(k, "%s has a key that is %s, not a field name", where, describe(k))
			continue
		}
		if k.Tag == "!!merge" {
			merged = append(merged, p.merge(v, where, known)...)
			continue
		}
		dup := false
		for _, f := range out {
			dup = dup || f.name == k.Value
		}
		switch {
		case dup:
			p.errorf(k, "duplicate field %q in %s", k.Value, where)
		case !contains(known, k.Value) && envoyKeys[k.Value]:
			p.ignored(v)
		case !contains(known, k.Value):
			p.errorf(k, "unknown field %q in %s, must be one of %s", k.Value, where, strings.Join(known, ", "))
		default:
			out = append(out, field{name: k.Value, key: k, val: v})
		}
	}
	for _, m := range merged {
		dup := false
		for _, f := range out {
			dup = dup || f.name == m.name
		}
		if !dup {
			out = append(out, m)
		}
	}
	return out
}

// merge reads the value of a merge key: a map, or a list of maps whose
// earlier entries win.
func (p *parser) merge(v *yaml.Node, where string, known []string) []field {
	switch v.Kind {
	case yaml.MappingNode:
		return p.fields(v, where, known...)
	case yaml.SequenceNode:
		var out []field
		for _, item := range v.Content {
			item = p.deref(item)
			if item == nil {
				return out
			}
			if item.Kind != yaml.MappingNode {
				p.errorf(item, "a merge key in %s must name maps, got %s", where, describe(item))
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
	p.errorf(v, "a merge key in %s must name a map, got %s", where, describe(v))
	return nil
}

// ignored checks a value Parse ignores as envoyproxy/ratelimit checks
// every value: maps may only have envoyKeys, lists may only hold maps, and
// no scalar may be a floating-point number.
func (p *parser) ignored(n *yaml.Node) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := p.deref(n.Content[i]), p.deref(n.Content[i+1])
			if k == nil || v == nil {
				return
			}
			if k.Kind != yaml.ScalarNode || (k.Tag != "!!merge" && !envoyKeys[k.Value]) {
				p.errorf(k, "unknown field %s", describe(k))
				continue
			}
			p.ignored(v)
		}
	case yaml.SequenceNode:
		for _, item := range n.Content {
			if item = p.deref(item); item == nil {
				return
			}
			if item.Kind != yaml.MappingNode {
				p.errorf(item, "a list may only hold maps, got %s", describe(item))
				continue
			}
			p.ignored(item)
		}
	case yaml.ScalarNode:
		p.notFloat(n, "value")
	}
}

// notFloat reports a floating-point scalar: envoyproxy/ratelimit refuses
// files with one anywhere ("1.5", "2.0", "1e3"), even where a string is
// expected; quote it to make it a string. It reports whether n is fine.
func (p *parser) notFloat(n *yaml.Node, name string) bool {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!float" {
		p.errorf(n, "invalid %s %s: a floating-point number, quote it if it is a string", name, describe(n))
		return false
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (p *parser) str(n *yaml.Node, name string) string {
	if isNull(n) {
		return ""
	}
	if n.Kind != yaml.ScalarNode {
		p.errorf(n, "%s must be a string, got %s", name, describe(n))
		return ""
	}
	if !p.notFloat(n, name) {
		return ""
	}
	return n.Value
}

func (p *parser) bool(n *yaml.Node, name string) bool {
	if isNull(n) {
		return false
	}
	var b bool
	if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
		p.errorf(n, "invalid %s %s, must be true or false", name, describe(n))
		return false
	}
	return b
}

// uint32 reads a whole number between lo and math.MaxUint32.
func (p *parser) uint32(n *yaml.Node, name string, lo int64) uint32 {
	if isNull(n) {
		return 0
	}
	var v int64
	// The YAML decoder would truncate 1.5 to 1; and envoyproxy/ratelimit
	// refuses any floating-point number, 2.0 and 1e3 included.
	if n.Kind != yaml.ScalarNode || n.Tag == "!!float" || n.Decode(&v) != nil {
		p.errorf(n, "invalid %s %s, must be a whole number", name, describe(n))
		return 0
	}
	switch {
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
func (p *parser) file1(doc *yaml.Node) *Domain {
	root := doc
	if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		root = doc.Content[0]
	}
	root = p.deref(root)
	if root == nil {
		return nil
	}
	if isNull(root) || root.Kind == yaml.DocumentNode {
		p.errs = append(p.errs, &Error{File: p.file, Line: 1, Msg: "empty domain"})
		return nil
	}
	if root.Kind != yaml.MappingNode {
		p.errorf(root, "a domain file must be a map with domain and descriptors, got %s", describe(root))
		return nil
	}
	d := &Domain{file: p.file, line: root.Line}
	var list *yaml.Node
	found := false
	for _, f := range p.fields(root, "the domain file", "domain", "descriptors") {
		switch f.name {
		case "domain":
			d.name, d.line, found = p.str(f.val, "domain"), f.val.Line, true
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
func (p *parser) list(n *yaml.Node, idx *levelIndex, path []level, statsPrefix string, d *Domain, depth int) {
	n = p.deref(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "descriptors must be a list, got %s", describe(n))
		return
	}
	if depth > maxDepth {
		p.errorf(n, "descriptors nested more than %d levels deep", maxDepth)
		return
	}
	seen := make(map[string]bool) // composite keys ("key" or "key_value") of this level
	for _, item := range n.Content {
		item = p.deref(item)
		if item == nil {
			return
		}
		if item.Kind != yaml.MappingNode {
			p.errorf(item, "a descriptor must be a map with a key, got %s", describe(item))
			continue
		}
		p.descriptor(item, idx, seen, path, statsPrefix, d, depth)
	}
}

// descriptor reads one descriptor into idx.
func (p *parser) descriptor(item *yaml.Node, idx *levelIndex, seen map[string]bool, path []level, statsPrefix string, d *Domain, depth int) {
	nd := &node{}
	var (
		rl, children, shareNode *yaml.Node
		flags                   [5]bool // shadow, quota, detailed, toMetric, share
	)
	fs := p.fields(item, "a descriptor", "key", "value", "rate_limit", "descriptors",
		"shadow_mode", "quota_mode", "detailed_metric", "value_to_metric", "share_threshold", "metadata")
	for _, f := range fs {
		switch f.name {
		case "key":
			nd.key = p.str(f.val, "key")
		case "value":
			nd.value = p.str(f.val, "value")
		case "rate_limit":
			rl = f.val
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
			if !isNull(f.val) && f.val.Kind != yaml.MappingNode {
				p.errorf(f.val, "metadata must be a map, got %s", describe(f.val))
			}
		}
	}
	composite, kind := nd.key, "key"
	if nd.value != "" {
		composite, kind = nd.key+"_"+nd.value, "key_value"
	}
	valid := true
	switch {
	case nd.key == "":
		p.errorf(item, "descriptor has an empty key in domain %q", p.domain)
		valid = false
	case seen[composite]:
		p.errorf(item, "duplicate descriptor %s %q in domain %q", kind, strings.TrimPrefix(statsPrefix+composite, d.name+"."), p.domain)
		valid = false
	}
	seen[composite] = true
	nd.pat = compilePattern(nd.value)
	if flags[4] && !nd.pat.wild {
		p.errorf(shareNode, "share_threshold: true needs a wildcard value containing \"*\", descriptor %q has value %q", composite, nd.value)
	}
	lv := level{key: nd.key, value: nd.value, segment: composite, wild: nd.pat.wild,
		share: flags[4] && nd.pat.wild, toMetric: flags[3]}
	here := append(append(make([]level, 0, len(path)+1), path...), lv)
	statsKey := statsPrefix + composite

	if !isNull(rl) {
		r := p.rateLimit(rl)
		if r != nil {
			r.Domain, r.StatsKey, r.Key, r.Value, r.Depth = d.name, statsKey, nd.key, nd.value, len(here)
			if nd.pat.wild {
				r.Pattern = nd.value
			}
			r.ShadowMode, r.QuotaMode, r.DetailedMetric, r.ValueToMetric, r.ShareThreshold = flags[0], flags[1], flags[2], flags[3], flags[4]
			r.File, r.Line, r.levels = p.file, item.Line, here
			nd.rule = r
			if valid {
				d.rules = append(d.rules, r)
			}
		}
	}
	sub := &levelIndex{}
	p.list(children, sub, here, statsKey+".", d, depth+1)
	if sub.byKey != nil {
		nd.children = sub
	}
	if valid {
		idx.add(nd)
	}
}

// rateLimit reads a rate_limit block. It returns nil when the block is
// invalid (the problems are recorded) or not a map.
func (p *parser) rateLimit(n *yaml.Node) *Rule {
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "rate_limit must be a map, got %s", describe(n))
		return nil
	}
	before := len(p.errs)
	r := &Rule{UnitMultiplier: 1}
	var unit, burst, mult *yaml.Node
	var replaced []*yaml.Node
	for _, f := range p.fields(n, "rate_limit", "unit", "requests_per_unit", "unlimited", "name", "replaces", "burst", "unit_multiplier") {
		switch f.name {
		case "unit":
			unit = f.val
		case "requests_per_unit":
			r.RequestsPerUnit = p.uint32(f.val, f.name, 0)
		case "unlimited":
			r.Unlimited = p.bool(f.val, f.name)
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
	if unit != nil {
		unitName = p.str(unit, "unit")
	}
	switch {
	case r.Unlimited && validUnit(unitName):
		// envoyproxy/ratelimit ignores a unit it does not know here.
		p.errorf(unit, "should not specify rate limit unit %q when unlimited is true", unitName)
	case r.Unlimited && burst != nil:
		p.errorf(burst, "should not specify burst when unlimited is true")
	case r.Unlimited && mult != nil:
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
	if len(p.errs) > before {
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
func (p *parser) replaces(n *yaml.Node) (names []string, at []*yaml.Node) {
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "replaces must be a list of {name: ...}, got %s", describe(n))
		return nil, nil
	}
	for _, item := range n.Content {
		item = p.deref(item)
		if item == nil {
			return names, at
		}
		if item.Kind != yaml.MappingNode {
			p.errorf(item, "a replaces entry must be a map with a name, got %s", describe(item))
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
