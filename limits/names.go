package limits

import (
	"fmt"
	"strconv"
	"strings"
)

// The built-in limit names, Boulder's, for use with Set.Resolve and the other
// functions that take a name.
const (
	NewRegistrationsPerIPAddress                      = "NewRegistrationsPerIPAddress"                      // enum 1, ipAddress
	NewRegistrationsPerIPv6Range                      = "NewRegistrationsPerIPv6Range"                      // enum 2, ipv6RangeCIDR
	NewOrdersPerAccount                               = "NewOrdersPerAccount"                               // enum 3, regId
	FailedAuthorizationsPerDomainPerAccount           = "FailedAuthorizationsPerDomainPerAccount"           // enum 4, regId:identValue
	CertificatesPerDomain                             = "CertificatesPerDomain"                             // enum 5, domainOrCIDR
	CertificatesPerDomainPerAccount                   = "CertificatesPerDomainPerAccount"                   // enum 6, regId:domainOrCIDR
	CertificatesPerFQDNSet                            = "CertificatesPerFQDNSet"                            // enum 7, fqdnSet
	FailedAuthorizationsForPausingPerDomainPerAccount = "FailedAuthorizationsForPausingPerDomainPerAccount" // enum 8, regId:identValue
	LimitOverrideRequestsPerIPAddress                 = "LimitOverrideRequestsPerIPAddress"                 // enum 9, ipAddress

	// CertificatesPerFQDNSetPerAccount is the older Boulder README's name; it
	// is accepted with the enum number LegacyFQDNSetPerAccountEnum.
	CertificatesPerFQDNSetPerAccount = "CertificatesPerFQDNSetPerAccount"
)

// LegacyFQDNSetPerAccountEnum is the enum number of
// CertificatesPerFQDNSetPerAccount, kept apart from Boulder's current numbers
// so that a name Boulder adds later does not collide with it.
const LegacyFQDNSetPerAccountEnum = 100

// UserEnumBase is the smallest enum number a user-defined name can have: a
// user-defined name's number is UserEnumBase plus the 32-bit FNV-1a hash of
// the name.
const UserEnumBase = 1000

// Format is the format of a limit's ids. The zero value is not a format.
type Format uint8

// The id formats, named as in Boulder's README.
const (
	// FormatIPAddress is an IPv4 or IPv6 address, in the canonical text
	// form of net/netip ("10.0.0.1", "2001:db8::1").
	FormatIPAddress Format = iota + 1
	// FormatIPv6Range is an IPv6 /48 in CIDR notation, masked
	// ("2001:db8:1::/48"). Its natural id is an IPv6 address.
	FormatIPv6Range
	// FormatRegID is an ACME account id, a decimal unsigned 64-bit number.
	FormatRegID
	// FormatIdentValue is an identifier value: a domain name or an IP
	// address.
	FormatIdentValue
	// FormatDomainOrCIDR is an eTLD+1 domain name, or an IP address; an IPv6
	// address must be the lowest of its /64. Natural ids are reduced to
	// their eTLD+1, /32 or /64.
	FormatDomainOrCIDR
	// FormatFQDNSet is a comma-separated list of identifier values; its key
	// is the SHA-256 hex of the normalised list.
	FormatFQDNSet
	// FormatRegIDIdentValue is "regId:identValue" in a bucket key, and
	// "regId" or "regId:identValue" in an override.
	FormatRegIDIdentValue
	// FormatRegIDDomainOrCIDR is "regId:domainOrCIDR" in a bucket key, and
	// "regId" or "regId:domainOrCIDR" in an override.
	FormatRegIDDomainOrCIDR
	// FormatRegIDFQDNSet is "regId:fqdnSet" in a bucket key, and "regId" or
	// "regId:fqdnSet" in an override.
	FormatRegIDFQDNSet
)

var formatNames = [...]string{
	FormatIPAddress:         "ipAddress",
	FormatIPv6Range:         "ipv6RangeCIDR",
	FormatRegID:             "regId",
	FormatIdentValue:        "identValue",
	FormatDomainOrCIDR:      "domainOrCIDR",
	FormatFQDNSet:           "fqdnSet",
	FormatRegIDIdentValue:   "regId:identValue",
	FormatRegIDDomainOrCIDR: "regId:domainOrCIDR",
	FormatRegIDFQDNSet:      "regId:fqdnSet",
}

// String returns the format's name as Boulder's README writes it, such as
// "ipv6RangeCIDR".
func (f Format) String() string {
	if f == 0 || int(f) >= len(formatNames) {
		return "Format(" + strconv.Itoa(int(f)) + ")"
	}
	return formatNames[f]
}

