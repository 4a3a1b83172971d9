package adaptive

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestGoodConfigsLoad(t *testing.T) {
	t.Parallel()
	f64 := func(v float64) *float64 { return &v }
	tests := []struct {
		file  string
		check func(t *testing.T, c Config)
	}{
		{file: "good_empty.yaml", check: func(t *testing.T, c Config) {
			if !configEqual(c, DefaultConfig()) {
				t.Errorf("got %+v, want the defaults", c)
			}
		}},
		{file: "good_partial.yaml", check: func(t *testing.T, c Config) {
			want := DefaultConfig()
			want.MaxRate = 120
			want.Window = 30 * time.Second
			if !configEqual(c, want) {
				t.Errorf("got %+v, want %+v", c, want)
			}
		}},
		{file: "good_full.yaml", check: func(t *testing.T, c Config) {
			if c.Params != (Params{MinValue: 200, MaxValue: 10000, MaxRate: 600, MinRate: 10, Curve: Inverse}) {
				t.Errorf("got params %+v", c.Params)
			}
			if c.Window != 2*time.Minute || c.MaxKeys != 500 || c.MinSamples != 5 || !c.PerClient ||
				c.ClientHeader != "X-Client-Id" || !c.DryRun || !c.Headers {
				t.Errorf("got %+v", c)
			}
			if c.CountMetricName != "shop.request.count" || c.ValueMetricName != "shop.request.avg" {
				t.Errorf("got metric names %q, %q", c.CountMetricName, c.ValueMetricName)
			}
			if strings.Join(c.Routes, " ") != "/users/{id} /files/{path...}" {
				t.Errorf("got routes %q", c.Routes)
			}
			if c.Rules.HTML.MaxRate == nil || *c.Rules.HTML.MaxRate != 300 {
				t.Errorf("got html rule %+v, want maxRate 300", c.Rules.HTML)
			}
			a := c.Rules.Asset
			if a.MinValue == nil || *a.MinValue != *f64(100) || a.Curve == nil || *a.Curve != Linear {
				t.Errorf("got asset rule %+v", a)
			}
			if strings.Join(a.Contains, " ") != "/api/ /static/" || strings.Join(a.Suffixes, " ") != ".js .css" {
				t.Errorf("got asset patterns %q %q", a.Contains, a.Suffixes)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file+" loads", func(t *testing.T) {
			c, err := LoadConfig(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatalf("LoadConfig: %v", err)
			}
			tt.check(t, c)
		})
	}
}

func TestBadConfigsAreRejectedWithFileLineAndField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file string
		want []string // each must appear in the error
	}{
		{file: "bad_unknown_key.yaml", want: []string{`bad_unknown_key.yaml:2: unknown field "maxrate"`}},
		{file: "bad_min_over_max.yaml", want: []string{"bad_min_over_max.yaml:1: minValue: minValue 20000 must be less than maxValue 18000"}},
		{file: "bad_rates.yaml", want: []string{"bad_rates.yaml:2: minRate: minRate 20 must not exceed maxRate 10"}},
		{file: "bad_negative.yaml", want: []string{
			"bad_negative.yaml:1: minRate: invalid value -1, must be >= 0",
			"bad_negative.yaml:2: maxKeys: invalid value -5, must be >= 1",
		}},
		{file: "bad_duration.yaml", want: []string{`bad_duration.yaml:1: window: invalid duration "sixty"`}},
		{file: "bad_type.yaml", want: []string{
			`bad_type.yaml:1: maxRate: invalid number "lots"`,
			`bad_type.yaml:2: dryRun: invalid boolean "maybe"`,
		}},
		{file: "bad_rule.yaml", want: []string{
			`bad_rule.yaml:5: rules: unknown rule "images", must be html or asset`,
		}},
		{file: "bad_route.yaml", want: []string{`bad_route.yaml:1: routes: route "/users/{id": bad segment`}},
		{file: "bad_html_patterns.yaml", want: []string{"bad_html_patterns.yaml:3: rules.html.suffixes: only the asset rule takes patterns"}},
		{file: "bad_inverse_zero.yaml", want: []string{"bad_inverse_zero.yaml:1: curve: the inverse curve needs minRate > 0"}},
		{file: "bad_metric_name.yaml", want: []string{`bad_metric_name.yaml:1: countMetricName: invalid metric name "request count"`}},
		{file: "bad_duplicate.yaml", want: []string{"bad_duplicate.yaml:2: maxRate: duplicate key"}},
		{file: "bad_syntax.yaml", want: []string{"bad_syntax.yaml:"}},
	}
	for _, tt := range tests {
		t.Run(tt.file+" is rejected", func(t *testing.T) {
			_, err := LoadConfig(filepath.Join("testdata", tt.file))
			if err == nil {
				t.Fatal("LoadConfig succeeded, want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("got error %q, want it to contain %q", err, w)
				}
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Errorf("got %T, want a *FieldError inside", err)
			}
		})
	}
}

