package limits

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/publicsuffix"
)

// ValidateID reports whether id is a valid override id for the limit name,
// already in canonical form, as the overrides file requires. The error wraps
// ErrUnknownName or, as an *IDError, ErrInvalidID.
func ValidateID(name, id string) error {
	_, err := OverrideKey(name, id)
	return err
}

// OverrideKey returns the bucket key of the override for name and id, where
// id is written as in the overrides file (see ValidateID): "3:12345678" for
// NewOrdersPerAccount and "12345678", the hash for a CertificatesPerFQDNSet
// list, the covering prefix for a CertificatesPerDomain IP address.
func OverrideKey(name, id string) (string, error) {
	n, err := ParseName(name)
	if err != nil {
		return "", err
	}
	k, rule := overrideID(n.Format, id)
	if rule != "" {
		return "", &IDError{Name: name, ID: id, Rule: rule}
	}
	return enumPrefix(n.Enum) + k, nil
}

// Validate reports whether id is a valid override id in format f, in
// canonical form; see ValidateID, which also checks the name. The error is
// an *IDError whose Name is the format's name, wrapping ErrInvalidID.
func (f Format) Validate(id string) error {
	if _, rule := overrideID(f, id); rule != "" {
		return &IDError{Name: f.String(), ID: id, Rule: rule}
	}
	return nil
}

// BucketKey returns the bucket key for the natural id of name, the
// identifier a caller has at hand: an IP address, an account id, a domain, a
// comma-separated set of identifiers, or "regId:domain". The id is
// canonicalised as described in the package documentation. The error wraps
// ErrUnknownName or, as an *IDError, ErrInvalidID.
func BucketKey(name, id string) (string, error) {
	n, err := ParseName(name)
	if err != nil {
		return "", err
	}
	var buf [128]byte
	dst := strconv.AppendInt(buf[:0], n.Enum, 10)
	dst = append(dst, ':')
	dst, _, rule := appendNatural(dst, n.Format, id)
	if rule != "" {
		return "", &IDError{Name: name, ID: id, Rule: rule}
	}
	return string(dst), nil
}

// enumPrefix returns "<enum>:".
func enumPrefix(enum int64) string {
	return strconv.FormatInt(enum, 10) + ":"
}

// overrideID checks id, an override id in format f, and returns the part of
// the bucket key after "<enum>:". A non-empty rule says what is wrong.
func overrideID(f Format, id string) (key, rule string) {
	if id == "" {
		return "", "must not be empty"
	}
	switch f {
	case FormatIPAddress:
		return id, ipRule(id)
	case FormatIPv6Range:
		return id, rangeRule(id)
	case FormatRegID:
		return id, regIDRule(id)
	case FormatIdentValue:
		return id, identRule(id)
	case FormatDomainOrCIDR:
		return domainOrCIDRKey(id)
	case FormatFQDNSet:
		return fqdnSetKey(id, true)
	case FormatRegIDIdentValue, FormatRegIDDomainOrCIDR, FormatRegIDFQDNSet:
		acct, value, ok := strings.Cut(id, ":")
		if r := regIDRule(acct); r != "" {
			return "", fmt.Sprintf("regId %q %s", acct, r)
		}
		if !ok {
			// The bare account id: an override for all the account's
			// buckets.
			return id, ""
		}
		sub := f.valueFormat()
		k, r := overrideID(sub, value)
		if r != "" {
			return "", fmt.Sprintf("%s %q %s", sub, value, r)
		}
		return acct + ":" + k, ""
	}
	return "", "has an unknown format " + f.String()
}