// perAccount reports whether f is one of the regId:… formats, whose
// overrides may be keyed by the bare account id.
func (f Format) perAccount() bool {
	return f == FormatRegIDIdentValue || f == FormatRegIDDomainOrCIDR || f == FormatRegIDFQDNSet
}

// Name describes a limit name: its text, enum number and id format. The zero
// value describes no name. Build one with ParseName.
type Name struct {
	// Text is the name as written in the files, such as
	// "NewOrdersPerAccount".
	Text string
	// Enum is the number that stands for the name in bucket keys.
	Enum int64
	// Format is the format of the name's ids.
	Format Format
	// BuiltIn is true for Boulder's names (and the legacy
	// CertificatesPerFQDNSetPerAccount), false for user-defined ones.
	BuiltIn bool
}

// String returns n.Text.
func (n Name) String() string { return n.Text }

var builtins = []Name{
	{NewRegistrationsPerIPAddress, 1, FormatIPAddress, true},
	{NewRegistrationsPerIPv6Range, 2, FormatIPv6Range, true},
	{NewOrdersPerAccount, 3, FormatRegID, true},
	{FailedAuthorizationsPerDomainPerAccount, 4, FormatRegIDIdentValue, true},
	{CertificatesPerDomain, 5, FormatDomainOrCIDR, true},
	{CertificatesPerDomainPerAccount, 6, FormatRegIDDomainOrCIDR, true},
	{CertificatesPerFQDNSet, 7, FormatFQDNSet, true},
	{FailedAuthorizationsForPausingPerDomainPerAccount, 8, FormatRegIDIdentValue, true},
	{LimitOverrideRequestsPerIPAddress, 9, FormatIPAddress, true},
	{CertificatesPerFQDNSetPerAccount, LegacyFQDNSetPerAccountEnum, FormatRegIDFQDNSet, true},
}

var builtinByText = func() map[string]Name {
	m := make(map[string]Name, len(builtins))
	for _, n := range builtins {
		m[n.Text] = n
	}
	return m
}()

// BuiltIns returns the built-in names in enum order. The caller may modify
// the returned slice.
func BuiltIns() []Name {
	return append([]Name(nil), builtins...)
}

// userSuffixes maps the suffix of a user-defined name to its format, longest
// suffix first so that …PerDomainPerAccount is not taken for …PerAccount.
var userSuffixes = []struct {
	suffix string
	format Format
}{
	{"PerFQDNSetPerAccount", FormatRegIDFQDNSet},
	{"PerDomainPerAccount", FormatRegIDIdentValue},
	{"PerIPv6Range", FormatIPv6Range},
	{"PerIPAddress", FormatIPAddress},
	{"PerFQDNSet", FormatFQDNSet},
	{"PerDomain", FormatDomainOrCIDR},
	{"PerAccount", FormatRegID},
}

// ParseName returns the description of the limit name s: a built-in name, or
// a user-defined one following the rule in the package documentation. Any
// other s yields an error wrapping ErrUnknownName.
func ParseName(s string) (Name, error) {
	if n, ok := builtinByText[s]; ok {
		return n, nil
	}
	if f, ok := userFormat(s); ok {
		return Name{Text: s, Enum: userEnum(s), Format: f}, nil
	}
	return Name{}, &NameError{Name: s}
}

// userFormat returns the format of the user-defined name s, if s is one.
func userFormat(s string) (Format, bool) {
	if s == "" || s[0] < 'A' || s[0] > 'Z' {
		return 0, false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return 0, false
		}
	}
	for _, u := range userSuffixes {
		// At least one character must come before the suffix.
		if len(s) > len(u.suffix) && strings.HasSuffix(s, u.suffix) {
			return u.format, true
		}
	}
	return 0, false
}

// userEnum is UserEnumBase plus the 32-bit FNV-1a hash of s.
func userEnum(s string) int64 {
	const (
		offset32 = 2166136261
		prime32  = 16777619
	)
	var h uint32 = offset32
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= prime32
	}
	return UserEnumBase + int64(h)
}

// NameError reports a limit name that is neither built in nor a valid
// user-defined name. It wraps ErrUnknownName.
type NameError struct {
	Name string // the name as given
}

// Error says which name is unknown and what names are accepted.
func (e *NameError) Error() string {
	return fmt.Sprintf("unknown limit name %s: want a built-in name or one matching ^[A-Z][A-Za-z0-9]*Per(IPAddress|IPv6Range|Account|Domain|FQDNSet|DomainPerAccount|FQDNSetPerAccount)$", Quote(e.Name))
}

// Unwrap returns ErrUnknownName.
func (e *NameError) Unwrap() error { return ErrUnknownName }
