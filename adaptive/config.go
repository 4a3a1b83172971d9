package adaptive

import (
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config is the adaptive limiter's configuration, as read from YAML. The
// top level takes the seed's parameter names. Start from DefaultConfig:
// the zero value is not valid. A Config is a plain value; New copies what
// it needs.
type Config struct {
	// Params are minValue and maxValue (ms), maxRate and minRate (requests
	// per Window) and curve ("linear", default, or "inverse").
	Params

	// CountMetricName names the per-route gauge of admitted requests in the
	// window. Default "request.count.by.url"; dots become underscores.
	CountMetricName string
	// ValueMetricName names the per-route gauge of the average response
	// time in ms. Default "request.resp.avg.by.url"; dots become
	// underscores.
	ValueMetricName string

	// Window is the length of the sliding window the counts and averages
	// cover; rates are per Window. Default 60s; 1s to 24h.
	Window time.Duration

	// Rules hold the html and asset rules: which paths are assets and any
	// parameters a rule sets for itself.
	Rules Rules

	// Routes are path templates such as "/users/{id}" or
	// "/files/{path...}"; a request whose path matches one is counted
	// under the template. The first match in order wins. Default none.
	Routes []string

	// MaxKeys bounds the number of distinct keys (routes or paths) tracked
	// at once. Default 10000; >= 1.
	MaxKeys int

	// MinSamples is the number of latency samples a window needs before
	// its average may lower the rate; with fewer the rate is MaxRate.
	// Default 0 (off: one sample is enough); >= 0.
	MinSamples int

	// PerClient shares a key's budget fairly between the clients active in
	// its window. Default false.
	PerClient bool
	// ClientHeader names a request header that identifies the client (its
	// first comma-separated value) when PerClient is on; empty means the
	// IP of RemoteAddr. Default "".
	ClientHeader string

	// DryRun counts and measures but never denies; would-be denials are
	// counted in a metric. Default false.
	DryRun bool

	// Headers adds RateLimit-Policy and RateLimit response headers
	// (draft-ietf-httpapi-ratelimit-headers). Default false.
	Headers bool
}

// Rules are the two rules of the seed. Every request is an asset if the
// Asset rule's patterns match its path, otherwise HTML.
type Rules struct {
	HTML  Rule
	Asset Rule
}

// Rule is one rule: the requests it covers and the parameters it sets for
// itself. A nil parameter inherits the top-level value.
type Rule struct {
	MinValue   *float64
	MaxValue   *float64
	MaxRate    *float64
	MinRate    *float64
	Curve      *Curve
	MinSamples *int

	// Contains lists substrings that make a path an asset (asset rule
	// only). Default ["/api/"].
	Contains []string
	// Suffixes lists path endings that make a path an asset (asset rule
	// only). Default [".js", ".css", ".png", ".json"].
	Suffixes []string
}

// params returns the rule's parameters over the top-level ones.
func (r Rule) params(top Params, topMinSamples int) (Params, int) {
	p := top
	if r.MinValue != nil {
		p.MinValue = *r.MinValue
	}
	if r.MaxValue != nil {
		p.MaxValue = *r.MaxValue
	}
	if r.MaxRate != nil {
		p.MaxRate = *r.MaxRate
	}
	if r.MinRate != nil {
		p.MinRate = *r.MinRate
	}
	if r.Curve != nil {
		p.Curve = *r.Curve
	}
	ms := topMinSamples
	if r.MinSamples != nil {
		ms = *r.MinSamples
	}
	return p, ms
}

// DefaultConfig returns the seed's configuration with every extension off.
func DefaultConfig() Config {
	return Config{
		Params:          DefaultParams(),
		CountMetricName: "request.count.by.url",
		ValueMetricName: "request.resp.avg.by.url",
		Window:          60 * time.Second,
		Rules: Rules{Asset: Rule{
			Contains: []string{"/api/"},
			Suffixes: []string{".js", ".css", ".png", ".json"},
		}},
		MaxKeys: 10000,
	}
}

// FieldError is one configuration problem: where, which field, what.
type FieldError struct {
	File  string // "" for a Config built in code
	Line  int    // 0 when unknown
	Field string // the field's path, e.g. "rules.asset.maxRate"
	Msg   string
}

func (e *FieldError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteByte(':')
		if e.Line > 0 {
			b.WriteString(strconv.Itoa(e.Line))
			b.WriteByte(':')
		}
		b.WriteByte(' ')
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// LoadConfig reads and validates the YAML file at path. Fields it does not
// set keep DefaultConfig's values. Every problem is reported, each naming
// file:line and field, joined in one error.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("load adaptive config: %w", err)
	}
	return ParseConfig(path, data)
}

