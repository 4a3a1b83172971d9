package app_test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/app"
)

const sprayConfig = `domain: spray
descriptors:
  - key: victim
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: garbage
    rate_limit: {unit: day, requests_per_unit: 1}
`

// TestSprayingKeysDoesNotUnblockExhaustedBuckets exhausts Envoy and
// key-value buckets in a small memory store, then sends 20,000 distinct
// keys of a day-long limit: the exhausted buckets must still deny.
func TestSprayingKeysDoesNotUnblockExhaustedBuckets(t *testing.T) {
	dir := t.TempDir()
	defaults := filepath.Join(dir, "defaults.yaml")
	writeFile(t, defaults, seedDefaults)
	ta := start(t, map[string]string{"spray.yaml": sprayConfig}, func(o *app.Options) {
		o.MemoryMaxEntries = 2560 // 10 per shard
		o.LimitsPath = defaults
	})
	victims := []string{"a", "b", "c"}
	accounts := []string{"1001", "1002", "1003"}
	spendAccount := func(acct string, cost int) (int, string) {
		return ta.post(t, "http://"+ta.HTTPAddr()+"/v1/spend", fmt.Sprintf(`{"name": "NewOrdersPerAccount", "id": %q, "cost": %d}`, acct, cost))
	}
	for _, v := range victims {
		if resp := ta.ask(t, "spray", desc("victim", v)); resp.OverallCode != ok {
			t.Fatalf("first hit on victim %s: got %v, want OK", v, resp.OverallCode)
		}
		if resp := ta.ask(t, "spray", desc("victim", v)); resp.OverallCode != over {
			t.Fatalf("second hit on victim %s: got %v, want OVER_LIMIT", v, resp.OverallCode)
		}
	}
	for _, a := range accounts {
		if code, body := spendAccount(a, 300); code != http.StatusOK || !strings.Contains(body, `"allowed":true`) {
			t.Fatalf("spending account %s's burst: got %d %s, want allowed", a, code, body)
		}
	}

	for round := range 20 {
		req := &rlsv3.RateLimitRequest{Domain: "spray"}
		for i := range 1000 {
			req.Descriptors = append(req.Descriptors, desc("garbage", fmt.Sprint(round, "-", i)))
		}
		ta.askReq(t, req)
	}

	for _, v := range victims {
		if resp := ta.ask(t, "spray", desc("victim", v)); resp.OverallCode != over {
			t.Errorf("victim %s after the spray: got %v, want still OVER_LIMIT", v, resp.OverallCode)
		}
	}
	for _, a := range accounts {
		if code, body := spendAccount(a, 1); code != http.StatusOK || !strings.Contains(body, `"allowed":false`) {
			t.Errorf("account %s after the spray: got %d %s, want still denied", a, code, body)
		}
	}
}
