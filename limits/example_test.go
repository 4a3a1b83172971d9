package limits_test

import (
	"errors"
	"fmt"

	"github.com/sluice-rl/sluice/limits"
)

func Example() {
	defaults, err := limits.ParseDefaults("defaults.yaml", []byte(`
NewRegistrationsPerIPAddress:
  burst: 20
  count: 20
  period: 1s
NewOrdersPerAccount:
  burst: 300
  count: 300
  period: 180m
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	overrides, err := limits.ParseOverrides("overrides.yaml", []byte(`
- NewOrdersPerAccount:
    burst: 300
    count: 600
    period: 180m
    ids:
      - 12345678
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	set, err := limits.New(defaults, overrides)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, id := range []string{"12345678", "87654321"} {
		b, err := set.Resolve(limits.NewOrdersPerAccount, id)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s: %d per %s, burst %d, override %v\n", b.Key, b.Limit.Count, b.Limit.Period, b.Limit.Burst, b.Override)
	}
	// Output:
	// 3:12345678: 600 per 3h0m0s, burst 300, override true
	// 3:87654321: 300 per 3h0m0s, burst 300, override false
}

func ExampleSet_Resolve() {
	overrides, err := limits.ParseOverrides("overrides.yaml", []byte(`
NewRegistrationsPerIPv6Range:2001:db8:1::/48:
  burst: 100
  count: 100
  period: 3h
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	set, err := limits.New(nil, overrides)
	if err != nil {
		fmt.Println(err)
		return
	}
	// The range limit takes an address and counts its /48.
	b, _ := set.Resolve(limits.NewRegistrationsPerIPv6Range, "2001:db8:1:2::99")
	fmt.Println(b.Key, b.Enabled, b.Limit.Burst)
	// A name with neither a default nor an override is not enforced.
	b, _ = set.Resolve(limits.NewOrdersPerAccount, "42")
	fmt.Println(b.Key, b.Enabled)
	// A malformed id is an error naming the limit, the id and the rule.
	_, err = set.Resolve(limits.NewRegistrationsPerIPv6Range, "10.0.0.1")
	fmt.Println(errors.Is(err, limits.ErrInvalidID), err)
	// Output:
	// 2:2001:db8:1::/48 true 100
	// 3:42 false
	// true invalid id "10.0.0.1" for NewRegistrationsPerIPv6Range: must be an IPv6 address, not IPv4
}

func ExampleBucketKey() {
	for _, c := range []struct{ name, id string }{
		{limits.NewOrdersPerAccount, "12345678"},
		{limits.CertificatesPerDomain, "www.Example.co.uk"},
		{limits.CertificatesPerDomain, "2001:db8:eeee:eeee::1"},
		{limits.CertificatesPerDomainPerAccount, "12345678:www.example.com"},
		{limits.CertificatesPerFQDNSet, "example.org,example.com"},
		{"NewFoosPerIPAddress", "172.23.45.22"},
	} {
		key, err := limits.BucketKey(c.name, c.id)
		fmt.Println(key, err)
	}
	// Output:
	// 3:12345678 <nil>
	// 5:example.co.uk <nil>
	// 5:2001:db8:eeee:eeee::/64 <nil>
	// 6:12345678:example.com <nil>
	// 7:36b9d2294255745d0f491b3f04f6490de45cc7241f650ba58c3e4e61a2344efc <nil>
	// 1296923630:172.23.45.22 <nil>
}

func ExampleValidateID() {
	fmt.Println(limits.ValidateID(limits.NewRegistrationsPerIPAddress, "10.0.0.1"))
	fmt.Println(limits.ValidateID(limits.NewRegistrationsPerIPAddress, "2001:0db8:0000:0000:0000:ff00:0042:8329"))
	fmt.Println(limits.ValidateID(limits.NewRegistrationsPerIPv6Range, "2001:db8::/47"))
	fmt.Println(limits.ValidateID(limits.CertificatesPerDomain, "2001:db8:eeee:eeee::1"))
	// Output:
	// <nil>
	// invalid id "2001:0db8:0000:0000:0000:ff00:0042:8329" for NewRegistrationsPerIPAddress: must be in canonical form "2001:db8::ff00:42:8329"
	// invalid id "2001:db8::/47" for NewRegistrationsPerIPv6Range: must be a /48 IPv6 range
	// invalid id "2001:db8:eeee:eeee::1" for CertificatesPerDomain: must be the lowest address of its /64 ("2001:db8:eeee:eeee::")
}

func ExampleParseName() {
	for _, s := range []string{"NewOrdersPerAccount", "NewFoosPerIPAddress", "NewFoosPerPlanet"} {
		n, err := limits.ParseName(s)
		if err != nil {
			fmt.Println(errors.Is(err, limits.ErrUnknownName))
			continue
		}
		fmt.Println(n.Text, n.Enum, n.Format, n.BuiltIn)
	}
	// Output:
	// NewOrdersPerAccount 3 regId true
	// NewFoosPerIPAddress 1296923630 ipAddress false
	// true
}

func ExampleParseOverrides_errors() {
	_, err := limits.ParseOverrides("limits.yaml", []byte(`
- NewOrdersPerAccount:
    burst: 0
    count: 600
    period: 180m
    ids: [12345678, abc]
`))
	fmt.Println(err)
	var list limits.ErrorList
	if errors.As(err, &list) {
		fmt.Println(len(list), list[1].Line, list[1].ID, errors.Is(list[1], limits.ErrInvalidID))
	}
	// Output:
	// limits.yaml:3: invalid burst 0 for NewOrdersPerAccount, must be > 0
	// limits.yaml:6: invalid id "abc" for NewOrdersPerAccount: must be a decimal account id (digits only)
	// 2 6 abc true
}