// ParseConfig parses and validates YAML data; filename only labels errors.
// Unknown keys, duplicate keys, values of the wrong type and invalid values
// are errors. Fields the data does not set keep DefaultConfig's values.
func ParseConfig(filename string, data []byte) (Config, error) {
	p := parser{file: filename, lines: map[string]int{}}
	cfg := DefaultConfig()
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return Config{}, p.yamlError(err)
	}
	if len(doc.Content) > 0 {
		p.top(doc.Content[0], &cfg)
	}
	// Validate whatever parsed; a field that failed to parse keeps its
	// default and is not reported twice.
	bad := map[string]bool{}
	for _, e := range p.errs {
		bad[e.(*FieldError).Field] = true
	}
	for _, e := range validate(cfg, p.where) {
		if !bad[e.(*FieldError).Field] {
			p.errs = append(p.errs, e)
		}
	}
	if len(p.errs) > 0 {
		slices.SortStableFunc(p.errs, func(a, b error) int { return a.(*FieldError).Line - b.(*FieldError).Line })
		return Config{}, errors.Join(p.errs...)
	}
	return cfg, nil
}

// Validate reports every invalid field of c, joined in one error, or nil.
func (c Config) Validate() error {
	return errors.Join(validate(c, func(field string) (string, int) { return "", 0 })...)
}

type parser struct {
	file  string
	lines map[string]int // field path -> line it was set on
	errs  []error
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func (p *parser) yamlError(err error) error {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &FieldError{File: p.file, Line: line, Msg: m[2]}
	}
	return &FieldError{File: p.file, Msg: strings.TrimPrefix(msg, "yaml: ")}
}

func (p *parser) where(field string) (string, int) { return p.file, p.lines[field] }

func (p *parser) errorf(n *yaml.Node, field, format string, args ...any) {
	p.errs = append(p.errs, &FieldError{File: p.file, Line: n.Line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// fields walks a mapping node, reporting duplicates and calling set for
// each key with its value node.
func (p *parser) fields(n *yaml.Node, path string, set func(k, v *yaml.Node, field string)) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, strings.TrimSuffix(path, "."), "must be a mapping")
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		field := path + k.Value
		if seen[k.Value] {
			p.errorf(k, field, "duplicate key")
			continue
		}
		seen[k.Value] = true
		p.lines[field] = k.Line
		set(k, v, field)
	}
}

func (p *parser) top(n *yaml.Node, c *Config) {
	p.fields(n, "", func(k, v *yaml.Node, field string) {
		switch k.Value {
		case "minValue":
			p.float(v, field, &c.MinValue)
		case "maxValue":
			p.float(v, field, &c.MaxValue)
		case "maxRate":
			p.float(v, field, &c.MaxRate)
		case "minRate":
			p.float(v, field, &c.MinRate)
		case "curve":
			p.curve(v, field, &c.Curve)
		case "countMetricName":
			p.str(v, field, &c.CountMetricName)
		case "valueMetricName":
			p.str(v, field, &c.ValueMetricName)
		case "window":
			p.duration(v, field, &c.Window)
		case "rules":
			p.rules(v, field, &c.Rules)
		case "routes":
			p.strs(v, field, &c.Routes)
		case "maxKeys":
			p.int(v, field, &c.MaxKeys)
		case "minSamples":
			p.int(v, field, &c.MinSamples)
		case "perClient":
			p.bool(v, field, &c.PerClient)
		case "clientHeader":
			p.str(v, field, &c.ClientHeader)
		case "dryRun":
			p.bool(v, field, &c.DryRun)
		case "headers":
			p.bool(v, field, &c.Headers)
		default:
			p.errorf(k, "", "unknown field %q", k.Value)
		}
	})
}

func (p *parser) rules(n *yaml.Node, path string, r *Rules) {
	p.fields(n, path+".", func(k, v *yaml.Node, field string) {
		switch k.Value {
		case "html":
			p.rule(v, field, &r.HTML, false)
		case "asset":
			p.rule(v, field, &r.Asset, true)
		default:
			p.errorf(k, path, "unknown rule %q, must be html or asset", k.Value)
		}
	})
}

