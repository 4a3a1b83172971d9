package limits

import (
	"errors"
	"hash/fnv"
	"testing"
)

// fnvEnum computes a user-defined name's enum with the standard library,
// independently of the package's own hash.
func fnvEnum(name string) int64 {
	h := fnv.New32a()
	h.Write([]byte(name))
	return UserEnumBase + int64(h.Sum32())
}

func TestParseName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc        string
		name        string
		wantEnum    int64
		wantFormat  Format
		wantBuiltIn bool
		wantErr     bool
	}{
		{desc: "NewRegistrationsPerIPAddress is built-in number 1", name: NewRegistrationsPerIPAddress, wantEnum: 1, wantFormat: FormatIPAddress, wantBuiltIn: true},
		{desc: "NewRegistrationsPerIPv6Range is built-in number 2", name: NewRegistrationsPerIPv6Range, wantEnum: 2, wantFormat: FormatIPv6Range, wantBuiltIn: true},
		{desc: "NewOrdersPerAccount is built-in number 3", name: NewOrdersPerAccount, wantEnum: 3, wantFormat: FormatRegID, wantBuiltIn: true},
		{desc: "FailedAuthorizationsPerDomainPerAccount is built-in number 4", name: FailedAuthorizationsPerDomainPerAccount, wantEnum: 4, wantFormat: FormatRegIDIdentValue, wantBuiltIn: true},
		{desc: "CertificatesPerDomain is built-in number 5", name: CertificatesPerDomain, wantEnum: 5, wantFormat: FormatDomainOrCIDR, wantBuiltIn: true},
		{desc: "CertificatesPerDomainPerAccount is built-in number 6", name: CertificatesPerDomainPerAccount, wantEnum: 6, wantFormat: FormatRegIDDomainOrCIDR, wantBuiltIn: true},
		{desc: "CertificatesPerFQDNSet is built-in number 7", name: CertificatesPerFQDNSet, wantEnum: 7, wantFormat: FormatFQDNSet, wantBuiltIn: true},
		{desc: "FailedAuthorizationsForPausingPerDomainPerAccount is built-in number 8", name: FailedAuthorizationsForPausingPerDomainPerAccount, wantEnum: 8, wantFormat: FormatRegIDIdentValue, wantBuiltIn: true},
		{desc: "LimitOverrideRequestsPerIPAddress is built-in number 9", name: LimitOverrideRequestsPerIPAddress, wantEnum: 9, wantFormat: FormatIPAddress, wantBuiltIn: true},
		{desc: "the legacy CertificatesPerFQDNSetPerAccount has number 100", name: CertificatesPerFQDNSetPerAccount, wantEnum: 100, wantFormat: FormatRegIDFQDNSet, wantBuiltIn: true},
		{desc: "NewFoosPerIPAddress is a user-defined ipAddress name", name: "NewFoosPerIPAddress", wantEnum: fnvEnum("NewFoosPerIPAddress"), wantFormat: FormatIPAddress},
		{desc: "a PerIPv6Range suffix gives ipv6RangeCIDR", name: "XPerIPv6Range", wantEnum: fnvEnum("XPerIPv6Range"), wantFormat: FormatIPv6Range},
		{desc: "a PerAccount suffix gives regId", name: "Widgets2PerAccount", wantEnum: fnvEnum("Widgets2PerAccount"), wantFormat: FormatRegID},
		{desc: "a PerDomain suffix gives domainOrCIDR", name: "LookupsPerDomain", wantEnum: fnvEnum("LookupsPerDomain"), wantFormat: FormatDomainOrCIDR},
		{desc: "a PerFQDNSet suffix gives fqdnSet", name: "RenewalsPerFQDNSet", wantEnum: fnvEnum("RenewalsPerFQDNSet"), wantFormat: FormatFQDNSet},
		{desc: "a PerDomainPerAccount suffix beats PerAccount", name: "ChecksPerDomainPerAccount", wantEnum: fnvEnum("ChecksPerDomainPerAccount"), wantFormat: FormatRegIDIdentValue},
		{desc: "a PerFQDNSetPerAccount suffix beats PerAccount", name: "ChecksPerFQDNSetPerAccount", wantEnum: fnvEnum("ChecksPerFQDNSetPerAccount"), wantFormat: FormatRegIDFQDNSet},
		{desc: "a name with an unknown suffix is rejected", name: "NewFoosPerPlanet", wantErr: true},
		{desc: "a name starting in lower case is rejected", name: "newFoosPerAccount", wantErr: true},
		{desc: "a bare suffix is rejected", name: "PerAccount", wantErr: true},
		{desc: "a name with punctuation is rejected", name: "New_FoosPerAccount", wantErr: true},
		{desc: "the empty name is rejected", name: "", wantErr: true},
		{desc: "Boulder's Unknown is rejected", name: "Unknown", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			n, err := ParseName(tt.name)
			if tt.wantErr {
				if !errors.Is(err, ErrUnknownName) {
					t.Fatalf("ParseName(%q): got (%+v, %v), want an error wrapping ErrUnknownName", tt.name, n, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseName(%q): got error %v, want none", tt.name, err)
			}
			if n.Text != tt.name || n.Enum != tt.wantEnum || n.Format != tt.wantFormat || n.BuiltIn != tt.wantBuiltIn {
				t.Errorf("ParseName(%q): got %+v, want enum %d, format %s, built-in %v", tt.name, n, tt.wantEnum, tt.wantFormat, tt.wantBuiltIn)
			}
		})
	}
}

func TestUserEnumsNeverCollideWithBuiltIns(t *testing.T) {
	t.Parallel()
	for _, b := range BuiltIns() {
		if b.Enum >= UserEnumBase {
			t.Errorf("built-in %s: got enum %d, want it below UserEnumBase %d", b.Text, b.Enum, UserEnumBase)
		}
	}
	for _, name := range []string{"APerAccount", "ZzzPerIPAddress", "NewFoosPerIPAddress"} {
		n, err := ParseName(name)
		if err != nil {
			t.Fatal(err)
		}
		if n.Enum < UserEnumBase {
			t.Errorf("%s: got enum %d, want at least %d", name, n.Enum, UserEnumBase)
		}
	}
}

func TestFormatString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		f    Format
		want string
	}{
		{FormatIPAddress, "ipAddress"},
		{FormatIPv6Range, "ipv6RangeCIDR"},
		{FormatRegID, "regId"},
		{FormatIdentValue, "identValue"},
		{FormatDomainOrCIDR, "domainOrCIDR"},
		{FormatFQDNSet, "fqdnSet"},
		{FormatRegIDIdentValue, "regId:identValue"},
		{FormatRegIDDomainOrCIDR, "regId:domainOrCIDR"},
		{FormatRegIDFQDNSet, "regId:fqdnSet"},
		{0, "Format(0)"},
		{200, "Format(200)"},
	}
	for _, tt := range tests {
		t.Run("format "+tt.want+" prints its name", func(t *testing.T) {
			if got := tt.f.String(); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
