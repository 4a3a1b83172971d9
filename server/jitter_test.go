package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/server"
	"github.com/sluice-rl/sluice/store/memory"
)

// With RetryJitter, a denied answer's retry_in, and so its Retry-After,
// grows by the random fraction of 3%; allowed answers and answers without
// the option are exact.
func TestRetryJitterLengthensDeniedWaitsByUpTo3Percent(t *testing.T) {
	t.Parallel()
	set := seedLimits(t)
	// NewOrdersPerAccount: 300 per 3h, 36s per token.
	newKV := func(jitter bool, u float64) *server.KV {
		return server.NewKV(server.KVOptions{
			Limiter:     limiter.New(memory.New(memory.Options{}), clock.NewFake(start)),
			Limits:      func() *limits.Set { return set },
			RetryJitter: jitter,
			Rand:        func() float64 { return u },
		})
	}
	post := func(kv *server.KV, path, body string) (*http.Response, httpDecision) {
		t.Helper()
		srv := httptest.NewServer(server.KVHTTPHandler(kv))
		defer srv.Close()
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var d httpDecision
		if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
			t.Fatal(err)
		}
		return resp, d
	}
	exhaust := `{"name": "NewOrdersPerAccount", "id": "555", "cost": 300}`
	denied := `{"name": "NewOrdersPerAccount", "id": "555"}`
	tests := []struct {
		name       string
		jitter     bool
		u          float64
		wantRetry  string
		wantHeader string
	}{
		{name: "off: exact", jitter: false, u: 0.99, wantRetry: "36s", wantHeader: "36"},
		{name: "on, drawing 0: exact", jitter: true, u: 0, wantRetry: "36s", wantHeader: "36"},
		{name: "on, drawing 0.5: 1.5% longer", jitter: true, u: 0.5, wantRetry: "36.54s", wantHeader: "37"},
		{name: "on, drawing 0.999: nearly 3% longer", jitter: true, u: 0.999, wantRetry: "37.078920s", wantHeader: "38"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kv := newKV(tt.jitter, tt.u)
			if _, d := post(kv, "/v1/spend", exhaust); !d.Allowed || d.RetryIn != "3h0m0s" {
				t.Fatalf("allowed spend: got %+v, want allowed with retry_in 3h0m0s, untouched by jitter", d)
			}
			resp, d := post(kv, "/v1/spend", denied)
			want, _ := time.ParseDuration(tt.wantRetry)
			if got, _ := time.ParseDuration(d.RetryIn); d.Allowed || got != want {
				t.Errorf("denied spend: got allowed %t retry_in %s, want denied with %s", d.Allowed, d.RetryIn, want)
			}
			if got := resp.Header.Get("Retry-After"); got != tt.wantHeader {
				t.Errorf("Retry-After: got %q, want %q", got, tt.wantHeader)
			}
			// A batch draws once: its combined decision and the denied
			// transaction agree.
			resp, _ = post(kv, "/v1/batch", `{"transactions": [`+denied+`]}`)
			if got := resp.Header.Get("Retry-After"); got != tt.wantHeader {
				t.Errorf("batch Retry-After: got %q, want %q", got, tt.wantHeader)
			}
			// gRPC answers the same retry_in.
			g, err := kv.Check(context.Background(), &sluicev1.Request{Name: "NewOrdersPerAccount", Id: "555"})
			if err != nil {
				t.Fatal(err)
			}
			if got := g.GetRetryIn().AsDuration(); got != want {
				t.Errorf("gRPC check retry_in: got %s, want %s", got, want)
			}
		})
	}
}