func (p *parser) rule(n *yaml.Node, path string, r *Rule, asset bool) {
	p.fields(n, path+".", func(k, v *yaml.Node, field string) {
		switch key := k.Value; key {
		case "minValue":
			r.MinValue = new(float64)
			p.float(v, field, r.MinValue)
		case "maxValue":
			r.MaxValue = new(float64)
			p.float(v, field, r.MaxValue)
		case "maxRate":
			r.MaxRate = new(float64)
			p.float(v, field, r.MaxRate)
		case "minRate":
			r.MinRate = new(float64)
			p.float(v, field, r.MinRate)
		case "curve":
			r.Curve = new(Curve)
			p.curve(v, field, r.Curve)
		case "minSamples":
			r.MinSamples = new(int)
			p.int(v, field, r.MinSamples)
		case "contains", "suffixes":
			if !asset {
				p.errorf(v, field, "only the asset rule takes patterns; other paths are html")
				return
			}
			if key == "contains" {
				p.strs(v, field, &r.Contains)
			} else {
				p.strs(v, field, &r.Suffixes)
			}
		default:
			p.errorf(k, path, "unknown field %q", key)
		}
	})
}

func (p *parser) scalar(n *yaml.Node, field, what string) bool {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.errorf(n, field, "must be %s", what)
		return false
	}
	return true
}

func (p *parser) float(n *yaml.Node, field string, dst *float64) {
	if !p.scalar(n, field, "a number") {
		return
	}
	f, err := strconv.ParseFloat(n.Value, 64)
	if err != nil || (n.Tag != "!!int" && n.Tag != "!!float") || math.IsNaN(f) || math.IsInf(f, 0) {
		p.errorf(n, field, "invalid number %q", n.Value)
		return
	}
	*dst = f
}

func (p *parser) int(n *yaml.Node, field string, dst *int) {
	if !p.scalar(n, field, "an integer") {
		return
	}
	i, err := strconv.ParseInt(n.Value, 10, 0)
	if err != nil || n.Tag != "!!int" {
		p.errorf(n, field, "invalid integer %q", n.Value)
		return
	}
	*dst = int(i)
}

func (p *parser) bool(n *yaml.Node, field string, dst *bool) {
	if !p.scalar(n, field, "true or false") {
		return
	}
	switch {
	case n.Tag == "!!bool" && (n.Value == "true" || n.Value == "True" || n.Value == "TRUE"):
		*dst = true
	case n.Tag == "!!bool" && (n.Value == "false" || n.Value == "False" || n.Value == "FALSE"):
		*dst = false
	default:
		p.errorf(n, field, "invalid boolean %q, must be true or false", n.Value)
	}
}

func (p *parser) str(n *yaml.Node, field string, dst *string) {
	if !p.scalar(n, field, "a string") {
		return
	}
	*dst = n.Value
}

func (p *parser) strs(n *yaml.Node, field string, dst *[]string) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, field, "must be a list of strings")
		return
	}
	out := make([]string, 0, len(n.Content))
	for _, e := range n.Content {
		if e.Kind != yaml.ScalarNode || e.Tag == "!!null" {
			p.errorf(e, field, "must be a list of strings")
			return
		}
		out = append(out, e.Value)
	}
	*dst = out
}

func (p *parser) duration(n *yaml.Node, field string, dst *time.Duration) {
	if !p.scalar(n, field, "a duration") {
		return
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		p.errorf(n, field, "invalid duration %q, want a Go duration such as 60s or 1m", n.Value)
		return
	}
	*dst = d
}

func (p *parser) curve(n *yaml.Node, field string, dst *Curve) {
	if !p.scalar(n, field, "linear or inverse") {
		return
	}
	c, err := ParseCurve(n.Value)
	if err != nil {
		p.errorf(n, field, "%v", err)
		return
	}
	*dst = c
}

var metricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)

// metricize turns a seed metric name into a Prometheus one: dots become
// underscores.
func metricize(name string) string { return strings.ReplaceAll(name, ".", "_") }

