package limits

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/internal/yamlconf"
)

// parseFixture parses testdata/file with ParseDefaults when its name says
// "defaults", else with ParseOverrides.
func parseFixture(t *testing.T, file string) (*Defaults, *Overrides, error) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(file, "defaults") {
		d, err := ParseDefaults(file, data)
		return d, nil, err
	}
	o, err := ParseOverrides(file, data)
	return nil, o, err
}

func TestGoodFilesLoad(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file string
		want int // defaults or overrides found
	}{
		{file: "good_defaults.yaml", want: 2},
		{file: "good_overrides_list.yaml", want: 4},
		{file: "good_overrides_map.yaml", want: 2},
		{file: "good_newfoos_map.yaml", want: 1},
		{file: "good_newfoos_list.yaml", want: 1},
		{file: "good_overrides_every_format.yaml", want: 12},
		{file: "good_overrides_map_older_formats.yaml", want: 3},
		{file: "good_overrides_empty.yaml", want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.file+" loads", func(t *testing.T) {
			t.Parallel()
			d, o, err := parseFixture(t, tt.file)
			if err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			got := d.Len() + o.Len()
			if got != tt.want {
				t.Errorf("got %d entries, want %d", got, tt.want)
			}
		})
	}
}

func TestEveryGoodFixtureIsTested(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob("testdata/good_*.yaml")
	if len(files) != 8 {
		t.Errorf("got %d good_*.yaml fixtures, want 8: add the new one to TestGoodFilesLoad", len(files))
	}
}