// unreachable reports whether id, an override id in format f that
// overrideID refused, is one Boulder accepts but whose bucket no request
// ever uses: a valid domain that is not an eTLD+1 (requests are counted
// under the eTLD+1), or an address or /48 range not in canonical form
// (requests are counted under the canonical form). want is the id that
// would apply, such as "le.wtf" for "ecdsa.le.wtf", "12345678:le.wtf" for
// the regId:domain formats, or "2001:db8::/48" for "2001:0db8:0000::/48".
func unreachable(f Format, id string) (want string, ok bool) {
	switch f {
	case FormatIPAddress:
		a, err := netip.ParseAddr(id)
		if err == nil && a.Zone() == "" && a.Unmap().String() != id {
			return a.Unmap().String(), true
		}
	case FormatIPv6Range:
		p, err := netip.ParsePrefix(id)
		if err == nil && p.Addr().Is6() && p.Bits() == 48 && p.Masked() == p && p.String() != id {
			return p.String(), true
		}
	case FormatDomainOrCIDR:
		if looksLikeIP(id) || domainRule(id) != "" {
			return "", false
		}
		if c := cover(id); c != id {
			return c, true
		}
	case FormatRegIDDomainOrCIDR:
		acct, value, found := strings.Cut(id, ":")
		if !found || regIDRule(acct) != "" {
			return "", false
		}
		if w, ok := unreachable(FormatDomainOrCIDR, value); ok {
			return acct + ":" + w, true
		}
	}
	return "", false
}

// valueFormat is the format of the part after "regId:" in f.
func (f Format) valueFormat() Format {
	switch f {
	case FormatRegIDIdentValue:
		return FormatIdentValue
	case FormatRegIDDomainOrCIDR:
		return FormatDomainOrCIDR
	case FormatRegIDFQDNSet:
		return FormatFQDNSet
	}
	return 0
}

// appendNatural appends the canonical key part of the natural id in format f
// to dst. For the regId:… formats, acct is the length of dst up to the end
// of the account id (so dst[:acct] is the account-wide override key), else
// -1. A non-empty rule says what is wrong.
func appendNatural(dst []byte, f Format, id string) (_ []byte, acct int, rule string) {
	if id == "" {
		return dst, -1, "must not be empty"
	}
	switch f {
	case FormatIPAddress:
		a, r := naturalAddr(id)
		if r != "" {
			return dst, -1, r
		}
		return a.AppendTo(dst), -1, ""
	case FormatIPv6Range:
		p, r := naturalRange(id)
		if r != "" {
			return dst, -1, r
		}
		return p.AppendTo(dst), -1, ""
	case FormatRegID:
		dst, r := appendRegID(dst, id)
		return dst, -1, r
	case FormatIdentValue:
		dst, r := appendIdent(dst, id)
		return dst, -1, r
	case FormatDomainOrCIDR:
		dst, r := appendCover(dst, id)
		return dst, -1, r
	case FormatFQDNSet:
		dst, r := appendFQDNSetKey(dst, id, false)
		return dst, -1, r
	case FormatRegIDIdentValue, FormatRegIDDomainOrCIDR, FormatRegIDFQDNSet:
		sub := f.valueFormat()
		acctID, value, ok := strings.Cut(id, ":")
		if !ok {
			return dst, -1, "must be formatted 'regId:" + sub.String() + "'"
		}
		dst, r := appendRegID(dst, acctID)
		if r != "" {
			return dst, -1, fmt.Sprintf("regId %q %s", acctID, r)
		}
		acct = len(dst)
		dst = append(dst, ':')
		dst, _, r = appendNatural(dst, sub, value)
		if r != "" {
			return dst, -1, fmt.Sprintf("%s %q %s", sub, value, r)
		}
		return dst, acct, ""
	}
	return dst, -1, "has an unknown format " + f.String()
}

// ipRule checks a strict IP address.
func ipRule(id string) string {
	if id == "" {
		return "must not be empty"
	}
	a, err := netip.ParseAddr(id)
	if err != nil {
		if strings.Contains(id, "/") {
			return "must be an IPv4 or IPv6 address, without a CIDR mask"
		}
		return "must be an IPv4 or IPv6 address"
	}
	if a.Zone() != "" {
		return "must not have an IPv6 zone"
	}
	if c := a.Unmap().String(); c != id {
		return fmt.Sprintf("must be in canonical form %q", c)
	}
	return ""
}

