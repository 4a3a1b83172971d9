package descriptors

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/window"
)

func TestBadFixtures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file string
		want []string // every message, in order, without the "file:" prefix
	}{
		{file: "bad_unknown_top_key.yaml", want: []string{
			`2: unknown field "descriptor" in the domain file, must be one of domain, descriptors`}},
		{file: "bad_unknown_descriptor_key.yaml", want: []string{
			`4: unknown field "vaule" in a descriptor, must be one of key, value, rate_limit, rate_limits, descriptors, shadow_mode, quota_mode, detailed_metric, value_to_metric, share_threshold, metadata`}},
		{file: "bad_unknown_rate_limit_key.yaml", want: []string{
			`6: unknown field "requests_per_second" in rate_limit, must be one of unit, requests_per_unit, unlimited, name, replaces, burst, unit_multiplier`}},
		{file: "bad_empty_domain.yaml", want: []string{`1: empty domain`}},
		{file: "bad_missing_domain.yaml", want: []string{`1: empty domain`}},
		{file: "bad_empty_key.yaml", want: []string{`5: descriptor has an empty key in domain "d"`}},
		{file: "bad_unit.yaml", want: []string{
			`5: invalid rate limit unit "fortnight", must be one of second, minute, hour, day, week, month, year`}},
		{file: "bad_unlimited_with_unit.yaml", want: []string{
			`6: should not specify rate limit unit "second" when unlimited is true`}},
		{file: "bad_no_unit.yaml", want: []string{
			`5: rate_limit needs a unit (second, minute, hour, day, week, month or year) or unlimited: true`}},
		{file: "bad_negative_requests.yaml", want: []string{
			`6: invalid requests_per_unit -1, must be between 0 and 4294967295`}},
		{file: "bad_duplicate_key_value.yaml", want: []string{
			`15: duplicate descriptor key_value "database_users" in domain "mongo_cps"`}},
		{file: "bad_duplicate_key.yaml", want: []string{
			`10: duplicate descriptor key "message_type_marketing.to_number" in domain "messaging"`}},
		{file: "bad_empty_replaces.yaml", want: []string{`8: a replaces entry has an empty name`}},
		{file: "bad_replaces_itself.yaml", want: []string{`10: rule "per_k" replaces itself`}},
		{file: "bad_share_threshold_without_wildcard.yaml", want: []string{
			`5: share_threshold: true needs a wildcard value containing "*", descriptor "tenant_acme" has value "acme"`}},
		{file: "bad_descriptor_not_map.yaml", want: []string{
			`7: a descriptor must be a map with a key, got "just_a_string"`}},
		{file: "bad_descriptors_not_list.yaml", want: []string{`5: descriptors must be a list, got a map`}},
		{file: "bad_burst_zero.yaml", want: []string{`7: invalid burst 0, must be > 0`}},
		{file: "bad_unit_multiplier_negative.yaml", want: []string{`7: invalid unit_multiplier -5, must be > 0`}},
		// libyaml reports the line of the block it was parsing.
		{file: "bad_yaml_syntax.yaml", want: []string{`2: did not find expected '-' indicator`}},
		{file: "bad_many_problems.yaml", want: []string{
			`2: unknown field "color" in the domain file, must be one of domain, descriptors`,
			`6: invalid rate limit unit "parsec", must be one of second, minute, hour, day, week, month, year`,
			`9: invalid shadow_mode "maybe", must be true or false`,
			`10: duplicate descriptor key "a" in domain "d"`,
			`11: descriptor has an empty key in domain "d"`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file+" is rejected with file and line", func(t *testing.T) {
			t.Parallel()
			path := filepath.Join("testdata", tt.file)
			c, err := Load(path)
			if err == nil {
				t.Fatalf("Load(%s) = %v, nil; want an error", path, c)
			}
			if c != nil {
				t.Errorf("Load(%s) returned a config with its error", path)
			}
			var want []string
			for _, w := range tt.want {
				want = append(want, path+":"+w)
			}
			if got := err.Error(); got != strings.Join(want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", got, strings.Join(want, "\n"))
			}
			var list ErrorList
			if !errors.As(err, &list) || len(list) != len(tt.want) {
				t.Errorf("got %d problems as an ErrorList, want %d", len(list), len(tt.want))
			}
		})
	}
}

