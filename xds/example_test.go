package xds_test

import (
	"fmt"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/sluice-rl/sluice/descriptors"
	"github.com/sluice-rl/sluice/xds"
)

// A RateLimitConfig resource, as a management server sends it, becomes
// the same rules as the equivalent domain file.
func ExampleDomain() {
	d, err := xds.Domain(&rlsconfv3.RateLimitConfig{
		Name:   "mongo",
		Domain: "mongo_cps",
		Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key:       "database",
			Value:     "users",
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 500},
		}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg, _ := descriptors.New(d)
	fmt.Print(cfg)
	// Output:
	// mongo_cps.database_users: unit=SECOND requests_per_unit=500, shadow_mode: false, quota_mode: false
}

// An invalid resource is refused with its name and the path of the bad
// field; a Client sends this text back in its NACK.
func ExampleDomain_invalid() {
	_, err := xds.Domain(&rlsconfv3.RateLimitConfig{
		Name:        "mongo",
		Domain:      "mongo_cps",
		Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "database", RateLimit: &rlsconfv3.RateLimitPolicy{RequestsPerUnit: 500}}},
	})
	fmt.Println(err)
	// Output:
	// RateLimitConfig "mongo": descriptors[0].rate_limit: rate_limit needs a unit (second, minute, hour, day, week, month or year) or unlimited: true
}