// naturalAddr parses a natural IP address: any form netip accepts, without
// a zone, IPv4-mapped IPv6 addresses taken as IPv4.
func naturalAddr(id string) (netip.Addr, string) {
	a, err := netip.ParseAddr(id)
	if err != nil {
		return a, "must be an IPv4 or IPv6 address"
	}
	if a.Zone() != "" {
		return a, "must not have an IPv6 zone"
	}
	return a.Unmap(), ""
}

// rangeRule checks a strict IPv6 /48.
func rangeRule(id string) string {
	p, err := netip.ParsePrefix(id)
	if err != nil {
		if _, err := netip.ParseAddr(id); err == nil {
			return "must be a /48 IPv6 range in CIDR notation, not an address"
		}
		return "must be a /48 IPv6 range in CIDR notation"
	}
	if p.Addr().Is4() {
		return "must be a /48 IPv6 range, not IPv4"
	}
	if p.Bits() != 48 {
		return "must be a /48 IPv6 range"
	}
	m := p.Masked()
	if m != p {
		return fmt.Sprintf("must have no host bits set: canonical form is %q", m.String())
	}
	if c := m.String(); c != id {
		return fmt.Sprintf("must be in canonical form %q", c)
	}
	return ""
}

// naturalRange returns the /48 holding the natural id, an IPv6 address (or
// a /48 range).
func naturalRange(id string) (netip.Prefix, string) {
	if strings.IndexByte(id, '/') >= 0 {
		p, err := netip.ParsePrefix(id)
		switch {
		case err != nil:
			return p, "must be an IPv6 address or /48 range"
		case p.Addr().Is4() || p.Addr().Is4In6():
			return p, "must be an IPv6 address, not IPv4"
		case p.Bits() != 48:
			return p, "must be an IPv6 address or /48 range"
		}
		return p.Masked(), ""
	}
	a, err := netip.ParseAddr(id)
	switch {
	case err != nil:
		return netip.Prefix{}, "must be an IPv6 address"
	case a.Zone() != "":
		return netip.Prefix{}, "must not have an IPv6 zone"
	case a.Is4() || a.Is4In6():
		return netip.Prefix{}, "must be an IPv6 address, not IPv4"
	}
	p, _ := a.Prefix(48) // cannot fail: a is IPv6 without a zone
	return p, ""
}

// regIDRule checks a strict account id: a decimal uint64 without sign or
// leading zeros.
func regIDRule(id string) string {
	if id == "" {
		return "must not be empty"
	}
	for i := 0; i < len(id); i++ {
		if id[i] < '0' || id[i] > '9' {
			return "must be a decimal account id (digits only)"
		}
	}
	if len(id) > 1 && id[0] == '0' {
		return fmt.Sprintf("must not have leading zeros (%q)", strings.TrimLeft(id, "0"))
	}
	if _, err := strconv.ParseUint(id, 10, 64); err != nil {
		return "must be a decimal account id that fits in 64 bits"
	}
	return ""
}

// appendRegID appends the natural form of the account id to dst (see
// naturalRegID), or returns dst and the rule id breaks. An id of up to 19
// digits without a leading zero is its own natural form (every such number
// fits in 64 bits) and is copied as it is, without parsing.
func appendRegID(dst []byte, id string) ([]byte, string) {
	if plainRegID(id) {
		return append(dst, id...), ""
	}
	n, r := naturalRegID(id)
	if r != "" {
		return dst, r
	}
	return strconv.AppendUint(dst, n, 10), ""
}

// plainRegID reports whether id is an account id already in its natural
// form, the key's text as it is: 1 to 19 decimal digits, the first not 0.
func plainRegID(id string) bool {
	n := len(id)
	if n == 0 || n > 19 || id[0] == '0' {
		return false
	}
	for i := 0; i < n; i++ {
		if id[i] < '0' || id[i] > '9' {
			return false
		}
	}
	return true
}