func TestEveryBadFixtureIsTested(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/bad_*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 21 {
		t.Errorf("got %d bad fixtures, want the 21 TestBadFixtures lists", len(files))
	}
}

func TestGoodFixtures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file      string
		domain    string
		wantRules int
	}{
		{file: "good_mongo_cps.yaml", domain: "mongo_cps", wantRules: 2},
		{file: "good_messaging.yaml", domain: "messaging", wantRules: 2},
		{file: "good_edge.yaml", domain: "edge", wantRules: 14},
		{file: "good_all_fields.yaml", domain: "everything", wantRules: 6},
	}
	for _, tt := range tests {
		t.Run(tt.file+" loads", func(t *testing.T) {
			t.Parallel()
			c, err := Load(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(c.Domains(), ","); got != tt.domain {
				t.Errorf("domains: got %s, want %s", got, tt.domain)
			}
			if got := len(c.Rules()); got != tt.wantRules {
				t.Errorf("rules: got %d, want %d", got, tt.wantRules)
			}
			if got := strings.Count(c.String(), "\n"); got != tt.wantRules {
				t.Errorf("String lines: got %d, want %d", got, tt.wantRules)
			}
		})
	}
	t.Run("the mongo_cps example is listed as envoyproxy lists it", func(t *testing.T) {
		t.Parallel()
		c, err := Load("testdata/good_mongo_cps.yaml")
		if err != nil {
			t.Fatal(err)
		}
		want := "mongo_cps.database_users: unit=SECOND requests_per_unit=500, shadow_mode: false, quota_mode: false\n" +
			"mongo_cps.database_default: unit=SECOND requests_per_unit=500, shadow_mode: false, quota_mode: false\n"
		if got := c.String(); got != want {
			t.Errorf("got\n%s\nwant\n%s", got, want)
		}
	})
}

