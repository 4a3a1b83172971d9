package limits

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// addFixtures seeds f with every testdata file whose name contains part.
func addFixtures(f *testing.F, part string) {
	f.Helper()
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range files {
		if !strings.Contains(file, part) {
			continue
		}
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
}

// checkErrorList fails unless err is an ErrorList of well-formed errors.
func checkErrorList(t *testing.T, err error) {
	t.Helper()
	var list ErrorList
	if !errors.As(err, &list) || len(list) == 0 {
		t.Fatalf("got %T %v, want a non-empty ErrorList", err, err)
	}
	for _, e := range list {
		if e.Reason == "" || e.Err == nil || e.File != "fuzz.yaml" {
			t.Errorf("got error %+v, want a reason, a sentinel and the file name", *e)
		}
	}
}

func FuzzParseDefaults(f *testing.F) {
	addFixtures(f, "defaults")
	f.Add([]byte("NewOrdersPerAccount: {burst: 1, count: 1, period: 1ns}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := ParseDefaults("fuzz.yaml", data)
		if err != nil {
			checkErrorList(t, err)
			return
		}
		for _, def := range d.All() {
			if err := def.Limit.Valid(); err != nil {
				t.Errorf("default %s: got invalid limit %+v (%v), want it rejected", def.Name, def.Limit, err)
			}
		}
		if _, err := New(d, nil); err != nil {
			t.Errorf("New: got %v for defaults that parsed, want no error", err)
		}
	})
}

func FuzzParseOverrides(f *testing.F) {
	addFixtures(f, "overrides")
	addFixtures(f, "newfoos")
	f.Fuzz(func(t *testing.T, data []byte) {
		o, err := ParseOverrides("fuzz.yaml", data)
		if err != nil {
			checkErrorList(t, err)
			return
		}
		for _, ov := range o.All() {
			if err := ov.Limit.Valid(); err != nil {
				t.Errorf("override %s: got invalid limit %+v (%v), want it rejected", ov.Key, ov.Limit, err)
			}
			key, err := OverrideKey(ov.Name.Text, ov.ID)
			if err != nil || key != ov.Key {
				t.Errorf("override %s %q: got key %q, OverrideKey gives %q, %v", ov.Name, ov.ID, ov.Key, key, err)
			}
		}
		s, err := New(nil, o)
		if err != nil {
			t.Fatalf("New: got %v for overrides that parsed, want no error", err)
		}
		if _, n := s.Len(); n != o.Len() {
			t.Errorf("got %d overrides in the set, want %d", n, o.Len())
		}
	})
}

// fuzzNames has one name of each format.
var fuzzNames = []string{
	NewRegistrationsPerIPAddress,
	NewRegistrationsPerIPv6Range,
	NewOrdersPerAccount,
	FailedAuthorizationsPerDomainPerAccount,
	CertificatesPerDomain,
	CertificatesPerDomainPerAccount,
	CertificatesPerFQDNSet,
	CertificatesPerFQDNSetPerAccount,
	"NewFoosPerIPAddress",
}

// FuzzIDs checks the validators and canonicalisers of every format: they
// never panic, a canonical override id is also a natural id with the same
// key, and canonicalising a canonical key part changes nothing.
func FuzzIDs(f *testing.F) {
	for _, id := range []string{
		"10.0.0.1", "2001:0db8:0000:0000:0000:ff00:0042:8329", "2001:db8::/48", "2001:0db8:0000::/48",
		"2001:db8::/47", "::ffff:10.0.0.1", "fe80::1%eth0", "1:2:3:4:5:6:7:8:9", "12345678", "-1", "+1", "0012",
		"18446744073709551616", "example.com", "www.Example.co.uk.", "co.uk", "2001:db8:eeee:eeee::", "2001:db8:eeee:eeee::1",
		"192.168.1.1,example.com,example.org", "example.com,,example.org", "12345678:example.com",
		"12345678:2001:db8::1", "12345678:example.com,example.org", "", ",", ":", "a..b", "*.example.com",
	} {
		for i := range fuzzNames {
			f.Add(uint8(i), id)
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, id string) {
		name := fuzzNames[int(which)%len(fuzzNames)]
		n, err := ParseName(name)
		if err != nil {
			t.Fatal(err)
		}
		okey, oerr := OverrideKey(name, id)
		if oerr != nil && !errors.Is(oerr, ErrInvalidID) {
			t.Fatalf("OverrideKey(%q, %q): got %v, want nil or ErrInvalidID", name, id, oerr)
		}
		if (ValidateID(name, id) == nil) != (oerr == nil) {
			t.Fatalf("ValidateID and OverrideKey disagree on %q %q", name, id)
		}
		bkey, berr := BucketKey(name, id)
		if berr != nil && !errors.Is(berr, ErrInvalidID) {
			t.Fatalf("BucketKey(%q, %q): got %v, want nil or ErrInvalidID", name, id, berr)
		}
		if oerr == nil && (!n.Format.perAccount() || strings.Contains(id, ":")) {
			// A canonical override id is a natural id that keys the same.
			if berr != nil || bkey != okey {
				t.Fatalf("%s %q: got override key %q and bucket key %q (%v), want them equal", name, id, okey, bkey, berr)
			}
		}
		if berr != nil {
			return
		}
		prefix := enumPrefix(n.Enum)
		if !strings.HasPrefix(bkey, prefix) {
			t.Fatalf("BucketKey(%q, %q) = %q: want the prefix %q", name, id, bkey, prefix)
		}
		part := bkey[len(prefix):]
		switch n.Format {
		case FormatIPAddress, FormatIPv6Range, FormatRegID, FormatRegIDIdentValue:
			// The canonical key part is itself a canonical override id.
			if err := ValidateID(name, part); err != nil {
				t.Fatalf("BucketKey(%q, %q) = %q, whose id is not canonical: %v", name, id, bkey, err)
			}
			if again, err := BucketKey(name, part); err != nil || again != bkey {
				t.Fatalf("BucketKey(%q, %q) = %q, then %q, %v: want it unchanged", name, id, bkey, again, err)
			}
		}
	})
}
