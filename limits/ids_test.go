package limits

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestValidateID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc    string
		name    string
		id      string
		wantErr string // substring of the error; "" means the id is valid
	}{
		// ipAddress
		{desc: "an IPv4 address is a valid ipAddress", name: NewRegistrationsPerIPAddress, id: "10.0.0.1"},
		{desc: "a canonical IPv6 address is a valid ipAddress", name: NewRegistrationsPerIPAddress, id: "2001:db8::ff00:42:8329"},
		{desc: "a user-defined PerIPAddress name takes an ipAddress", name: "NewFoosPerIPAddress", id: "172.23.45.22"},
		{desc: "a non-canonical IPv6 address names its canonical form", name: NewRegistrationsPerIPAddress, id: "2001:0db8:0000:0000:0000:ff00:0042:8329",
			wantErr: `invalid id "2001:0db8:0000:0000:0000:ff00:0042:8329" for NewRegistrationsPerIPAddress: must be in canonical form "2001:db8::ff00:42:8329"`},
		{desc: "an upper-case IPv6 address is not canonical", name: NewRegistrationsPerIPAddress, id: "2001:DB8::1", wantErr: `must be in canonical form "2001:db8::1"`},
		{desc: "an IPv4-mapped IPv6 address is not canonical", name: NewRegistrationsPerIPAddress, id: "::ffff:10.0.0.1", wantErr: `must be in canonical form "10.0.0.1"`},
		{desc: "a 9-group IPv6 address is not an address", name: NewRegistrationsPerIPAddress, id: "1:2:3:4:5:6:7:8:9", wantErr: "must be an IPv4 or IPv6 address"},
		{desc: "an IPv4 address with a leading zero is not an address", name: NewRegistrationsPerIPAddress, id: "10.0.0.01", wantErr: "must be an IPv4 or IPv6 address"},
		{desc: "an address with a zone is rejected", name: NewRegistrationsPerIPAddress, id: "fe80::1%eth0", wantErr: "must not have an IPv6 zone"},
		{desc: "a CIDR is not an ipAddress", name: NewRegistrationsPerIPAddress, id: "10.0.0.0/8", wantErr: "without a CIDR mask"},
		{desc: "an empty ipAddress is rejected", name: NewRegistrationsPerIPAddress, id: "", wantErr: `invalid id "" for NewRegistrationsPerIPAddress: must not be empty`},
		{desc: "a domain is not an ipAddress", name: LimitOverrideRequestsPerIPAddress, id: "example.com", wantErr: "must be an IPv4 or IPv6 address"},

		// ipv6RangeCIDR
		{desc: "a canonical /48 is a valid ipv6RangeCIDR", name: NewRegistrationsPerIPv6Range, id: "2001:db8::/48"},
		{desc: "a /48 with a non-zero third group is valid", name: NewRegistrationsPerIPv6Range, id: "2001:db8:1::/48"},
		{desc: "a /47 is rejected", name: NewRegistrationsPerIPv6Range, id: "2001:db8::/47",
			wantErr: `invalid id "2001:db8::/47" for NewRegistrationsPerIPv6Range: must be a /48 IPv6 range`},
		{desc: "a non-canonical /48 names its canonical form", name: NewRegistrationsPerIPv6Range, id: "2001:0db8:0000::/48", wantErr: `must be in canonical form "2001:db8::/48"`},
		{desc: "a /48 with host bits set is rejected", name: NewRegistrationsPerIPv6Range, id: "2001:db8::1/48", wantErr: `must have no host bits set: canonical form is "2001:db8::/48"`},
		{desc: "an IPv4 range is rejected", name: NewRegistrationsPerIPv6Range, id: "10.0.0.0/8", wantErr: "must be a /48 IPv6 range, not IPv4"},
		{desc: "a bare IPv6 address is not a range", name: NewRegistrationsPerIPv6Range, id: "2001:db8::", wantErr: "not an address"},
		{desc: "an empty range is rejected", name: NewRegistrationsPerIPv6Range, id: "", wantErr: "must not be empty"},

		// regId
		{desc: "a decimal number is a valid regId", name: NewOrdersPerAccount, id: "12345678"},
		{desc: "the largest uint64 is a valid regId", name: NewOrdersPerAccount, id: "18446744073709551615"},
		{desc: "a number past uint64 is rejected", name: NewOrdersPerAccount, id: "18446744073709551616", wantErr: "fits in 64 bits"},
		{desc: "a non-numeric regId is rejected", name: NewOrdersPerAccount, id: "abc",
			wantErr: `invalid id "abc" for NewOrdersPerAccount: must be a decimal account id`},
		{desc: "a negative regId is rejected", name: NewOrdersPerAccount, id: "-1", wantErr: "must be a decimal account id"},
		{desc: "a regId with a plus sign is rejected", name: NewOrdersPerAccount, id: "+1", wantErr: "must be a decimal account id"},
		{desc: "a regId with leading zeros is not canonical", name: NewOrdersPerAccount, id: "0012", wantErr: `must not have leading zeros ("12")`},
		{desc: "an empty regId is rejected", name: NewOrdersPerAccount, id: "", wantErr: "must not be empty"},
		{desc: "a user-defined PerAccount name takes a regId", name: "NewWidgetsPerAccount", id: "x", wantErr: `invalid id "x" for NewWidgetsPerAccount`},

		// domainOrCIDR
		{desc: "an eTLD+1 is a valid domainOrCIDR", name: CertificatesPerDomain, id: "example.com"},
		{desc: "an eTLD+1 under a two-label suffix is valid", name: CertificatesPerDomain, id: "example.co.uk"},
		{desc: "an IPv4 address is a valid domainOrCIDR", name: CertificatesPerDomain, id: "192.168.1.1"},
		{desc: "the lowest IPv6 address of a /64 is a valid domainOrCIDR", name: CertificatesPerDomain, id: "2001:db8:eeee:eeee::"},
		{desc: "an IPv6 address that is not the lowest of its /64 is rejected", name: CertificatesPerDomain, id: "2001:db8:eeee:eeee::1",
			wantErr: `invalid id "2001:db8:eeee:eeee::1" for CertificatesPerDomain: must be the lowest address of its /64 ("2001:db8:eeee:eeee::")`},
		{desc: "a subdomain is not an eTLD+1", name: CertificatesPerDomain, id: "www.example.co.uk", wantErr: `must be an eTLD+1 domain ("example.co.uk")`},
		{desc: "a CIDR mask is rejected in domainOrCIDR", name: CertificatesPerDomain, id: "2001:db8:eeee:eeee::/64", wantErr: "without a CIDR mask"},
		{desc: "an upper-case domain is not canonical", name: CertificatesPerDomain, id: "Example.com", wantErr: `domain must be lower case ("example.com")`},
		{desc: "a domain with a trailing dot is not canonical", name: CertificatesPerDomain, id: "example.com.", wantErr: "domain must not end with a dot"},
		{desc: "a label starting with a hyphen is rejected", name: CertificatesPerDomain, id: "-example.com", wantErr: `domain label "-example" must not start or end with a hyphen`},
		{desc: "an underscore is rejected", name: CertificatesPerDomain, id: "ex_ample.com", wantErr: "domain has an invalid character '_'"},
		{desc: "an empty label is rejected", name: CertificatesPerDomain, id: "example..com", wantErr: "domain has an empty label"},
		{desc: "a single label is rejected", name: CertificatesPerDomain, id: "localhost", wantErr: "at least two labels"},
		{desc: "a 64-character label is rejected", name: CertificatesPerDomain, id: strings.Repeat("a", 64) + ".com", wantErr: "longer than 63 characters"},
		{desc: "a wildcard is rejected", name: CertificatesPerDomain, id: "*.example.com", wantErr: "invalid character '*'"},
		{desc: "a 9-group IPv6 address is neither a domain nor an address", name: CertificatesPerDomain, id: "1:2:3:4:5:6:7:8:9", wantErr: "must be an IPv4 or IPv6 address"},
		{desc: "a bad dotted quad is not taken for a domain", name: CertificatesPerDomain, id: "1.2.3.999", wantErr: "must be an IPv4 or IPv6 address"},

		// fqdnSet
		{desc: "a list of identifiers is a valid fqdnSet", name: CertificatesPerFQDNSet, id: "192.168.1.1,example.com,example.org"},
		{desc: "a single domain is a valid fqdnSet", name: CertificatesPerFQDNSet, id: "www.example.com"},
		{desc: "an fqdnSet with an empty element is rejected", name: CertificatesPerFQDNSet, id: "example.com,,example.org",
			wantErr: `invalid id "example.com,,example.org" for CertificatesPerFQDNSet: element 2 of the set is empty`},
		{desc: "an fqdnSet with a trailing comma is rejected", name: CertificatesPerFQDNSet, id: "example.com,", wantErr: "element 2 of the set is empty"},
		{desc: "an empty fqdnSet is rejected", name: CertificatesPerFQDNSet, id: "", wantErr: "must not be empty"},
		{desc: "an fqdnSet with an upper-case member is rejected", name: CertificatesPerFQDNSet, id: "example.com,Example.org", wantErr: `element "Example.org" domain must be lower case`},
		{desc: "an fqdnSet with a space is rejected", name: CertificatesPerFQDNSet, id: "example.com, example.org", wantErr: `element " example.org" domain has an invalid character ' '`},

		// regId:… formats
		{desc: "a bare regId overrides a whole account", name: CertificatesPerDomainPerAccount, id: "12345678"},
		{desc: "regId:domain overrides one bucket", name: CertificatesPerDomainPerAccount, id: "12345678:example.com"},
		{desc: "regId:domain needs an eTLD+1 for CertificatesPerDomainPerAccount", name: CertificatesPerDomainPerAccount, id: "12345678:www.example.com",
			wantErr: `domainOrCIDR "www.example.com" must be an eTLD+1 domain ("example.com")`},
		{desc: "regId:identValue takes any domain for FailedAuthorizationsPerDomainPerAccount", name: FailedAuthorizationsPerDomainPerAccount, id: "12345678:www.example.com"},
		{desc: "regId:identValue takes an IPv6 address after the first colon", name: FailedAuthorizationsForPausingPerDomainPerAccount, id: "12345678:2001:db8::1"},
		{desc: "a non-numeric regId in regId:domain is rejected", name: FailedAuthorizationsPerDomainPerAccount, id: "abc:example.com",
			wantErr: `invalid id "abc:example.com" for FailedAuthorizationsPerDomainPerAccount: regId "abc" must be a decimal account id`},
		{desc: "an empty domain in regId:domain is rejected", name: FailedAuthorizationsPerDomainPerAccount, id: "12345678:", wantErr: `identValue "" must not be empty`},
		{desc: "regId:fqdnSet is valid for the legacy name", name: CertificatesPerFQDNSetPerAccount, id: "12345678:example.com,example.org"},
		{desc: "regId:fqdnSet with an empty element is rejected", name: CertificatesPerFQDNSetPerAccount, id: "12345678:example.com,", wantErr: `fqdnSet "example.com," element 2 of the set is empty`},
		{desc: "a user-defined PerDomainPerAccount name takes regId:domain", name: "FooBarsPerDomainPerAccount", id: "7:example.com"},
		{desc: "a user-defined PerFQDNSetPerAccount name takes regId:fqdnSet", name: "FooBarsPerFQDNSetPerAccount", id: "7:a.example.com,b.example.com"},

		// names
		{desc: "an unknown name is rejected before the id is looked at", name: "NewOrdersPerPlanet", id: "1", wantErr: `unknown limit name "NewOrdersPerPlanet"`},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			err := ValidateID(tt.name, tt.id)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ValidateID(%q, %q): got %v, want no error", tt.name, tt.id, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("ValidateID(%q, %q): got no error, want one containing %q", tt.name, tt.id, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ValidateID(%q, %q): got %q, want it to contain %q", tt.name, tt.id, err, tt.wantErr)
			}
			if !errors.Is(err, ErrInvalidID) && !errors.Is(err, ErrUnknownName) {
				t.Errorf("ValidateID(%q, %q): got %v, want it to wrap ErrInvalidID or ErrUnknownName", tt.name, tt.id, err)
			}
		})
	}
}

