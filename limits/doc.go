// Package limits describes Sluice's key-value limits, in the format of Let's
// Encrypt's Boulder: limit names, the id format each name takes, the
// defaults and overrides files, and the bucket keys under which a store keeps
// a bucket's state.
//
// # Names
//
// A limit name is one of Boulder's built-in names, with Boulder's enum
// numbers:
//
//	1 NewRegistrationsPerIPAddress                       ipAddress
//	2 NewRegistrationsPerIPv6Range                       ipv6RangeCIDR
//	3 NewOrdersPerAccount                                regId
//	4 FailedAuthorizationsPerDomainPerAccount            regId:identValue
//	5 CertificatesPerDomain                              domainOrCIDR
//	6 CertificatesPerDomainPerAccount                    regId:domainOrCIDR
//	7 CertificatesPerFQDNSet                             fqdnSet
//	8 FailedAuthorizationsForPausingPerDomainPerAccount  regId:identValue
//	9 LimitOverrideRequestsPerIPAddress                  ipAddress
//
// The older Boulder name CertificatesPerFQDNSetPerAccount (regId:fqdnSet) is
// accepted too, with the fixed enum number 100.
//
// Any other name is user-defined if it matches ^[A-Z][A-Za-z0-9]*Per<F>$,
// where the suffix Per<F> gives its id format:
//
//	…PerIPAddress          ipAddress
//	…PerIPv6Range          ipv6RangeCIDR
//	…PerAccount            regId
//	…PerDomain             domainOrCIDR
//	…PerFQDNSet            fqdnSet
//	…PerDomainPerAccount   regId:identValue
//	…PerFQDNSetPerAccount  regId:fqdnSet
//
// (the longest matching suffix wins). A user-defined name's enum number is
// 1000 plus the 32-bit FNV-1a hash of the name. It depends on nothing but the
// name, so it is the same across restarts, machines and edits of the files,
// and it never equals a built-in number. Two user-defined names whose numbers
// collide cannot be loaded together: the load reports the collision, and one
// of them must be renamed. Every other name is an unknown limit name and is
// rejected with an error wrapping ErrUnknownName.
//
// # Ids and bucket keys
//
// A bucket key is "<enum>:<id>", for example "3:12345678". Ids come in two
// flavours:
//
//   - Override ids, written in the overrides file, must already be in
//     canonical form (the canonical IP address text, a masked /48, a decimal
//     account id without leading zeros, lower-case domains without a trailing
//     dot); ValidateID checks them and OverrideKey builds their key.
//   - Natural ids, given by callers at the API, are canonicalised first: an
//     IPv6 address is reduced to its /48 for NewRegistrationsPerIPv6Range, a
//     domain to its eTLD+1 for CertificatesPerDomain (an IPv4 address to its
//     /32 and an IPv6 address to its /64, written in CIDR notation, as
//     Boulder does), and a set of identifiers to the SHA-256 hex of its
//     lower-cased, sorted, de-duplicated members joined by commas. BucketKey
//     builds their key.
//
// Names whose format starts with regId: are counted per account and per
// domain (or set): their natural id is "regId:value" and their bucket key
// "<enum>:regId:value", but an override for them is usually written with the
// bare account id, "<enum>:regId", and then applies to every bucket of that
// account, as in Boulder. An override with the full "regId:value" id (the
// older README's form) applies to that one bucket and wins over the
// account-wide one.
//
// # Files and sets
//
// ParseDefaults and ParseOverrides read the two YAML files strictly and
// report every problem they find, each with its file and line, as an
// ErrorList. New combines a Defaults and an Overrides into a Set, an
// immutable snapshot whose Resolve turns a name and a natural id into a
// Bucket: its key and the limit that applies, taken from an override, else
// the name's default, else none (the limit is disabled and every request is
// allowed).
package limits
