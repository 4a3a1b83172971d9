package limits

import (
	"errors"
	"strings"
	"testing"
)

// Boulder accepts override ids that no request is ever counted under (its
// own integration-test files carry "ecdsa.le.wtf" for
// CertificatesPerDomain). They load with a warning naming the id that
// would apply, and are left out of the overrides.
func TestUnreachableOverrideIDsAreWarnings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc    string
		file    string
		natural string // a natural id that would have used the override
		wantID  string // the id the warning asks for
		wantKey string // the bucket key the warning names
	}{
		{desc: "a subdomain for CertificatesPerDomain, list form",
			file:    "- CertificatesPerDomain:\n    burst: 9\n    count: 9\n    period: 1h\n    ids:\n      - id: ecdsa.le.wtf\n        comment: from Boulder\n",
			natural: "ecdsa.le.wtf", wantID: "le.wtf", wantKey: "5:le.wtf"},
		{desc: "a subdomain for CertificatesPerDomain, map form",
			file:    "CertificatesPerDomain:www.example.co.uk:\n  burst: 9\n  count: 9\n  period: 1h\n",
			natural: "www.example.co.uk", wantID: "example.co.uk", wantKey: "5:example.co.uk"},
		{desc: "a subdomain after the account id for CertificatesPerDomainPerAccount",
			file:    "- CertificatesPerDomainPerAccount:\n    burst: 9\n    count: 9\n    period: 1h\n    ids: [\"12345678:www.example.com\"]\n",
			natural: "12345678:www.example.com", wantID: "12345678:example.com", wantKey: "6:12345678:example.com"},
		{desc: "an IPv6 /48 not in canonical form",
			file:    "- NewRegistrationsPerIPv6Range:\n    burst: 9\n    count: 9\n    period: 1h\n    ids: [\"2001:0db8:0000::/48\"]\n",
			natural: "2001:db8::1", wantID: "2001:db8::/48", wantKey: "2:2001:db8::/48"},
		{desc: "an IPv4-mapped IPv6 address",
			file:    "NewRegistrationsPerIPAddress:::ffff:10.0.0.1:\n  burst: 9\n  count: 9\n  period: 1h\n",
			natural: "10.0.0.1", wantID: "10.0.0.1", wantKey: "1:10.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			o, err := ParseOverrides("o.yaml", []byte(tt.file))
			if err != nil {
				t.Fatalf("ParseOverrides: got error %v, want a warning only", err)
			}
			if o.Len() != 0 {
				t.Errorf("got %d overrides, want 0: the override can never match", o.Len())
			}
			w := o.Warnings()
			if len(w) != 1 {
				t.Fatalf("got warnings %v, want 1", w)
			}
			if !errors.Is(w[0], ErrUnreachableID) {
				t.Errorf("warning %v: does not wrap ErrUnreachableID", w[0])
			}
			for _, part := range []string{"o.yaml:", "can never match", `"` + tt.wantID + `"`, "bucket key " + tt.wantKey} {
				if !strings.Contains(w[0].Error(), part) {
					t.Errorf("warning %q: got no %q, want it", w[0], part)
				}
			}
			s, err := New(nil, o)
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Warnings()) != 1 {
				t.Errorf("Set.Warnings: got %v, want the overrides' one", s.Warnings())
			}
			b, err := s.Resolve(w[0].Name, tt.natural)
			if err != nil {
				t.Fatal(err)
			}
			if b.Override || b.Key != tt.wantKey {
				t.Errorf("Resolve(%s, %q): got key %s override %t, want key %s and no override", w[0].Name, tt.natural, b.Key, b.Override, tt.wantKey)
			}
		})
	}
}

// Ids that are wrong rather than unreachable stay errors.
func TestMalformedOverrideIDsStayErrors(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"Ecdsa.le.wtf", "ecdsa..le.wtf", "-a.le.wtf", "2001:db8::/47", "2001:db8::1/48", "10.0.0.1/32"} {
		for _, name := range []string{"CertificatesPerDomain", "NewRegistrationsPerIPv6Range"} {
			file := "- " + name + ":\n    burst: 9\n    count: 9\n    period: 1h\n    ids: [\"" + id + "\"]\n"
			o, err := ParseOverrides("o.yaml", []byte(file))
			if _, unreachable := unreachable(mustName(t, name).Format, id); unreachable {
				t.Fatalf("%s %q: reported unreachable, want malformed", name, id)
			}
			if err == nil {
				t.Errorf("%s %q: got %d overrides and warnings %v, want an error", name, id, o.Len(), o.Warnings())
			} else if !errors.Is(err, ErrInvalidID) {
				t.Errorf("%s %q: got %v, want ErrInvalidID", name, id, err)
			}
		}
	}
}

// The Boulder README's own example ids are not in canonical form: they
// load with a warning at their line naming the canonical form.
func TestSeedsNonCanonicalIDsAreWarnings(t *testing.T) {
	t.Parallel()
	_, o, err := parseFixture(t, "warn_overrides_noncanonical_ids.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`warn_overrides_noncanonical_ids.yaml:2: override id "2001:0db8:0000:0000:0000:ff00:0042:8329" for NewRegistrationsPerIPAddress can never match: requests are counted under "2001:db8::ff00:42:8329" (bucket key 1:2001:db8::ff00:42:8329)`,
		`warn_overrides_noncanonical_ids.yaml:6: override id "2001:0db8:0000::/48" for NewRegistrationsPerIPv6Range can never match: requests are counted under "2001:db8::/48" (bucket key 2:2001:db8::/48)`,
	}
	w := o.Warnings()
	if len(w) != len(want) {
		t.Fatalf("got warnings %v, want %d", w, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(w[i].Error(), want[i]) {
			t.Errorf("warning %d: got %q, want it to start with %q", i, w[i], want[i])
		}
	}
	if o.Len() != 0 {
		t.Errorf("got %d overrides, want 0", o.Len())
	}
}

func TestSetNamesListsBuiltinAndFileNamesInEnumOrder(t *testing.T) {
	t.Parallel()
	d, err := ParseDefaults("d.yaml", []byte("NewFoosPerIPAddress:\n  burst: 1\n  count: 1\n  period: 1s\n"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := s.Names()
	if len(names) != len(builtins)+1 {
		t.Fatalf("got %d names, want the %d built-in ones and NewFoosPerIPAddress", len(names), len(builtins))
	}
	for i := 1; i < len(names); i++ {
		if names[i-1].Enum >= names[i].Enum {
			t.Errorf("names %d and %d: enums %d, %d, want increasing", i-1, i, names[i-1].Enum, names[i].Enum)
		}
	}
	if last := names[len(names)-1]; last.Text != "NewFoosPerIPAddress" {
		t.Errorf("last name: got %s, want NewFoosPerIPAddress (enum over 1000)", last.Text)
	}
	if file, line, ok := s.DefaultAt("NewFoosPerIPAddress"); !ok || file != "d.yaml" || line != 1 {
		t.Errorf("DefaultAt: got %s:%d %t, want d.yaml:1", file, line, ok)
	}
}