func TestIDErrorNamesLimitIDAndRule(t *testing.T) {
	t.Parallel()
	err := ValidateID(NewRegistrationsPerIPv6Range, "2001:db8::/47")
	var idErr *IDError
	if !errors.As(err, &idErr) {
		t.Fatalf("got %T, want *IDError", err)
	}
	if idErr.Name != NewRegistrationsPerIPv6Range || idErr.ID != "2001:db8::/47" || idErr.Rule != "must be a /48 IPv6 range" {
		t.Errorf("got %+v, want name, id and rule filled in", *idErr)
	}
	if !errors.Is(err, ErrInvalidID) {
		t.Errorf("got %v, want it to wrap ErrInvalidID", err)
	}
}

// setHash is the key part of an fqdnSet: the SHA-256 hex of its members
// joined by commas, computed here independently of the package.
func setHash(members string) string {
	h := sha256.Sum256([]byte(members))
	return hex.EncodeToString(h[:])
}

// TestFQDNSetKeyOfALargeSet checks a set larger than appendFQDNSetKey's
// stack buffers (16 members, 256 bytes) against the hash computed here:
// 40 names and 3 addresses, shuffled, some twice, some in upper case.
func TestFQDNSetKeyOfALargeSet(t *testing.T) {
	var names, ids []string
	for i := range 40 {
		names = append(names, fmt.Sprintf("host%02d.example.com", i))
		ids = append(ids, fmt.Sprintf("HOST%02d.example.com", i))
	}
	addrs := []string{"10.0.0.1", "10.0.0.2", "2001:db8::1"}
	ids = append(ids, "2001:0db8::1", "10.0.0.2", "10.0.0.1", "host07.example.com", "10.0.0.1")
	rand.New(rand.NewPCG(3, 4)).Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	want := "7:" + setHash(strings.Join(append(names, addrs...), ","))
	if got, err := BucketKey(CertificatesPerFQDNSet, strings.Join(ids, ",")); err != nil || got != want {
		t.Errorf("got %q, %v, want %q", got, err, want)
	}
}