// naturalRegID parses a natural account id: decimal digits only, leading
// zeros allowed.
func naturalRegID(id string) (uint64, string) {
	if id == "" {
		return 0, "must not be empty"
	}
	for i := 0; i < len(id); i++ {
		if id[i] < '0' || id[i] > '9' {
			return 0, "must be a decimal account id (digits only)"
		}
	}
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		return 0, "must be a decimal account id that fits in 64 bits"
	}
	return n, ""
}

// identRule checks a strict identifier value: a canonical IP address or a
// lower-case domain name.
func identRule(id string) string {
	if id == "" {
		return "must not be empty"
	}
	if looksLikeIP(id) {
		return ipRule(id)
	}
	return domainRule(id)
}

// looksLikeIP reports whether id is meant as an IP address: it has a colon,
// or only digits and dots. (No domain has a colon, and a domain's last label
// is never all digits.)
func looksLikeIP[T string | []byte](id T) bool {
	digits := true
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case c == ':':
			return true
		case c != '.' && (c < '0' || c > '9'):
			digits = false
		}
	}
	return digits
}

// domainRule checks a strict domain name: lower-case letters, digits and
// hyphens, at least two labels of 1 to 63 characters, no trailing dot, at
// most 253 characters, and a top-level label that is not all digits.
func domainRule(d string) string {
	switch {
	case d == "":
		return "must not be empty"
	case len(d) > 253:
		return "domain must be at most 253 characters long"
	case d[len(d)-1] == '.':
		return fmt.Sprintf("domain must not end with a dot (%q)", d[:len(d)-1])
	}
	labels, start := 0, 0
	for i := 0; i <= len(d); i++ {
		if i < len(d) && d[i] != '.' {
			c := d[i]
			switch {
			case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-':
			case 'A' <= c && c <= 'Z':
				return fmt.Sprintf("domain must be lower case (%q)", strings.ToLower(d))
			default:
				return fmt.Sprintf("domain has an invalid character %q", rune(c))
			}
			continue
		}
		label := d[start:i]
		switch {
		case label == "":
			return "domain has an empty label"
		case len(label) > 63:
			return fmt.Sprintf("domain label %q is longer than 63 characters", label)
		case label[0] == '-' || label[len(label)-1] == '-':
			return fmt.Sprintf("domain label %q must not start or end with a hyphen", label)
		}
		labels++
		start = i + 1
	}
	if labels < 2 {
		return "domain must have at least two labels"
	}
	tld := d[strings.LastIndexByte(d, '.')+1:]
	if strings.Trim(tld, "0123456789") == "" {
		return "domain must not have an all-numeric top-level label"
	}
	return ""
}

// naturalDomain lower-cases a natural domain and drops one trailing dot,
// then checks it.
func naturalDomain(id string) (string, string) {
	d := strings.TrimSuffix(id, ".")
	for i := 0; i < len(d); i++ {
		if c := d[i]; 'A' <= c && c <= 'Z' {
			d = strings.ToLower(d)
			break
		}
	}
	return d, domainRule(d)
}

// appendIdent appends the canonical form of a natural identifier value.
func appendIdent(dst []byte, id string) ([]byte, string) {
	if looksLikeIP(id) {
		a, r := naturalAddr(id)
		if r != "" {
			return dst, r
		}
		return a.AppendTo(dst), ""
	}
	d, r := naturalDomain(id)
	if r != "" {
		return dst, r
	}
	return append(dst, d...), ""
}

// cover returns the eTLD+1 of the valid domain d, or d itself when d is a
// public suffix, as Boulder does.
func cover(d string) string {
	e, err := publicsuffix.EffectiveTLDPlusOne(d)
	if err != nil {
		return d
	}
	return e
}

// coverPrefix returns the prefix an address stands for in domainOrCIDR
// keys: its /32 or /64.
func coverPrefix(a netip.Addr) netip.Prefix {
	bits := 64
	if a.Is4() {
		bits = 32
	}
	p, _ := a.Prefix(bits) // cannot fail: a is valid and has no zone
	return p
}

