package descriptors_test

import (
	"fmt"
	"log"

	"github.com/sluice-rl/sluice/descriptors"
)

func Example() {
	d, err := descriptors.Parse("messaging.yaml", []byte(`
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
`))
	if err != nil {
		log.Fatal(err)
	}
	c, err := descriptors.New(d)
	if err != nil {
		log.Fatal(err)
	}
	req := []descriptors.Entry{{Key: "message_type", Value: "marketing"}, {Key: "to_number", Value: "2061111111"}}
	r := c.Match("messaging", req)
	fmt.Println(r)
	fmt.Println(r.CacheKey(req))
	fmt.Println(c.Match("messaging", req[:1]))
	// Output:
	// messaging.message_type_marketing.to_number: unit=DAY requests_per_unit=5, shadow_mode: false, quota_mode: false
	// messaging_message_type_marketing_to_number_2061111111_
	// <nil>
}

func ExampleParse_errors() {
	_, err := descriptors.Parse("ratelimit.yaml", []byte(`domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit: {unit: second, requests_per_unit: 500}
  - key: database
    value: users
    rate_limit: {unit: fortnight, requests_per_unit: 500}
`))
	fmt.Println(err)
	// Output:
	// ratelimit.yaml:6: duplicate descriptor key_value "database_users" in domain "mongo_cps"
	// ratelimit.yaml:8: invalid rate limit unit "fortnight", must be one of second, minute, hour, day, week, month, year
}