func TestSeedFilesGiveTheSeedsLimits(t *testing.T) {
	t.Parallel()
	d, _, err := parseFixture(t, "good_defaults.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, list, err := parseFixture(t, "good_overrides_list.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, old, err := parseFixture(t, "good_overrides_map.yaml")
	if err != nil {
		t.Fatal(err)
	}
	wantDefaults := []Default{
		{Name: mustName(t, NewRegistrationsPerIPAddress), Limit: gcra.Limit{Burst: 20, Count: 20, Period: time.Second}, File: "good_defaults.yaml", Line: 1},
		{Name: mustName(t, NewOrdersPerAccount), Limit: gcra.Limit{Burst: 300, Count: 300, Period: 180 * time.Minute}, File: "good_defaults.yaml", Line: 5},
	}
	got := d.All()
	if len(got) != len(wantDefaults) {
		t.Fatalf("got %d defaults, want %d", len(got), len(wantDefaults))
	}
	for i := range got {
		if got[i] != wantDefaults[i] {
			t.Errorf("default %d: got %+v, want %+v", i, got[i], wantDefaults[i])
		}
	}
	wantList := map[string]gcra.Limit{
		"1:10.0.0.2": {Burst: 20, Count: 40, Period: time.Second},
		"1:10.0.0.5": {Burst: 20, Count: 40, Period: time.Second},
		"3:12345678": {Burst: 300, Count: 600, Period: 180 * time.Minute},
		"3:87654321": {Burst: 300, Count: 600, Period: 180 * time.Minute},
	}
	for _, o := range list.All() {
		if want, ok := wantList[o.Key]; !ok || o.Limit != want {
			t.Errorf("list form: got %s → %+v, want %+v", o.Key, o.Limit, want)
		}
	}
	// The older map form says the same as the first id of each entry.
	for _, o := range old.All() {
		if want, ok := wantList[o.Key]; !ok || o.Limit != want {
			t.Errorf("map form: got %s → %+v, want %+v", o.Key, o.Limit, want)
		}
	}
}

func mustName(t *testing.T, s string) Name {
	t.Helper()
	n, err := ParseName(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestOverrideIDsKeepComments(t *testing.T) {
	t.Parallel()
	_, o, err := parseFixture(t, "good_overrides_every_format.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"1:2001:db8::ff00:42:8329":                           "canonical IPv6",
		"4:87654321:www.example.com":                         "one domain of an account",
		"5:2001:db8:eeee:eeee::/64":                          "",
		"5:192.168.1.0/32":                                   "",
		"100:12345678:" + setHash("example.com,example.org"): "",
	}
	got := map[string]string{}
	for _, ov := range o.All() {
		got[ov.Key] = ov.Comment
	}
	for key, comment := range want {
		c, ok := got[key]
		if !ok {
			t.Errorf("got no override with key %s, want one", key)
			continue
		}
		if c != comment {
			t.Errorf("override %s: got comment %q, want %q", key, c, comment)
		}
	}
}

func TestBadFilesReportFileLineAndReason(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file     string
		sentinel error
		want     []string // one per error, in order
	}{
		{file: "bad_defaults_zero_burst.yaml", sentinel: ErrInvalidLimit,
			want: []string{"bad_defaults_zero_burst.yaml:6: invalid burst 0 for NewOrdersPerAccount, must be > 0"}},
		{file: "bad_defaults_negative_count.yaml", sentinel: ErrInvalidLimit,
			want: []string{"bad_defaults_negative_count.yaml:3: invalid count -5 for NewOrdersPerAccount, must be > 0"}},
		{file: "bad_defaults_zero_period.yaml", sentinel: ErrInvalidLimit,
			want: []string{"bad_defaults_zero_period.yaml:4: invalid period 0s for NewOrdersPerAccount, must be > 0"}},
		{file: "bad_defaults_tiny_emission_interval.yaml", sentinel: ErrInvalidLimit,
			want: []string{"bad_defaults_tiny_emission_interval.yaml:4: invalid period 1µs for NewOrdersPerAccount with count 2000, the emission interval period/count must be at least 1ns"}},
		{file: "bad_defaults_fill_time_too_long.yaml", sentinel: ErrInvalidLimit,
			want: []string{
				"bad_defaults_fill_time_too_long.yaml:7: invalid burst 1 for NewRegistrationsPerIPAddress with count 1 and period 2500000h0m0s: an empty bucket would take more than 876000h0m0s (100 years) to fill",
				"bad_defaults_fill_time_too_long.yaml:12: invalid burst 9223372036854775807 for CertificatesPerDomain with count 1 and period 1s: an empty bucket would take more than 876000h0m0s (100 years) to fill",
			}},
		{file: "bad_overrides_fill_time_too_long.yaml", sentinel: ErrInvalidLimit,
			want: []string{"bad_overrides_fill_time_too_long.yaml:2: invalid burst 1000000 for NewOrdersPerAccount with count 1 and period 1000h0m0s: an empty bucket would take more than 876000h0m0s (100 years) to fill"}},
		{file: "bad_defaults_unknown_key.yaml", sentinel: ErrSyntax,
			want: []string{`bad_defaults_unknown_key.yaml:5: unknown key "brust" in NewOrdersPerAccount, want burst, count and period`}},
		{file: "bad_defaults_unknown_name.yaml", sentinel: ErrUnknownName,
			want: []string{`bad_defaults_unknown_name.yaml:5: unknown limit name "NewOrdersPerPlanet"`}},
		{file: "bad_defaults_duplicate_key.yaml", sentinel: ErrDuplicate,
			want: []string{`bad_defaults_duplicate_key.yaml:5: duplicate key "NewOrdersPerAccount" in defaults, first at line 1`}},
		{file: "bad_defaults_missing_field.yaml", sentinel: ErrSyntax,
			want: []string{"bad_defaults_missing_field.yaml:2: missing count for NewOrdersPerAccount"}},
		{file: "bad_defaults_not_a_map.yaml", sentinel: ErrSyntax,
			want: []string{"bad_defaults_not_a_map.yaml:1: defaults must be a map from limit name to {burst, count, period}, got a list"}},
		{file: "bad_defaults_many_errors.yaml", sentinel: ErrInvalidLimit,
			want: []string{
				"bad_defaults_many_errors.yaml:2: invalid burst 0 for NewOrdersPerAccount, must be > 0",
				"bad_defaults_many_errors.yaml:3: invalid count -1 for NewOrdersPerAccount, must be > 0",
				`bad_defaults_many_errors.yaml:4: invalid period "soon" for NewOrdersPerAccount, must be a duration such as 1s or 180m`,
				`bad_defaults_many_errors.yaml:5: unknown limit name "Bogus"`,
				"bad_defaults_many_errors.yaml:10: missing period for CertificatesPerDomain",
			}},
		{file: "bad_overrides_bad_id.yaml", sentinel: ErrInvalidID,
			want: []string{`bad_overrides_bad_id.yaml:7: invalid id "2001:db8::/47" for NewRegistrationsPerIPv6Range: must be a /48 IPv6 range`}},
		{file: "bad_overrides_duplicate_override.yaml", sentinel: ErrDuplicate,
			want: []string{`bad_overrides_duplicate_override.yaml:13: duplicate override for NewOrdersPerAccount id "12345678" (bucket key 3:12345678), first at line 6`}},
		{file: "bad_overrides_duplicate_set.yaml", sentinel: ErrDuplicate,
			want: []string{`bad_overrides_duplicate_set.yaml:7: duplicate override for CertificatesPerFQDNSet id "example.org,example.com"`}},
		{file: "bad_overrides_duplicate_key.yaml", sentinel: ErrDuplicate,
			want: []string{`bad_overrides_duplicate_key.yaml:5: duplicate key "NewOrdersPerAccount:12345678" in overrides, first at line 1`}},
		{file: "bad_overrides_unknown_key.yaml", sentinel: ErrSyntax,
			want: []string{
				"bad_overrides_unknown_key.yaml:2: missing ids for NewOrdersPerAccount",
				`bad_overrides_unknown_key.yaml:5: unknown key "idz" in NewOrdersPerAccount, want burst, count, period and ids`,
			}},
		{file: "bad_overrides_unknown_name.yaml", sentinel: ErrUnknownName,
			want: []string{`bad_overrides_unknown_name.yaml:1: unknown limit name "newOrdersPerAccount"`}},
		{file: "bad_overrides_missing_field.yaml", sentinel: ErrSyntax,
			want: []string{"bad_overrides_missing_field.yaml:2: missing period for NewOrdersPerAccount"}},
		{file: "bad_overrides_not_a_map.yaml", sentinel: ErrSyntax,
			want: []string{`bad_overrides_not_a_map.yaml:1: overrides must be a list of {Name: {burst, count, period, ids}} or a map from 'Name:id' to {burst, count, period}, got "just a string"`}},
		{file: "bad_overrides_map_key_without_id.yaml", sentinel: ErrSyntax,
			want: []string{`bad_overrides_map_key_without_id.yaml:1: override key "NewOrdersPerAccount" must be formatted 'Name:id'`}},
		{file: "bad_overrides_negative_count.yaml", sentinel: ErrInvalidLimit,
			want: []string{"bad_overrides_negative_count.yaml:3: invalid count -600 for NewOrdersPerAccount:12345678, must be > 0"}},
		{file: "bad_overrides_syntax.yaml", sentinel: ErrSyntax,
			want: []string{"bad_overrides_syntax.yaml:2: invalid YAML: did not find expected key"}},
		{file: "bad_overrides_empty_ids.yaml", sentinel: ErrSyntax,
			want: []string{"bad_overrides_empty_ids.yaml:5: ids for NewOrdersPerAccount is empty, want at least one id"}},
		{file: "bad_overrides_fqdnset_empty_element.yaml", sentinel: ErrInvalidID,
			want: []string{`bad_overrides_fqdnset_empty_element.yaml:6: invalid id "example.com,,example.org" for CertificatesPerFQDNSet: element 2 of the set is empty`}},
		{file: "bad_overrides_unquoted_colon_id.yaml", sentinel: ErrSyntax,
			want: []string{`bad_overrides_unquoted_colon_id.yaml:6: id "2001:db8:eeee:eeee::" of CertificatesPerDomain must be quoted`}},
	}
	for _, tt := range tests {
		t.Run(tt.file+" is rejected with its line", func(t *testing.T) {
			t.Parallel()
			d, o, err := parseFixture(t, tt.file)
			if err == nil {
				t.Fatalf("got %d defaults and %d overrides, want an error", d.Len(), o.Len())
			}
			if d != nil || o != nil {
				t.Errorf("got a result alongside the error, want nil")
			}
			var list ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("got %T, want an ErrorList", err)
			}
			if len(list) != len(tt.want) {
				t.Fatalf("got %d errors:\n%v\nwant %d", len(list), err, len(tt.want))
			}
			for i, e := range list {
				if !strings.HasPrefix(e.Error(), tt.want[i]) {
					t.Errorf("error %d: got %q, want it to start with %q", i, e.Error(), tt.want[i])
				}
				if e.File != tt.file || e.Line == 0 {
					t.Errorf("error %d: got file %q line %d, want file %q and a line", i, e.File, e.Line, tt.file)
				}
			}
			if !errors.Is(err, tt.sentinel) {
				t.Errorf("got %v, want it to wrap %v", err, tt.sentinel)
			}
		})
	}
	t.Run("every bad fixture is in this table", func(t *testing.T) {
		files, _ := filepath.Glob("testdata/bad_*.yaml")
		if len(files) != len(tests) {
			t.Errorf("got %d bad_*.yaml fixtures, want %d: assert the new one's errors here", len(files), len(tests))
		}
	})
}

func TestErrorCarriesNameAndID(t *testing.T) {
	t.Parallel()
	_, _, err := parseFixture(t, "bad_overrides_bad_id.yaml")
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("got %T, want an *Error inside", err)
	}
	if e.Name != NewRegistrationsPerIPv6Range || e.ID != "2001:db8::/47" || e.Line != 7 {
		t.Errorf("got name %q id %q line %d, want %q %q 7", e.Name, e.ID, e.Line, NewRegistrationsPerIPv6Range, "2001:db8::/47")
	}
	if !errors.Is(err, ErrInvalidID) {
		t.Errorf("got %v, want it to wrap ErrInvalidID", err)
	}
}

