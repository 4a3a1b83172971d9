package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/app"
)

// Batch refunds and resets (issue 15, item 5) over HTTP and gRPC: each
// bucket gets its tokens back on its own, and both need the admin token
// when one is set.
func TestKeyValueBatchRefundAndReset(t *testing.T) {
	ta := startWithAdminToken(t) // NewOrdersPerAccount: burst 300

	type decision struct {
		Allowed   bool   `json:"allowed"`
		Remaining int64  `json:"remaining"`
		Bucket    string `json:"bucket"`
		Error     string `json:"error"`
		Results   []struct {
			Allowed   bool   `json:"allowed"`
			Remaining int64  `json:"remaining"`
			Bucket    string `json:"bucket"`
		} `json:"results"`
	}
	post := func(path, auth, body string) (int, decision) {
		t.Helper()
		code, b := postAuth(t, ta, path, auth, body)
		var d decision
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("POST %s: body %q: %v", path, b, err)
		}
		return code, d
	}
	spend := func(id string, cost int) {
		t.Helper()
		code, d := post("/v1/spend", "", `{"name": "NewOrdersPerAccount", "id": "`+id+`", "cost": `+strconv.Itoa(cost)+`}`)
		if code != http.StatusOK || !d.Allowed {
			t.Fatalf("spend %d on %s: got %d %+v, want allowed", cost, id, code, d)
		}
	}
	spend("1001", 300)
	spend("1002", 250)

	two := `{"transactions": [{"name": "NewOrdersPerAccount", "id": "1001", "cost": 100}, {"name": "NewOrdersPerAccount", "id": "1002", "cost": 100}]}`
	if code, d := post("/v1/batch/refund", "", two); code != http.StatusForbidden {
		t.Fatalf("batch refund without the token: got %d %+v, want 403", code, d)
	}
	code, d := post("/v1/batch/refund", "Bearer s3cret", two)
	if code != http.StatusOK || !d.Allowed || len(d.Results) != 2 {
		t.Fatalf("batch refund: got %d %+v, want 200, allowed, 2 results", code, d)
	}
	if d.Results[0].Remaining != 100 || d.Results[1].Remaining != 150 || d.Results[0].Bucket != "3:1001" {
		t.Errorf("batch refund results: got %+v, want 100 left in 3:1001 and 150 in 3:1002", d.Results)
	}
	if d.Remaining != 100 {
		t.Errorf("batch refund combined remaining: got %d, want the least, 100", d.Remaining)
	}
	code, d = post("/v1/batch/refund", "Bearer s3cret", `{"transactions": [{"name": "NewOrdersPerAccount", "id": "1001", "kind": "check_only"}]}`)
	if code != http.StatusBadRequest || !strings.Contains(d.Error, "/v1/batch/refund") {
		t.Errorf("batch refund with a kind: got %d %q, want 400 naming the endpoint", code, d.Error)
	}

	// Over gRPC: reset both, then the two are full.
	cc, err := grpc.NewClient(ta.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	kv := sluicev1.NewLimitsClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := &sluicev1.BatchRequest{Transactions: []*sluicev1.Transaction{
		{Name: "NewOrdersPerAccount", Id: "1001"}, {Name: "NewOrdersPerAccount", Id: "1002"},
	}}
	if _, err := kv.BatchReset(ctx, req); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("gRPC BatchReset without the token: got %v, want PermissionDenied", err)
	}
	if _, err := kv.BatchRefund(ctx, req); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("gRPC BatchRefund without the token: got %v, want PermissionDenied", err)
	}
	admin := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer s3cret")
	resp, err := kv.BatchReset(admin, req)
	if err != nil {
		t.Fatalf("gRPC BatchReset: %v", err)
	}
	for i, r := range resp.GetResults() {
		if r.GetRemaining() != 300 {
			t.Errorf("gRPC BatchReset result %d: got %d remaining, want 300", i, r.GetRemaining())
		}
	}
	if len(resp.GetResults()) != 2 || !resp.GetDecision().GetAllowed() {
		t.Errorf("gRPC BatchReset: got %v, want allowed with 2 results", resp)
	}
	// A full bucket is not refunded: the combined decision says so.
	resp, err = kv.BatchRefund(admin, req)
	if err != nil {
		t.Fatalf("gRPC BatchRefund: %v", err)
	}
	if resp.GetDecision().GetAllowed() {
		t.Errorf("gRPC BatchRefund of full buckets: got allowed, want not allowed")
	}
	bad := &sluicev1.BatchRequest{Transactions: []*sluicev1.Transaction{{Name: "NewOrdersPerAccount", Id: "1001", Kind: sluicev1.Transaction_SPEND_ONLY}}}
	if _, err := kv.BatchReset(admin, bad); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "BatchReset") {
		t.Errorf("gRPC BatchReset with a kind: got %v, want InvalidArgument naming BatchReset", err)
	}
	dup := &sluicev1.BatchRequest{Transactions: []*sluicev1.Transaction{{Name: "NewOrdersPerAccount", Id: "1001"}, {Name: "NewOrdersPerAccount", Id: "1001"}}}
	if _, err := kv.BatchReset(admin, dup); status.Code(err) != codes.InvalidArgument {
		t.Errorf("gRPC BatchReset naming a bucket twice: got %v, want InvalidArgument", err)
	}
}

func TestKVRetryAfterJitterIsAFlagAndAVariable(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want bool
	}{
		{want: false},
		{args: []string{"--kv-retry-after-jitter"}, want: true},
		{env: map[string]string{"SLUICE_KV_RETRY_AFTER_JITTER": "true"}, want: true},
	} {
		o, err := app.ParseServe(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
		if err != nil {
			t.Fatalf("%v %v: %v", tc.args, tc.env, err)
		}
		if o.KVRetryAfterJitter != tc.want {
			t.Errorf("%v %v: got KVRetryAfterJitter %t, want %t", tc.args, tc.env, o.KVRetryAfterJitter, tc.want)
		}
	}
}