// validate checks c, naming each bad field with where's file and line.
func validate(c Config, where func(field string) (string, int)) []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		file, line := where(field)
		errs = append(errs, &FieldError{File: file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	checkParams := func(prefix string, p Params, minSamples int, own func(string) bool) {
		// A cross-field error names the field the file set, preferring a
		// rule's own field over one it inherits.
		pick := func(a, b string) string {
			if own(b) && !own(a) {
				return prefix + b
			}
			if !own(a) {
				return prefix + a
			}
			if _, la := where(prefix + a); la == 0 {
				if _, lb := where(prefix + b); lb > 0 {
					return prefix + b
				}
			}
			return prefix + a
		}
		if p.MinValue < 0 {
			bad(prefix+"minValue", "invalid value %g, must be >= 0", p.MinValue)
		}
		if p.MaxValue < 0 {
			bad(prefix+"maxValue", "invalid value %g, must be > 0", p.MaxValue)
		}
		if p.MaxRate <= 0 {
			bad(prefix+"maxRate", "invalid value %g, must be > 0", p.MaxRate)
		}
		if p.MinRate < 0 {
			bad(prefix+"minRate", "invalid value %g, must be >= 0", p.MinRate)
		}
		if minSamples < 0 {
			bad(prefix+"minSamples", "invalid value %d, must be >= 0", minSamples)
		}
		if p.MinValue >= 0 && p.MaxValue >= 0 && p.MinValue >= p.MaxValue {
			bad(pick("minValue", "maxValue"), "minValue %g must be less than maxValue %g", p.MinValue, p.MaxValue)
		}
		if p.MinRate >= 0 && p.MaxRate > 0 && p.MinRate > p.MaxRate {
			bad(pick("minRate", "maxRate"), "minRate %g must not exceed maxRate %g", p.MinRate, p.MaxRate)
		}
		if p.Curve == Inverse && p.MinRate <= 0 {
			bad(pick("curve", "minRate"), "the inverse curve needs minRate > 0")
		}
		if p.Curve != Linear && p.Curve != Inverse {
			bad(prefix+"curve", "unknown curve %d", p.Curve)
		}
	}
	checkParams("", c.Params, c.MinSamples, func(string) bool { return true })
	if len(errs) == 0 {
		// Rules are checked once the values they inherit are valid, so a
		// bad top-level value is reported once.
		for _, r := range []struct {
			name string
			rule Rule
		}{{"html", c.Rules.HTML}, {"asset", c.Rules.Asset}} {
			rr := r.rule
			own := func(f string) bool {
				switch f {
				case "minValue":
					return rr.MinValue != nil
				case "maxValue":
					return rr.MaxValue != nil
				case "maxRate":
					return rr.MaxRate != nil
				case "minRate":
					return rr.MinRate != nil
				case "curve":
					return rr.Curve != nil
				}
				return false
			}
			p, ms := rr.params(c.Params, c.MinSamples)
			checkParams("rules."+r.name+".", p, ms, own)
		}
	}
	for i, s := range c.Rules.Asset.Contains {
		if s == "" {
			bad("rules.asset.contains", "pattern %d is empty", i+1)
		}
	}
	for i, s := range c.Rules.Asset.Suffixes {
		if s == "" {
			bad("rules.asset.suffixes", "pattern %d is empty", i+1)
		}
	}
	for _, f := range []struct{ field, v string }{{"countMetricName", c.CountMetricName}, {"valueMetricName", c.ValueMetricName}} {
		if !metricName.MatchString(metricize(f.v)) {
			bad(f.field, "invalid metric name %q", f.v)
		}
	}
	if metricize(c.CountMetricName) == metricize(c.ValueMetricName) {
		bad("valueMetricName", "must differ from countMetricName %q", c.CountMetricName)
	}
	if c.Window < time.Second || c.Window > 24*time.Hour {
		bad("window", "invalid duration %s, must be between 1s and 24h", c.Window)
	}
	if c.MaxKeys < 1 {
		bad("maxKeys", "invalid value %d, must be >= 1", c.MaxKeys)
	}
	if c.ClientHeader != "" && !validHeaderName(c.ClientHeader) {
		bad("clientHeader", "invalid header name %q", c.ClientHeader)
	}
	seen := map[string]bool{}
	for _, r := range c.Routes {
		if _, err := parseRoute(r); err != nil {
			bad("routes", "%v", err)
			continue
		}
		if seen[r] {
			bad("routes", "duplicate route %q", r)
		}
		seen[r] = true
	}
	return errs
}

func validHeaderName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return s != ""
}