func TestAliasesThatExpandTooFarAreStopped(t *testing.T) {
	t.Parallel()
	// 2000 entries share one list of 2000 ids: 4 million ids to check.
	var b strings.Builder
	b.WriteString("- NewOrdersPerAccount: {burst: 1, count: 1, period: 1s, ids: &i [1")
	for i := 2; i <= 2000; i++ {
		fmt.Fprintf(&b, ",%d", i)
	}
	b.WriteString("]}\n")
	for range 2000 {
		b.WriteString("- NewOrdersPerAccount: {burst: 1, count: 1, period: 1s, ids: *i}\n")
	}
	_, err := ParseOverrides("o.yaml", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "aliases expand to too many nodes") || !errors.Is(err, ErrSyntax) {
		t.Errorf("got %.200v, want a syntax error about aliases", err)
	}
}

func TestErrorsAreAlsoYamlconfErrors(t *testing.T) {
	t.Parallel()
	_, _, err := parseFixture(t, "bad_overrides_bad_id.yaml")
	var e *yamlconf.Error
	if !errors.As(err, &e) {
		t.Fatalf("got %T, want a *yamlconf.Error inside", err)
	}
	if e.File != "bad_overrides_bad_id.yaml" || e.Line != 7 || e.Col != 9 || !strings.HasPrefix(e.Msg, `invalid id "2001:db8::/47"`) {
		t.Errorf("got %+v, want bad_overrides_bad_id.yaml:7:9 and the invalid id", *e)
	}
	if !errors.Is(err, ErrInvalidID) {
		t.Errorf("got %v, want it to still wrap ErrInvalidID", err)
	}
}