func TestParseEdgeCases(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		yaml    string
		wantErr string // "" when the file is valid
	}{
		{name: "an empty file has no domain", yaml: "", wantErr: "x.yaml:1: empty domain"},
		{name: "a file of comments has no domain", yaml: "# nothing\n", wantErr: "x.yaml:1: empty domain"},
		{name: "a list is not a domain file", yaml: "- a\n", wantErr: `x.yaml:1: a domain file must be a map with domain and descriptors, got a list`},
		{name: "a domain without descriptors is valid", yaml: "domain: d\n"},
		{name: "empty descriptors are valid", yaml: "domain: d\ndescriptors: []\n"},
		{name: "null descriptors are valid", yaml: "domain: d\ndescriptors:\n"},
		{name: "a duplicated field is reported", yaml: "domain: d\ndomain: e\n", wantErr: `x.yaml:2: duplicate field "domain" in the domain file`},
		{name: "a rate_limit that is not a map is reported", yaml: "domain: d\ndescriptors:\n  - key: k\n    rate_limit: 5\n",
			wantErr: `x.yaml:4: rate_limit must be a map, got "5"`},
		{name: "requests_per_unit above uint32 is reported", yaml: "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 4294967296}\n",
			wantErr: `x.yaml:4: invalid requests_per_unit 4294967296, must be between 0 and 4294967295`},
		{name: "a fractional requests_per_unit is reported", yaml: "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1.5}\n",
			wantErr: `x.yaml:4: invalid requests_per_unit "1.5", must be a whole number`},
		{name: "a whole requests_per_unit written as a float is refused, as envoyproxy/ratelimit does", yaml: "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 2.0}\n",
			wantErr: `x.yaml:4: invalid requests_per_unit "2.0", must be a whole number`},
		{name: "an unquoted float value is refused, as envoyproxy/ratelimit does", yaml: "domain: d\ndescriptors:\n  - key: k\n    value: 1.5\n",
			wantErr: `x.yaml:4: invalid value "1.5": a floating-point number, quote it if it is a string`},
		{name: "a quoted float value is a string", yaml: "domain: d\ndescriptors:\n  - key: k\n    value: \"1.5\"\n"},
		{name: "a known field in the wrong place is ignored, as envoyproxy/ratelimit does", yaml: "domain: d\ndescriptors:\n  - key: k\n    unit: second\n    name: n\n    rate_limit: {unit: second, requests_per_unit: 1, key: x, descriptors: [{key: y}]}\n"},
		{name: "a float in an ignored field is still refused", yaml: "domain: d\ndescriptors:\n  - key: k\n    requests_per_unit: 1.5\n",
			wantErr: `x.yaml:4: invalid value "1.5": a floating-point number, quote it if it is a string`},
		{name: "an unknown field inside an ignored one is still refused", yaml: "domain: d\ndescriptors:\n  - key: k\n    replaces: [{colour: red}]\n",
			wantErr: `x.yaml:4: unknown field "colour"`},
		{name: "unlimited with a unit nobody knows is valid, as in envoyproxy/ratelimit", yaml: "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: fortnight}\n"},
		{name: "a merge key copies fields the map does not set", yaml: "domain: d\ndescriptors:\n  - key: a\n    rate_limit: &rl {unit: second, requests_per_unit: 1}\n  - key: b\n    rate_limit:\n      <<: *rl\n      requests_per_unit: 2\n"},
		{name: "a merge key must name a map", yaml: "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      <<: 5\n      unit: second\n",
			wantErr: `x.yaml:5: a merge key in rate_limit must name a map, got "5"`},
		{name: "requests_per_unit 0 is valid", yaml: "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 0}\n"},
		{name: "burst needs a refill rate", yaml: "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 0, burst: 5}\n",
			wantErr: `x.yaml:4: burst needs requests_per_unit > 0 to refill`},
		{name: "a window of 100 years is valid", yaml: "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 1, unit_multiplier: 100}\n"},
		{name: "a window over 100 years is reported", yaml: "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 1, unit_multiplier: 101}\n",
			wantErr: `x.yaml:4: unit_multiplier 101 makes a window of 101 years, must be at most 100 years`},
		{name: "a window of 4294967295 years is reported", yaml: "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 1, unit_multiplier: 4294967295}\n",
			wantErr: `x.yaml:4: unit_multiplier 4294967295 makes a window of 4294967295 years, must be at most 100 years`},
		{name: "a burst that takes over 100 years to fill is reported", yaml: "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 1, burst: 101}\n",
			wantErr: `x.yaml:4: burst 101 at 1 per year takes more than 100 years to fill`},
		{name: "the largest burst at one a nanosecond is valid", yaml: "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1000000000, burst: 4294967295}\n"},
		{name: "a burst refilled faster than one a nanosecond is reported", yaml: "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 4294967295, burst: 5}\n",
			wantErr: `x.yaml:4: burst needs requests_per_unit 4294967295 per second to be at most one a nanosecond`},
		{name: "burst with unlimited is reported", yaml: "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, burst: 5}\n",
			wantErr: `x.yaml:4: should not specify burst when unlimited is true`},
		{name: "replaces that is not a list is reported", yaml: "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, replaces: other}\n",
			wantErr: `x.yaml:4: replaces must be a list of {name: ...}, got "other"`},
		{name: "metadata that is not a map is reported", yaml: "domain: d\ndescriptors:\n  - key: k\n    metadata: [a]\n",
			wantErr: `x.yaml:4: metadata must be a map, got a list`},
		{name: "a key that is a map is reported", yaml: "domain: d\ndescriptors:\n  - key: {a: b}\n",
			wantErr: "x.yaml:3: key must be a string, got a map\nx.yaml:3: descriptor has an empty key in domain \"d\""},
		{name: "an alias to a shared rate_limit is followed", yaml: "domain: d\ndescriptors:\n  - key: a\n    rate_limit: &rl {unit: second, requests_per_unit: 1}\n  - key: b\n    rate_limit: *rl\n"},
		{name: "the same value under two keys is no duplicate", yaml: "domain: d\ndescriptors:\n  - {key: a, value: x}\n  - {key: b, value: x}\n"},
		{name: "a key with and without a value is no duplicate", yaml: "domain: d\ndescriptors:\n  - {key: a, value: x}\n  - {key: a}\n"},
		{name: "the same wildcard twice is a duplicate", yaml: "domain: d\ndescriptors:\n  - {key: a, value: x*}\n  - {key: a, value: x*}\n",
			wantErr: `x.yaml:4: duplicate descriptor key_value "a_x*" in domain "d"`},
		{name: "the same descriptor at two levels is no duplicate", yaml: "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: a\n"},
		{name: "an alias to an ancestor is stopped", yaml: "domain: d\ndescriptors: &l\n  - key: a\n    descriptors: *l\n",
			wantErr: "x.yaml:2: descriptors nested more than 64 levels deep"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, err := Parse("x.yaml", []byte(tt.yaml))
			if tt.wantErr == "" {
				if err != nil || d == nil {
					t.Fatalf("got %v, want a valid domain", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("got no error, want %q", tt.wantErr)
			}
			if got := err.Error(); got != tt.wantErr {
				t.Errorf("got %q, want %q", got, tt.wantErr)
			}
		})
	}
}