// TestFQDNSetKeyAllocations checks that an fqdnSet's key is appended to a
// buffer with room for it without an allocation (a member in upper case
// allocates its lower-case copy).
func TestFQDNSetKeyAllocations(t *testing.T) {
	set, err := New(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0, 128)
	var b Bucket
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := set.AppendResolve(buf, CertificatesPerFQDNSet, "www.example.com,example.org,b.example.net.,10.0.0.1", &b); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations, want 0", allocs)
	}
}

func TestBucketKey(t *testing.T) {
	t.Parallel()
	hashAB := setHash("a.example.com,b.example.com")
	tests := []struct {
		desc    string
		name    string
		id      string
		want    string
		wantErr string
	}{
		{desc: "an account id keys as itself under enum 3", name: NewOrdersPerAccount, id: "12345678", want: "3:12345678"},
		{desc: "an account id loses its leading zeros", name: NewOrdersPerAccount, id: "0012345678", want: "3:12345678"},
		{desc: "a negative account id is rejected", name: NewOrdersPerAccount, id: "-5", wantErr: "must be a decimal account id"},
		{desc: "an IPv4 address keys as itself", name: NewRegistrationsPerIPAddress, id: "10.0.0.1", want: "1:10.0.0.1"},
		{desc: "a long-form IPv6 address keys in canonical form", name: NewRegistrationsPerIPAddress, id: "2001:0db8:0000:0000:0000:ff00:0042:8329", want: "1:2001:db8::ff00:42:8329"},
		{desc: "an IPv4-mapped IPv6 address keys as IPv4", name: NewRegistrationsPerIPAddress, id: "::ffff:10.0.0.1", want: "1:10.0.0.1"},
		{desc: "a user-defined name keys under its hashed enum", name: "NewFoosPerIPAddress", id: "172.23.45.22", want: "1296923630:172.23.45.22"},
		{desc: "an IPv6 address keys its /48 for the range limit", name: NewRegistrationsPerIPv6Range, id: "2001:db8:1:2:3:4:5:6", want: "2:2001:db8:1::/48"},
		{desc: "a /48 range keys as its canonical self", name: NewRegistrationsPerIPv6Range, id: "2001:0db8:0001::/48", want: "2:2001:db8:1::/48"},
		{desc: "an IPv4 address is an error for the range limit", name: NewRegistrationsPerIPv6Range, id: "10.0.0.1",
			wantErr: `invalid id "10.0.0.1" for NewRegistrationsPerIPv6Range: must be an IPv6 address, not IPv4`},
		{desc: "an IPv4-mapped address is an error for the range limit", name: NewRegistrationsPerIPv6Range, id: "::ffff:10.0.0.1", wantErr: "not IPv4"},
		{desc: "a domain keys its eTLD+1", name: CertificatesPerDomain, id: "www.example.co.uk", want: "5:example.co.uk"},
		{desc: "a domain is lower-cased and loses its trailing dot", name: CertificatesPerDomain, id: "WWW.Example.COM.", want: "5:example.com"},
		{desc: "a public suffix keys as itself", name: CertificatesPerDomain, id: "co.uk", want: "5:co.uk"},
		{desc: "an IPv4 address keys its /32", name: CertificatesPerDomain, id: "192.168.1.1", want: "5:192.168.1.1/32"},
		{desc: "an IPv6 address keys its /64", name: CertificatesPerDomain, id: "2001:db8:eeee:eeee:1:2:3:4", want: "5:2001:db8:eeee:eeee::/64"},
		{desc: "a bad domain is an error", name: CertificatesPerDomain, id: "exa mple.com", wantErr: "domain has an invalid character ' '"},
		{desc: "a set keys the hash of its sorted members", name: CertificatesPerFQDNSet, id: "b.example.com,a.example.com", want: "7:" + hashAB},
		{desc: "a set's hash ignores case", name: CertificatesPerFQDNSet, id: "A.Example.com,B.EXAMPLE.COM", want: "7:" + hashAB},
		{desc: "a set's hash ignores duplicates", name: CertificatesPerFQDNSet, id: "a.example.com,b.example.com,a.example.com", want: "7:" + hashAB},
		{desc: "a set's hash ignores trailing dots and spaces", name: CertificatesPerFQDNSet, id: " a.example.com., b.example.com", want: "7:" + hashAB},
		{desc: "a set with an IP address hashes its canonical form, DNS names first", name: CertificatesPerFQDNSet, id: "2001:0db8::1,example.com", want: "7:" + setHash("example.com,2001:db8::1")},
		{desc: "a set orders DNS names, then IP addresses, each by value", name: CertificatesPerFQDNSet, id: "z.example.com,10.0.0.2,a.example.com,10.0.0.1,2001:db8::1",
			want: "7:" + setHash("a.example.com,z.example.com,10.0.0.1,10.0.0.2,2001:db8::1")},
		{desc: "a set with an empty element is an error", name: CertificatesPerFQDNSet, id: "a.example.com,,b.example.com", wantErr: "element 2 of the set is empty"},
		{desc: "regId:domain keys the whole domain for failed authorizations", name: FailedAuthorizationsPerDomainPerAccount, id: "12345678:WWW.example.com", want: "4:12345678:www.example.com"},
		{desc: "regId:domain keys the eTLD+1 for certificates per domain per account", name: CertificatesPerDomainPerAccount, id: "12345678:www.example.com", want: "6:12345678:example.com"},
		{desc: "regId:IPv6 keys the /64 for certificates per domain per account", name: CertificatesPerDomainPerAccount, id: "12345678:2001:db8::1", want: "6:12345678:2001:db8::/64"},
		{desc: "regId:domain keys the whole domain for pausing", name: FailedAuthorizationsForPausingPerDomainPerAccount, id: "42:a.example.com", want: "8:42:a.example.com"},
		{desc: "a bare regId is an error where regId:domain is wanted", name: FailedAuthorizationsPerDomainPerAccount, id: "12345678", wantErr: "must be formatted 'regId:identValue'"},
		{desc: "regId:fqdnSet keys the account and the set's hash", name: CertificatesPerFQDNSetPerAccount, id: "9:b.example.com,a.example.com", want: "100:9:" + hashAB},
		{desc: "an empty id is an error", name: NewOrdersPerAccount, id: "", wantErr: "must not be empty"},
		{desc: "an unknown name is an error", name: "Nope", id: "1", wantErr: `unknown limit name "Nope"`},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			got, err := BucketKey(tt.name, tt.id)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("BucketKey(%q, %q): got (%q, %v), want an error containing %q", tt.name, tt.id, got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("BucketKey(%q, %q): got error %v, want %q", tt.name, tt.id, err, tt.want)
			}
			if got != tt.want {
				t.Errorf("BucketKey(%q, %q): got %q, want %q", tt.name, tt.id, got, tt.want)
			}
		})
	}
}