func TestParseEdgeCases(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc      string
		overrides bool
		yaml      string
		wantErr   string // "" means it parses
		wantLen   int
	}{
		{desc: "an empty defaults file has no defaults", yaml: ""},
		{desc: "a null defaults file has no defaults", yaml: "~\n"},
		{desc: "an empty overrides file has no overrides", overrides: true, yaml: ""},
		{desc: "a comment-only overrides file has no overrides", overrides: true, yaml: "# nothing\n"},
		{desc: "an empty overrides list has no overrides", overrides: true, yaml: "[]\n"},
		{desc: "a YAML number is an account id", overrides: true, wantLen: 1,
			yaml: "- NewOrdersPerAccount: {burst: 1, count: 1, period: 1s, ids: [12345678]}\n"},
		{desc: "a YAML number with a leading zero is not a canonical account id", overrides: true,
			yaml: "- NewOrdersPerAccount: {burst: 1, count: 1, period: 1s, ids: [0123]}\n", wantErr: `<string>:1: invalid id "0123" for NewOrdersPerAccount: must not have leading zeros`},
		{desc: "an id map without an id is rejected", overrides: true,
			yaml: "- NewOrdersPerAccount: {burst: 1, count: 1, period: 1s, ids: [{comment: x}]}\n", wantErr: "<string>:1: missing id in id of NewOrdersPerAccount"},
		{desc: "an id map with an unknown key is rejected", overrides: true,
			yaml: "- NewOrdersPerAccount: {burst: 1, count: 1, period: 1s, ids: [{id: 1, note: x}]}\n", wantErr: `unknown key "note" in id of NewOrdersPerAccount, want id and comment`},
		{desc: "a null id is an empty id", overrides: true,
			yaml: "- NewOrdersPerAccount: {burst: 1, count: 1, period: 1s, ids: [~]}\n", wantErr: `invalid id "" for NewOrdersPerAccount: must not be empty`},
		{desc: "ids that are not a list are rejected", overrides: true,
			yaml: "- NewOrdersPerAccount: {burst: 1, count: 1, period: 1s, ids: 5}\n", wantErr: `ids for NewOrdersPerAccount must be a list, got "5"`},
		{desc: "the same id twice in one entry is a duplicate", overrides: true,
			yaml: "- NewOrdersPerAccount: {burst: 1, count: 1, period: 1s, ids: [5, '5']}\n", wantErr: `duplicate override for NewOrdersPerAccount id "5"`},
		{desc: "a default that is not a map is rejected",
			yaml: "NewOrdersPerAccount: 5\n", wantErr: `<string>:1: NewOrdersPerAccount must be a map with burst, count and period, got "5"`},
		{desc: "a default with nothing is rejected",
			yaml: "NewOrdersPerAccount:\n", wantErr: `<string>:1: NewOrdersPerAccount must be a map with burst, count and period, got nothing`},
		{desc: "a fractional burst is rejected",
			yaml: "NewOrdersPerAccount: {burst: 1.5, count: 1, period: 1s}\n", wantErr: `invalid burst "1.5" for NewOrdersPerAccount, must be an integer`},
		{desc: "a quoted burst is rejected",
			yaml: "NewOrdersPerAccount: {burst: '1', count: 1, period: 1s}\n", wantErr: `invalid burst "1" for NewOrdersPerAccount, must be an integer`},
		{desc: "a period without a unit is rejected",
			yaml: "NewOrdersPerAccount: {burst: 1, count: 1, period: 60}\n", wantErr: `invalid period "60" for NewOrdersPerAccount, must be a duration`},
		{desc: "a negative period is rejected",
			yaml: "NewOrdersPerAccount: {burst: 1, count: 1, period: -1s}\n", wantErr: "invalid period -1s for NewOrdersPerAccount, must be > 0"},
		{desc: "a burst too big for int64 is rejected",
			yaml: "NewOrdersPerAccount: {burst: 9223372036854775808, count: 1, period: 1s}\n", wantErr: "must be an integer"},
		{desc: "a user-defined name loads as a default", wantLen: 1,
			yaml: "NewFoosPerIPAddress: {burst: 20, count: 20, period: 1s}\n"},
		{desc: "two documents in one file are rejected",
			yaml: "NewOrdersPerAccount: {burst: 1, count: 1, period: 1s}\n---\nNewOrdersPerAccount: {burst: 1, count: 1, period: 1s}\n", wantErr: "<string>:2: a limits file holds one YAML document"},
		{desc: "an alias of a limit is followed", wantLen: 2,
			yaml: "NewOrdersPerAccount: &l {burst: 1, count: 1, period: 1s}\nNewRegistrationsPerIPAddress: *l\n"},
		{desc: "a merge key is an unknown key",
			yaml: "NewOrdersPerAccount: &l {burst: 1, count: 1, period: 1s}\nNewRegistrationsPerIPAddress: {<<: *l}\n", wantErr: `unknown key "<<"`},
		{desc: "two user-defined names with one enum number collide",
			yaml:    "Q1149599PerAccount: {burst: 1, count: 1, period: 1s}\nQ1312382PerAccount: {burst: 1, count: 1, period: 1s}\n",
			wantErr: `<string>:2: limit names "Q1149599PerAccount" and "Q1312382PerAccount" have the same enum number 538268776; rename one`},
		{desc: "an entry with two names in the list form loads both", overrides: true, wantLen: 2,
			yaml: "- NewOrdersPerAccount: {burst: 1, count: 1, period: 1s, ids: [1]}\n  NewRegistrationsPerIPAddress: {burst: 1, count: 1, period: 1s, ids: [10.0.0.1]}\n"},
		{desc: "an empty list entry is rejected", overrides: true,
			yaml: "- {}\n", wantErr: "<string>:1: override entry is empty"},
		{desc: "a list entry that is a string is rejected", overrides: true,
			yaml: "- NewOrdersPerAccount\n", wantErr: `<string>:1: override entry must be a map from a limit name to {burst, count, period, ids}, got "NewOrdersPerAccount"`},
		{desc: "the map form takes no ids", overrides: true,
			yaml: "NewOrdersPerAccount:1: {burst: 1, count: 1, period: 1s, ids: [2]}\n", wantErr: `unknown key "ids" in NewOrdersPerAccount:1, want burst, count and period`},
		{desc: "a map-form key with an empty id is rejected", overrides: true,
			yaml: "'NewOrdersPerAccount:': {burst: 1, count: 1, period: 1s}\n", wantErr: `override key "NewOrdersPerAccount:" must be formatted 'Name:id'`},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			var (
				n   int
				err error
			)
			if tt.overrides {
				var o *Overrides
				o, err = ParseOverrides("<string>", []byte(tt.yaml))
				n = o.Len()
			} else {
				var d *Defaults
				d, err = ParseDefaults("<string>", []byte(tt.yaml))
				n = d.Len()
			}
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("got error %v, want none", err)
				}
				if n != tt.wantLen {
					t.Errorf("got %d entries, want %d", n, tt.wantLen)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("got error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestUserNamesKeepTheirKeys: the enum number of a user-defined name comes
// from the name alone, so its bucket keys survive a restart and edits to the
// files that add other names.
func TestUserNamesKeepTheirKeys(t *testing.T) {
	t.Parallel()
	const want = "1296923630:172.23.45.22"
	load := func(t *testing.T, overrides string) string {
		t.Helper()
		o, err := ParseOverrides("overrides.yaml", []byte(overrides))
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(nil, o)
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.Resolve("NewFoosPerIPAddress", "172.23.45.22")
		if err != nil {
			t.Fatal(err)
		}
		if !b.Override {
			t.Errorf("got no override for %s, want the file's", b.Key)
		}
		return b.Key
	}
	seed, err := os.ReadFile("testdata/good_newfoos_list.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		desc      string
		overrides string
	}{
		{desc: "the seed's file gives the fixed key", overrides: string(seed)},
		{desc: "loading the same file again gives the same key", overrides: string(seed)},
		{desc: "adding names before it keeps the key", overrides: "- NewBarsPerIPAddress: {burst: 1, count: 1, period: 1s, ids: [10.0.0.1]}\n" +
			"- NewBazsPerAccount: {burst: 1, count: 1, period: 1s, ids: [1]}\n" + string(seed)},
		{desc: "the map form gives the same key", overrides: "NewAaasPerDomain:example.com: {burst: 1, count: 1, period: 1s}\nNewFoosPerIPAddress:172.23.45.22: {burst: 20, count: 20, period: 1s}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			if got := load(t, tt.overrides); got != want {
				t.Errorf("got key %q, want %q", got, want)
			}
		})
	}
}