func TestNewRejectsDuplicateDomains(t *testing.T) {
	t.Parallel()
	a, _ := Parse("a.yaml", []byte("domain: shared\n"))
	b, _ := Parse("b.yaml", []byte("# again\ndomain: shared\n"))
	c, _ := Parse("c.yaml", []byte("domain: other\n"))
	if _, err := New(a, c); err != nil {
		t.Errorf("two domains: got %v, want no error", err)
	}
	_, err := New(a, c, b)
	if got, want := errString(err), `b.yaml:2: duplicate domain "shared", already defined in a.yaml:1`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// writeFiles creates files (name → content) under dir; content "->target"
// makes a symbolic link to target instead.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(content, "->"); ok {
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLoadDirectory(t *testing.T) {
	t.Parallel()
	const (
		mongo   = "domain: mongo_cps\ndescriptors:\n  - {key: database, value: users, rate_limit: {unit: second, requests_per_unit: 500}}\n"
		msg     = "domain: messaging\ndescriptors:\n  - {key: to_number, rate_limit: {unit: day, requests_per_unit: 100}}\n"
		broken  = "domain: [this is not valid\n"
		another = "domain: another\n"
	)
	tests := []struct {
		name        string
		files       map[string]string
		wantDomains string
		wantErr     string // a substring; "" for success
	}{
		{name: "an empty directory is an empty config", files: map[string]string{}, wantDomains: ""},
		{name: "yaml and yml files load, other files are ignored",
			files:       map[string]string{"a.yaml": mongo, "b.YML": msg, "README.md": "# docs", "c.json": "{}"},
			wantDomains: "messaging,mongo_cps"},
		{name: "dotfiles and dot-directories are ignored",
			files:       map[string]string{"a.yaml": mongo, ".b.yaml": broken, ".git/c.yaml": broken, ".#a.yaml": broken},
			wantDomains: "mongo_cps"},
		{name: "subdirectories are loaded",
			files:       map[string]string{"a.yaml": mongo, "team/b.yaml": msg},
			wantDomains: "messaging,mongo_cps"},
		{name: "a Kubernetes ConfigMap volume loads each file once",
			files: map[string]string{
				"..2026_11_21_10_00_00.123/mongo.yaml":     mongo,
				"..2026_11_21_10_00_00.123/messaging.yaml": msg,
				"..2026_11_20_09_00_00.999/mongo.yaml":     broken, // the previous version, still on disk
				"..data":                                   "->..2026_11_21_10_00_00.123",
				"mongo.yaml":                               "->..data/mongo.yaml",
				"messaging.yaml":                           "->..data/messaging.yaml",
			},
			wantDomains: "messaging,mongo_cps"},
		{name: "a file reached through two links loads once",
			files:       map[string]string{"real/a.yaml": mongo, "link.yaml": "->real/a.yaml", "dirlink": "->real"},
			wantDomains: "mongo_cps"},
		{name: "a link to the directory itself does not loop",
			files:       map[string]string{"a.yaml": mongo, "loop": "->."},
			wantDomains: "mongo_cps"},
		{name: "a dangling link to something else is ignored",
			files:       map[string]string{"a.yaml": mongo, "gone": "->nowhere"},
			wantDomains: "mongo_cps"},
		{name: "a dangling link to a yaml file is an error",
			files:   map[string]string{"a.yaml": mongo, "gone.yaml": "->nowhere.yaml"},
			wantErr: "gone.yaml: no such file or directory"},
		{name: "a duplicate domain across files is reported against the later file",
			files:   map[string]string{"a.yaml": mongo, "b.yaml": "# the same\n" + mongo},
			wantErr: `b.yaml:2: duplicate domain "mongo_cps", already defined in `},
		{name: "problems in several files are all reported",
			files:   map[string]string{"a.yaml": "domain: a\nx: 1\n", "b.yaml": "domain: b\ny: 1\n", "c.yaml": another},
			wantErr: "a.yaml:2: unknown field \"x\" in the domain file, must be one of domain, descriptors\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			writeFiles(t, dir, tt.files)
			c, err := Load(dir)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tt.wantErr)
				}
				if strings.Contains(tt.name, "several") && strings.Count(err.Error(), "\n") != 1 {
					t.Errorf("got %q, want two problems", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("got %v, want no error", err)
			}
			if got := strings.Join(c.Domains(), ","); got != tt.wantDomains {
				t.Errorf("domains: got %q, want %q", got, tt.wantDomains)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	t.Run("a missing path is an fs error", func(t *testing.T) {
		_, err := Load("testdata/does-not-exist")
		if !errors.Is(err, os.ErrNotExist) {
			t.Errorf("got %v, want os.ErrNotExist", err)
		}
	})
	t.Run("a duplicate domain in the dupdomain fixture names both files", func(t *testing.T) {
		_, err := Load("testdata/dupdomain")
		want := `testdata/dupdomain/b.yaml:2: duplicate domain "shared", already defined in testdata/dupdomain/a.yaml:1`
		if got := errString(err); got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	})
}

func TestExampleConfigsLoad(t *testing.T) {
	t.Parallel()
	c, err := Load("../examples/config")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"edge_proxy", "messaging", "mongo_cps"} {
		if c.Domain(d) == nil {
			t.Errorf("domain %s: got none, want it loaded", d)
		}
	}
	tests := []struct {
		name    string
		domain  string
		entries []Entry
		wantKey string
	}{
		{name: "mongo_cps limits the users database", domain: "mongo_cps",
			entries: entries("database", "users"), wantKey: "mongo_cps.database_users"},
		{name: "messaging limits marketing per number", domain: "messaging",
			entries: entries("message_type", "marketing", "to_number", "2061111111"), wantKey: "messaging.message_type_marketing.to_number"},
		{name: "the edge proxy limits any client address", domain: "edge_proxy",
			entries: entries("remote_address", "203.0.113.9"), wantKey: "edge_proxy.remote_address"},
		{name: "the edge proxy allow-lists its health checker", domain: "edge_proxy",
			entries: entries("remote_address", "10.0.0.10"), wantKey: "edge_proxy.remote_address_10.0.0.10"},
		{name: "the edge proxy limits the API by path prefix", domain: "edge_proxy",
			entries: entries("remote_address", "203.0.113.9", "path", "/api/v1/orders"), wantKey: "edge_proxy.remote_address.path_/api/*"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := c.Match(tt.domain, tt.entries)
			if r == nil || r.StatsKey != tt.wantKey {
				t.Errorf("got %v, want %s", r, tt.wantKey)
			}
		})
	}
	if r := c.Match("edge_proxy", entries("remote_address", "10.0.0.10")); r == nil || !r.Unlimited {
		t.Errorf("health checker: got %v, want unlimited", r)
	}
}

func TestMergeKeysAndIgnoredFields(t *testing.T) {
	t.Parallel()
	c := configOf(t, `
domain: d
descriptors:
  - key: a
    rate_limit: &rl {unit: minute, requests_per_unit: 1, name: base}
  - key: b
    unit: second
    rate_limit:
      <<: *rl
      requests_per_unit: 2
`)
	r := c.Match("d", entries("b", "x"))
	if r == nil || r.RequestsPerUnit != 2 || r.Unit != window.Minute || r.Name != "base" {
		t.Fatalf("got %+v, want 2 per minute named base (merged, own field winning)", r)
	}
}
