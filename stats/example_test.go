package stats_test

import (
	"fmt"

	"github.com/sluice-rl/sluice/stats"
)

func ExampleName() {
	fmt.Println(stats.Name("edge.remote_address_10.0.0.1"))
	fmt.Println(stats.Name("api.path_/v1|x:y"))
	// Output:
	// edge.remote_address_10_0_0_1
	// api.path_/v1_x_y
}

func ExampleStats_Rule() {
	st := stats.New()
	r := st.Rule("mongo_cps.database_users") // looked up once, then kept
	r.TotalHits.Add(3)
	r.WithinLimit.Add(3)
	fmt.Println(st.Rule("mongo_cps.database_users").TotalHits.Load(), len(st.Rules()))
	// Output: 3 1
}