// TestOverrideKeyMatchesBucketKey checks that an override written in
// canonical form lands on the very key that the natural id it stands for
// resolves to.
func TestOverrideKeyMatchesBucketKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc       string
		name       string
		overrideID string
		naturalID  string
	}{
		{desc: "an IPv6 address override matches its long form", name: NewRegistrationsPerIPAddress, overrideID: "2001:db8::ff00:42:8329", naturalID: "2001:0db8:0000:0000:0000:ff00:0042:8329"},
		{desc: "a /48 override matches any address inside it", name: NewRegistrationsPerIPv6Range, overrideID: "2001:db8::/48", naturalID: "2001:db8:0:ffff::1"},
		{desc: "an eTLD+1 override matches a subdomain", name: CertificatesPerDomain, overrideID: "example.com", naturalID: "a.b.example.com"},
		{desc: "an IPv4 override matches the same address", name: CertificatesPerDomain, overrideID: "192.168.1.0", naturalID: "192.168.1.0"},
		{desc: "an IPv6 /64 override matches any address in the /64", name: CertificatesPerDomain, overrideID: "2001:db8:eeee:eeee::", naturalID: "2001:db8:eeee:eeee:ffff::1"},
		{desc: "a set override matches the set in any order and case", name: CertificatesPerFQDNSet, overrideID: "192.168.1.1,example.com,example.org", naturalID: "Example.ORG,192.168.1.1,example.com"},
		{desc: "a regId:domain override matches the bucket of a subdomain", name: CertificatesPerDomainPerAccount, overrideID: "12345678:example.com", naturalID: "12345678:www.example.com"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			ok, err := OverrideKey(tt.name, tt.overrideID)
			if err != nil {
				t.Fatalf("OverrideKey(%q, %q): got error %v, want none", tt.name, tt.overrideID, err)
			}
			bk, err := BucketKey(tt.name, tt.naturalID)
			if err != nil {
				t.Fatalf("BucketKey(%q, %q): got error %v, want none", tt.name, tt.naturalID, err)
			}
			if ok != bk {
				t.Errorf("got override key %q and bucket key %q, want them equal", ok, bk)
			}
		})
	}
}

func TestFormatValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc    string
		format  Format
		id      string
		wantErr string
	}{
		{desc: "an FQDN is a valid identValue", format: FormatIdentValue, id: "www.example.com"},
		{desc: "an IPv4 address is a valid identValue", format: FormatIdentValue, id: "192.168.1.1"},
		{desc: "an IPv6 address is a valid identValue", format: FormatIdentValue, id: "2001:db8:eeee::1"},
		{desc: "a non-canonical IPv6 identValue is rejected", format: FormatIdentValue, id: "2001:db8:eeee:0::1", wantErr: `invalid id "2001:db8:eeee:0::1" for identValue: must be in canonical form "2001:db8:eeee::1"`},
		{desc: "an identValue with an upper-case letter is rejected", format: FormatIdentValue, id: "WWW.example.com", wantErr: "domain must be lower case"},
		{desc: "an empty identValue is rejected", format: FormatIdentValue, id: "", wantErr: `invalid id "" for identValue: must not be empty`},
		{desc: "a /48 is a valid ipv6RangeCIDR", format: FormatIPv6Range, id: "2001:db8::/48"},
		{desc: "a /47 is not a valid ipv6RangeCIDR", format: FormatIPv6Range, id: "2001:db8::/47", wantErr: `invalid id "2001:db8::/47" for ipv6RangeCIDR: must be a /48 IPv6 range`},
		{desc: "the zero format accepts nothing", format: 0, id: "x", wantErr: "has an unknown format Format(0)"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			err := tt.format.Validate(tt.id)
			if tt.wantErr == "" {
				if err != nil {
					t.Errorf("got %v, want no error", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrInvalidID) {
				t.Errorf("got %v, want an ErrInvalidID error containing %q", err, tt.wantErr)
			}
		})
	}
}