func TestLoadReadsFiles(t *testing.T) {
	t.Parallel()
	s, err := Load("testdata/good_defaults.yaml", "testdata/good_overrides_list.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if d, o := s.Len(); d != 2 || o != 4 {
		t.Errorf("got %d defaults and %d overrides, want 2 and 4", d, o)
	}
	if _, err := Load("testdata/missing.yaml", ""); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing defaults file: got %v, want an error wrapping os.ErrNotExist", err)
	}
	if _, err := Load("", "testdata/missing.yaml"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing overrides file: got %v, want an error wrapping os.ErrNotExist", err)
	}
	if _, err := Load("testdata/bad_defaults_zero_burst.yaml", ""); !errors.Is(err, ErrInvalidLimit) {
		t.Errorf("bad defaults file: got %v, want an error wrapping ErrInvalidLimit", err)
	}
	_, err = Load("", "testdata/bad_overrides_bad_id.yaml")
	if !errors.Is(err, ErrInvalidID) || !strings.HasPrefix(err.Error(), "testdata/bad_overrides_bad_id.yaml:7: ") {
		t.Errorf("bad overrides file: got %v, want an ErrInvalidID error at testdata/bad_overrides_bad_id.yaml:7", err)
	}
}

func TestRepeatedMistakesAreCapped(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("- &e {NewOrdersPerAccount: {burst: 0, count: 1, period: 1s, ids: [x]}}\n")
	for i := 0; i < 300; i++ {
		b.WriteString("- *e\n")
	}
	_, err := ParseOverrides("o.yaml", []byte(b.String()))
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("got %v, want an ErrorList", err)
	}
	if len(list) != maxErrors+1 {
		t.Fatalf("got %d errors, want %d and a summary", len(list), maxErrors)
	}
	if got, want := list[maxErrors].Error(), "o.yaml:1: and 502 more errors"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