func TestRuleParametersAreCheckedWithTheValuesTheyInherit(t *testing.T) {
	t.Parallel()
	_, err := ParseConfig("x.yaml", []byte("rules:\n  asset:\n    maxRate: 2\n    minRate: 3\n"))
	if err == nil || !strings.Contains(err.Error(), "x.yaml:4: rules.asset.minRate: minRate 3 must not exceed maxRate 2") {
		t.Errorf("got %v, want the asset rule's minRate named at line 4", err)
	}
	_, err = ParseConfig("x.yaml", []byte("rules:\n  html:\n    minValue: 19000\n"))
	if err == nil || !strings.Contains(err.Error(), "x.yaml:3: rules.html.minValue: minValue 19000 must be less than maxValue 18000") {
		t.Errorf("got %v, want the html rule's minValue named at line 3", err)
	}
}

func TestTheExampleConfigLoads(t *testing.T) {
	t.Parallel()
	c, err := LoadConfig("../examples/adaptive/adaptive.yaml")
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	if _, err := New(c, Options{}); err != nil {
		t.Fatalf("New: %v", err)
	}
	if c.MinSamples != 10 || !c.Headers || len(c.Routes) != 3 {
		t.Errorf("got %+v", c)
	}
}

func TestLoadConfigReportsAMissingFile(t *testing.T) {
	t.Parallel()
	_, err := LoadConfig(filepath.Join(t.TempDir(), "nope.yaml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("got %v, want os.ErrNotExist", err)
	}
}

func TestValidateRejectsAConfigBuiltInCode(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	c.Window = time.Millisecond
	c.MaxRate = 0
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "window: invalid duration 1ms") || !strings.Contains(err.Error(), "maxRate: invalid value 0") {
		t.Errorf("got %v, want window and maxRate errors", err)
	}
	if _, err := New(c, Options{}); err == nil {
		t.Error("New accepted an invalid config")
	}
}

func FuzzParseConfig(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig("fuzz.yaml", data)
		if err != nil {
			return
		}
		// Whatever parses is valid and builds a limiter.
		if err := c.Validate(); err != nil {
			t.Fatalf("ParseConfig accepted an invalid config: %v", err)
		}
		if _, err := New(c, Options{}); err != nil {
			t.Fatalf("New rejected a parsed config: %v", err)
		}
	})
}

func configEqual(a, b Config) bool {
	return a.Params == b.Params && a.CountMetricName == b.CountMetricName && a.ValueMetricName == b.ValueMetricName &&
		a.Window == b.Window && a.MaxKeys == b.MaxKeys && a.MinSamples == b.MinSamples && a.PerClient == b.PerClient &&
		a.ClientHeader == b.ClientHeader && a.DryRun == b.DryRun && a.Headers == b.Headers &&
		strings.Join(a.Routes, " ") == strings.Join(b.Routes, " ") &&
		strings.Join(a.Rules.Asset.Contains, " ") == strings.Join(b.Rules.Asset.Contains, " ") &&
		strings.Join(a.Rules.Asset.Suffixes, " ") == strings.Join(b.Rules.Asset.Suffixes, " ") &&
		a.Rules.HTML.MaxRate == nil && b.Rules.HTML.MaxRate == nil
}
