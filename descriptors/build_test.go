package descriptors

import (
	"fmt"
	"strings"
	"testing"
)

// TestBuildMatchesParse builds domains from Go values and parses the
// equivalent YAML: both must give the same rules, keys and matches.
func TestBuildMatchesParse(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		domain  string
		nodes   []Node
		entries [][]Entry // requests whose matches must agree
	}{
		{
			name: "a nested tree with every flag builds the rules a file gives",
			yaml: `domain: shop
descriptors:
  - key: path
    value: "/api/*"
    share_threshold: true
    value_to_metric: true
    rate_limit: {unit: MINUTE, requests_per_unit: 10, name: api}
  - key: user
    detailed_metric: true
    quota_mode: true
    rate_limit: {unit: second, requests_per_unit: 5}
    descriptors:
      - key: plan
        value: gold
        shadow_mode: true
        rate_limit: {unit: hour, requests_per_unit: 100, replaces: [{name: api}]}
      - key: plan
        rate_limit: {unlimited: true}
  - key: empty
`,
			domain: "shop",
			nodes: []Node{
				{Key: "path", Value: "/api/*", ShareThreshold: true, ValueToMetric: true,
					RateLimit: &RateLimit{Unit: "MINUTE", RequestsPerUnit: 10, Name: "api"}},
				{Key: "user", DetailedMetric: true, QuotaMode: true,
					RateLimit: &RateLimit{Unit: "second", RequestsPerUnit: 5},
					Descriptors: []Node{
						{Key: "plan", Value: "gold", ShadowMode: true,
							RateLimit: &RateLimit{Unit: "hour", RequestsPerUnit: 100, Replaces: []string{"api"}}},
						{Key: "plan", RateLimit: &RateLimit{Unlimited: true}},
					}},
				{Key: "empty"},
			},
			entries: [][]Entry{
				{{Key: "path", Value: "/api/x"}},
				{{Key: "path", Value: "/web"}},
				{{Key: "user", Value: "u1"}},
				{{Key: "user", Value: "u1"}, {Key: "plan", Value: "gold"}},
				{{Key: "user", Value: "u1"}, {Key: "plan", Value: "free"}},
				{{Key: "empty", Value: "x"}},
			},
		},
		{
			name:   "a domain without descriptors builds an empty domain",
			yaml:   "domain: nothing\n",
			domain: "nothing",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parsed, err := Parse("test.yaml", []byte(tt.yaml))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			built, err := Build("test", tt.domain, tt.nodes)
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			pc, _ := New(parsed)
			bc, _ := New(built)
			if got, want := bc.String(), pc.String(); got != want {
				t.Errorf("rules: got\n%s\nwant\n%s", got, want)
			}
			for _, e := range tt.entries {
				pr, br := pc.Match(tt.domain, e), bc.Match(tt.domain, e)
				if (pr == nil) != (br == nil) {
					t.Errorf("Match(%v): got rule %v, want %v", e, br, pr)
					continue
				}
				if pr == nil {
					continue
				}
				if got, want := br.StatsKey, pr.StatsKey; got != want {
					t.Errorf("Match(%v).StatsKey: got %q, want %q", e, got, want)
				}
				if got, want := br.CacheKey(e), pr.CacheKey(e); got != want {
					t.Errorf("Match(%v).CacheKey: got %q, want %q", e, got, want)
				}
				if got, want := br.MetricKey(e), pr.MetricKey(e); got != want {
					t.Errorf("Match(%v).MetricKey: got %q, want %q", e, got, want)
				}
				if got, want := strings.Join(br.Replaces, ","), strings.Join(pr.Replaces, ","); got != want {
					t.Errorf("Match(%v).Replaces: got %q, want %q", e, got, want)
				}
				if br.File != "test" || br.Line != 0 {
					t.Errorf("Match(%v): got File %q Line %d, want test and 0", e, br.File, br.Line)
				}
			}
		})
	}
}

// TestBuildRejects checks that Build refuses what Parse refuses, with
// the problem's path.
func TestBuildRejects(t *testing.T) {
	tests := []struct {
		name    string
		domain  string
		nodes   []Node
		wantErr []string
	}{
		{
			name:    "an empty domain is refused",
			nodes:   []Node{{Key: "a"}},
			wantErr: []string{"src: domain: empty domain"},
		},
		{
			name:    "an empty key is refused",
			domain:  "d",
			nodes:   []Node{{Key: "a"}, {Value: "v"}},
			wantErr: []string{`src: descriptors[1]: descriptor has an empty key in domain "d"`},
		},
		{
			name:   "a duplicate key and value at one level is refused",
			domain: "d",
			nodes: []Node{{Key: "a", Descriptors: []Node{
				{Key: "b", Value: "1"}, {Key: "b", Value: "1"}}}},
			wantErr: []string{`src: descriptors[0].descriptors[1]: duplicate descriptor key_value "a.b_1" in domain "d"`},
		},
		{
			name:    "a limit without a unit is refused",
			domain:  "d",
			nodes:   []Node{{Key: "a", RateLimit: &RateLimit{RequestsPerUnit: 1}}},
			wantErr: []string{"src: descriptors[0].rate_limit: rate_limit needs a unit"},
		},
		{
			name:    "an unknown unit is refused",
			domain:  "d",
			nodes:   []Node{{Key: "a", RateLimit: &RateLimit{Unit: "fortnight", RequestsPerUnit: 1}}},
			wantErr: []string{`src: descriptors[0].rate_limit.unit: invalid rate limit unit "fortnight"`},
		},
		{
			name:    "a unit with unlimited is refused",
			domain:  "d",
			nodes:   []Node{{Key: "a", RateLimit: &RateLimit{Unit: "second", Unlimited: true}}},
			wantErr: []string{`should not specify rate limit unit "second" when unlimited is true`},
		},
		{
			name:    "share_threshold without a wildcard is refused",
			domain:  "d",
			nodes:   []Node{{Key: "a", Value: "x", ShareThreshold: true}},
			wantErr: []string{"descriptors[0].share_threshold: share_threshold: true needs a wildcard"},
		},
		{
			name:   "empty and self replaces are both reported",
			domain: "d",
			nodes: []Node{{Key: "a", RateLimit: &RateLimit{Unit: "second", Name: "me",
				Replaces: []string{"", "me"}}}},
			wantErr: []string{
				"descriptors[0].rate_limit.replaces[0]: a replaces entry has an empty name",
				`descriptors[0].rate_limit.replaces[1]: rule "me" replaces itself`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Build("src", tt.domain, tt.nodes)
			if err == nil {
				t.Fatalf("got domain %v, want an error", d)
			}
			list, ok := err.(ErrorList)
			if !ok {
				t.Fatalf("got error %T, want ErrorList", err)
			}
			if got, want := len(list), len(tt.wantErr); got != want {
				t.Fatalf("got %d errors (%v), want %d", got, err, want)
			}
			for i, want := range tt.wantErr {
				if got := list[i].Error(); !strings.Contains(got, want) {
					t.Errorf("error %d: got %q, want it to contain %q", i, got, want)
				}
			}
		})
	}
}

func ExampleBuild() {
	d, err := Build("example", "mongo_cps", []Node{{
		Key: "database", Value: "users",
		RateLimit: &RateLimit{Unit: "second", RequestsPerUnit: 500},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg, _ := New(d)
	fmt.Println(cfg.Match("mongo_cps", []Entry{{Key: "database", Value: "users"}}))
	// Output:
	// mongo_cps.database_users: unit=SECOND requests_per_unit=500, shadow_mode: false, quota_mode: false
}
