package app_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/app"
	"github.com/sluice-rl/sluice/client"
	"github.com/sluice-rl/sluice/limits"
)

// TestKeyValueAPIThroughTheService exercises the sluice.v1.Limits API of a
// running service over gRPC and HTTP, sharing buckets, and sees an
// overrides reload take effect.
func TestKeyValueAPIThroughTheService(t *testing.T) {
	dir := t.TempDir()
	defaults, overrides := filepath.Join(dir, "defaults.yaml"), filepath.Join(dir, "overrides.yaml")
	writeFile(t, defaults, seedDefaults)
	writeFile(t, overrides, overridesFile(600))
	ta := start(t, nil, func(o *app.Options) { o.LimitsPath, o.OverridesPath = defaults, overrides })

	c, err := client.Dial(ta.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Ten spends over gRPC, ten over HTTP: one bucket.
	for i := range 10 {
		d, err := c.Spend(ctx, limits.NewRegistrationsPerIPAddress, "192.0.2.7", 1)
		if err != nil || !d.Allowed {
			t.Fatalf("gRPC spend %d: got %+v, %v", i, d, err)
		}
	}
	for i := range 10 {
		code, body := ta.post(t, "http://"+ta.HTTPAddr()+"/v1/spend", `{"name": "NewRegistrationsPerIPAddress", "id": "192.0.2.7", "cost": 1}`)
		if code != http.StatusOK || !strings.Contains(body, `"allowed":true`) {
			t.Fatalf("HTTP spend %d: got %d %s", i, code, body)
		}
	}
	d, err := c.Spend(ctx, limits.NewRegistrationsPerIPAddress, "192.0.2.7", 1)
	if err != nil || d.Allowed || d.RetryIn <= 0 || d.RetryIn > 50*time.Millisecond {
		t.Fatalf("21st spend: got %+v, %v; want denied with retry_in in (0, 50ms]", d, err)
	}
	resp, err := ta.http.Post("http://"+ta.HTTPAddr()+"/v1/spend", "application/json", strings.NewReader(`{"name": "NewRegistrationsPerIPAddress", "id": "192.0.2.7"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("denied over HTTP: got %d with Retry-After %q, want 200 and the header", resp.StatusCode, resp.Header.Get("Retry-After"))
	}

	// The override applies, and follows a reload of its file.
	d, err = c.Check(ctx, limits.NewOrdersPerAccount, "12345678", 0)
	if err != nil || d.Limit.Count != 600 {
		t.Fatalf("override: got %+v, %v; want count 600", d, err)
	}
	writeFile(t, overrides, overridesFile(900))
	eventually(t, "the reloaded override", func() bool {
		d, err := c.Check(ctx, limits.NewOrdersPerAccount, "12345678", 0)
		return err == nil && d.Limit.Count == 900
	})
	if _, err := c.Spend(ctx, "NoSuchLimit", "1", 1); !client.IsInvalid(err) {
		t.Fatalf("unknown name: got %v, want InvalidArgument", err)
	}
}
