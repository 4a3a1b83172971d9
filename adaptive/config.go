package adaptive

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/internal/yamlconf"
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

// FieldError is one configuration problem: where, which field, what. Its
// Error method returns "file:line: field: message", leaving out what is
// unknown; File is "" for a Config built in code, Field names the field's
// path, such as "rules.asset.maxRate", and Col is the column (not printed).
type FieldError = yamlconf.Error

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
// Numbers, integers, booleans and the window duration are read as
// internal/yamlconf reads them (the window as a Go duration such as 60s).
func ParseConfig(filename string, data []byte) (Config, error) {
	cfg := DefaultConfig()
	doc, err := yamlconf.Parse(filename, data, yamlconf.Options{LineOnly: true})
	if err != nil {
		return Config{}, err
	}
	p := parser{doc: doc}
	p.top(doc.Root(), &cfg)
	// Validate whatever parsed; a field that failed to parse keeps its
	// default and is not reported twice.
	errs := doc.Errors()
	bad := map[string]bool{}
	for _, e := range errs {
		bad[e.Field] = true
	}
	for _, e := range validate(cfg, p.where) {
		if !bad[e.Field] {
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		errs.SortByLine()
		return Config{}, errs
	}
	return cfg, nil
}

// Validate reports every invalid field of c, joined in one error, or nil.
func (c Config) Validate() error {
	return validate(c, func(field string) (string, int) { return "", 0 }).Err()
}

// parser reads one file's fields into a Config.
type parser struct {
	doc *yamlconf.Doc
}

// where locates the key of field in the file, for validate.
func (p *parser) where(field string) (string, int) {
	line, _ := p.doc.At(field)
	return p.doc.File(), line
}

func (p *parser) top(n yamlconf.Node, c *Config) {
	d := p.doc
	d.Map(n, "", yamlconf.Fields{
		"minValue":        d.Float(&c.MinValue),
		"maxValue":        d.Float(&c.MaxValue),
		"maxRate":         d.Float(&c.MaxRate),
		"minRate":         d.Float(&c.MinRate),
		"curve":           p.curve(&c.Curve),
		"countMetricName": d.String(&c.CountMetricName),
		"valueMetricName": d.String(&c.ValueMetricName),
		"window":          d.Duration(&c.Window),
		"rules":           func(v yamlconf.Node, path string) { p.rules(v, path, &c.Rules) },
		"routes":          d.Strings(&c.Routes),
		"maxKeys":         d.Int(&c.MaxKeys),
		"minSamples":      d.Int(&c.MinSamples),
		"perClient":       d.Bool(&c.PerClient),
		"clientHeader":    d.String(&c.ClientHeader),
		"dryRun":          d.Bool(&c.DryRun),
		"headers":         d.Bool(&c.Headers),
	}, nil)
}

func (p *parser) rules(n yamlconf.Node, path string, r *Rules) {
	p.doc.Map(n, path, yamlconf.Fields{
		"html":  func(v yamlconf.Node, path string) { p.rule(v, path, &r.HTML, false) },
		"asset": func(v yamlconf.Node, path string) { p.rule(v, path, &r.Asset, true) },
	}, func(k yamlconf.Node) {
		p.doc.Errorf(k, path, "unknown rule %q, must be html or asset", k.Text())
	})
}

func (p *parser) rule(n yamlconf.Node, path string, r *Rule, asset bool) {
	d := p.doc
	// own reads a parameter the rule sets for itself into a new value.
	own := func(dst **float64) func(yamlconf.Node, string) {
		return func(v yamlconf.Node, path string) {
			*dst = new(float64)
			d.Float(*dst)(v, path)
		}
	}
	patterns := func(dst *[]string) func(yamlconf.Node, string) {
		return func(v yamlconf.Node, path string) {
			if !asset {
				d.Errorf(v, path, "only the asset rule takes patterns; other paths are html")
				return
			}
			d.Strings(dst)(v, path)
		}
	}
	d.Map(n, path, yamlconf.Fields{
		"minValue": own(&r.MinValue),
		"maxValue": own(&r.MaxValue),
		"maxRate":  own(&r.MaxRate),
		"minRate":  own(&r.MinRate),
		"curve": func(v yamlconf.Node, path string) {
			r.Curve = new(Curve)
			p.curve(r.Curve)(v, path)
		},
		"minSamples": func(v yamlconf.Node, path string) {
			r.MinSamples = new(int)
			d.Int(r.MinSamples)(v, path)
		},
		"contains": patterns(&r.Contains),
		"suffixes": patterns(&r.Suffixes),
	}, nil)
}

// curve returns a reader of a curve's name into dst.
func (p *parser) curve(dst *Curve) func(yamlconf.Node, string) {
	return func(v yamlconf.Node, path string) {
		name, ok := p.doc.Scalar(v, path, "linear or inverse")
		if !ok {
			return
		}
		c, err := ParseCurve(name)
		if err != nil {
			p.doc.Errorf(v, path, "%v", err)
			return
		}
		*dst = c
	}
}

var metricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)

// metricize turns a seed metric name into a Prometheus one: dots become
// underscores.
func metricize(name string) string { return strings.ReplaceAll(name, ".", "_") }

// validate checks c, naming each bad field with where's file and line.
func validate(c Config, where func(field string) (string, int)) yamlconf.Errors {
	var errs yamlconf.Errors
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