// domainOrCIDRKey checks a strict domainOrCIDR id and returns its key part.
func domainOrCIDRKey(id string) (string, string) {
	if looksLikeIP(id) {
		if strings.IndexByte(id, '/') >= 0 {
			return "", "must be a domain or an IP address, without a CIDR mask"
		}
		if r := ipRule(id); r != "" {
			return "", r
		}
		a := netip.MustParseAddr(id) // checked by ipRule
		p := coverPrefix(a)
		if p.Addr() != a {
			return "", fmt.Sprintf("must be the lowest address of its /64 (%q)", p.Addr().String())
		}
		return p.String(), ""
	}
	if r := domainRule(id); r != "" {
		return "", r
	}
	if c := cover(id); c != id {
		return "", fmt.Sprintf("must be an eTLD+1 domain (%q)", c)
	}
	return id, ""
}

// appendCover appends the covering identifier of a natural domainOrCIDR id:
// the eTLD+1 of a domain, the /32 or /64 of an address.
func appendCover(dst []byte, id string) ([]byte, string) {
	if looksLikeIP(id) {
		a, r := naturalAddr(id)
		if r != "" {
			return dst, r
		}
		return coverPrefix(a).AppendTo(dst), ""
	}
	d, r := naturalDomain(id)
	if r != "" {
		return dst, r
	}
	return append(dst, cover(d)...), ""
}

// fqdnSetKey checks a comma-separated set of identifier values, strictly
// (each in canonical form) or not (each canonicalised), and returns the
// SHA-256 hex of its members sorted, de-duplicated and joined by commas.
func fqdnSetKey(id string, strict bool) (string, string) {
	b, r := appendFQDNSetKey(nil, id, strict)
	return string(b), r
}

// setMember is a member of an fqdnSet: its canonical form, canon[start:end]
// of appendFQDNSetKey's buffer, and whether it is an IP address.
type setMember struct {
	start, end int
	ip         bool
}

// appendFQDNSetKey is fqdnSetKey appending the hex to dst, which it
// leaves as it was on an error. It hashes the members as Boulder hashes
// an order's identifiers: DNS names first, then IP addresses, each sorted
// by value, the same one once, joined by commas. A set of up to 16
// members and 256 bytes is canonicalised, sorted and hashed on the stack.
func appendFQDNSetKey(dst []byte, id string, strict bool) ([]byte, string) {
	if id == "" {
		return dst, "must not be empty"
	}
	var canonBuf [256]byte
	var memberBuf [16]setMember
	canon, members := canonBuf[:0], memberBuf[:0]
	for i := 0; ; i++ {
		m, rest, more := strings.Cut(id, ",")
		if !strict {
			m = strings.TrimSpace(m)
		}
		if m == "" {
			return dst, fmt.Sprintf("element %d of the set is empty", i+1)
		}
		start := len(canon)
		if strict {
			if r := identRule(m); r != "" {
				return dst, fmt.Sprintf("element %q %s", m, r)
			}
			canon = append(canon, m...)
		} else {
			var r string
			if canon, r = appendIdent(canon, m); r != "" {
				return dst, fmt.Sprintf("element %q %s", m, r)
			}
		}
		// A member that passed its checks is an address when it looks like
		// one (appendIdent and identRule tell them apart that way).
		members = append(members, setMember{start: start, end: len(canon), ip: looksLikeIP(canon[start:])})
		if !more {
			break
		}
		id = rest
	}
	slices.SortFunc(members, func(a, b setMember) int {
		if a.ip != b.ip {
			if b.ip {
				return -1
			}
			return 1
		}
		return bytes.Compare(canon[a.start:a.end], canon[b.start:b.end])
	})
	var joinedBuf [256]byte
	joined := joinedBuf[:0]
	for i, m := range members {
		v := canon[m.start:m.end]
		if i > 0 && bytes.Equal(v, canon[members[i-1].start:members[i-1].end]) {
			continue
		}
		if len(joined) > 0 {
			joined = append(joined, ',')
		}
		joined = append(joined, v...)
	}
	sum := sha256.Sum256(joined)
	return hex.AppendEncode(dst, sum[:]), ""
}
