package descriptors

import (
	"strings"
	"testing"
)

func TestLoadMergesDomains(t *testing.T) {
	t.Parallel()
	const (
		a = "domain: d\ndescriptors:\n" +
			"  - {key: k1, value: v1, rate_limit: {unit: minute, requests_per_unit: 10}}\n" +
			"  - {key: w, value: \"a*\", rate_limit: {unit: minute, requests_per_unit: 1}}\n"
		b = "domain: d\ndescriptors:\n" +
			"  - {key: k2, value: v2, rate_limit: {unit: minute, requests_per_unit: 20}}\n" +
			"  - {key: w, value: \"ab*\", rate_limit: {unit: minute, requests_per_unit: 2}}\n" +
			"  - {key: w, rate_limit: {unit: minute, requests_per_unit: 3}}\n"
		sameKey = "domain: d\ndescriptors:\n" +
			"  - key: other\n" +
			"  - key: k1\n    value: v1\n    descriptors:\n      - {key: sub, rate_limit: {unit: second, requests_per_unit: 5}}\n"
		empty = "domain: d\ndescriptors:\n"
		other = "domain: e\ndescriptors:\n  - {key: k1, value: v1, rate_limit: {unit: hour, requests_per_unit: 7}}\n"
	)
	type lookup struct {
		kv   []string
		want uint32 // requests_per_unit; 0 for no rule
	}
	tests := []struct {
		name    string
		files   map[string]string
		merge   bool
		lookups []lookup
		wantErr string // a substring; "" for success
	}{
		{name: "without merging a domain in two files is an error",
			files:   map[string]string{"a.yaml": a, "b.yaml": b},
			wantErr: `b.yaml:1: duplicate domain "d", already defined in`},
		{name: "merging joins the top-level descriptors of both files",
			files: map[string]string{"a.yaml": a, "b.yaml": b}, merge: true,
			lookups: []lookup{
				{kv: []string{"k1", "v1"}, want: 10},
				{kv: []string{"k2", "v2"}, want: 20},
				{kv: []string{"w", "zzz"}, want: 3},
			}},
		{name: "merged wildcards keep file order, the earlier file's first",
			files: map[string]string{"a.yaml": a, "b.yaml": b}, merge: true,
			lookups: []lookup{{kv: []string{"w", "abc"}, want: 1}}},
		{name: "files are merged in name order",
			files: map[string]string{"b.yaml": a, "a.yaml": b}, merge: true,
			lookups: []lookup{{kv: []string{"w", "abc"}, want: 2}}},
		{name: "a file with no descriptors merges into nothing",
			files: map[string]string{"a.yaml": a, "b.yaml": empty}, merge: true,
			lookups: []lookup{{kv: []string{"k1", "v1"}, want: 10}}},
		{name: "other domains are untouched",
			files: map[string]string{"a.yaml": a, "b.yaml": b, "c.yaml": other}, merge: true,
			lookups: []lookup{{kv: []string{"k1", "v1"}, want: 10}}},
		{name: "the same top-level key and value in two merged files is an error in the later file",
			files: map[string]string{"a.yaml": a, "b.yaml": sameKey}, merge: true,
			wantErr: `b.yaml:7: duplicate descriptor key_value "k1_v1" in domain "d", already defined in`},
		{name: "the same top-level key without value in two merged files is an error",
			files: map[string]string{"a.yaml": b, "b.yaml": b}, merge: true,
			wantErr: `duplicate descriptor key "w" in domain "d"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			writeFiles(t, dir, tt.files)
			c, err := LoadWith(dir, LoadOptions{MergeDomains: tt.merge})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %s, want one containing %q", errString(err), tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			for _, l := range tt.lookups {
				var got uint32
				if r := c.Match("d", entries(l.kv...)); r != nil {
					got = r.RequestsPerUnit
				}
				if got != l.want {
					t.Errorf("%v: got requests_per_unit %d, want %d", l.kv, got, l.want)
				}
			}
		})
	}
}

func TestMergedDomainListsEveryRuleOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"a.yaml": "domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: second, requests_per_unit: 1}}\n",
		"b.yaml": "domain: d\ndescriptors:\n  - key: b\n    descriptors:\n      - {key: c, rate_limit: {unit: second, requests_per_unit: 2}}\n",
	})
	c, err := LoadWith(dir, LoadOptions{MergeDomains: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range c.Rules() {
		got = append(got, r.StatsKey)
	}
	if want := "d.a d.b.c"; strings.Join(got, " ") != want {
		t.Fatalf("got rules %q, want %q", strings.Join(got, " "), want)
	}
}

func TestLoadDotFiles(t *testing.T) {
	t.Parallel()
	const (
		mongo = "domain: mongo_cps\ndescriptors:\n  - {key: database, value: users, rate_limit: {unit: second, requests_per_unit: 500}}\n"
		msg   = "domain: messaging\ndescriptors:\n  - {key: to_number, rate_limit: {unit: day, requests_per_unit: 100}}\n"
	)
	tests := []struct {
		name        string
		files       map[string]string
		dotFiles    bool
		wantDomains string
	}{
		{name: "dotfiles are skipped by default",
			files: map[string]string{"a.yaml": mongo, ".b.yaml": msg, ".team/c.yaml": msg}, wantDomains: "mongo_cps"},
		{name: "dotfiles load when asked",
			files: map[string]string{"a.yaml": mongo, ".b.yaml": msg}, dotFiles: true, wantDomains: "messaging,mongo_cps"},
		{name: "dot-directories load when asked",
			files: map[string]string{"a.yaml": mongo, ".team/c.yaml": msg}, dotFiles: true, wantDomains: "messaging,mongo_cps"},
		{name: "a Kubernetes ConfigMap volume still loads each file once with dotfiles",
			files: map[string]string{
				"..2026_11_21_10_00_00.123/mongo.yaml": mongo,
				"..data":                               "->..2026_11_21_10_00_00.123",
				"mongo.yaml":                           "->..data/mongo.yaml",
			},
			dotFiles: true, wantDomains: "mongo_cps"},
		{name: "an editor's dangling lock link is skipped with dotfiles",
			files: map[string]string{"a.yaml": mongo, ".#a.yaml": "->user@host.1234"}, dotFiles: true, wantDomains: "mongo_cps"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			writeFiles(t, dir, tt.files)
			c, err := LoadWith(dir, LoadOptions{DotFiles: tt.dotFiles})
			if err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			if got := strings.Join(c.Domains(), ","); got != tt.wantDomains {
				t.Fatalf("got domains %q, want %q", got, tt.wantDomains)
			}
		})
	}
}
