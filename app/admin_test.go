package app_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
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

// With --kv-admin-token-file, key-value refund and reset need the bearer
// token, over HTTP and gRPC; other calls do not (issue 17, item 6).
// startWithAdminToken starts the service with the seed defaults and
// --kv-admin-token-file holding "s3cret".
func startWithAdminToken(t *testing.T) *testApp {
	t.Helper()
	dir := t.TempDir()
	defaults := filepath.Join(dir, "defaults.yaml")
	writeFile(t, defaults, seedDefaults)
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return start(t, nil, func(o *app.Options) { o.LimitsPath, o.KVAdminTokenFile = defaults, token })
}

// postAuth POSTs body to path on ta's HTTP port, with the Authorization
// header auth unless it is empty, and returns the status and body.
func postAuth(t *testing.T, ta *testApp, path, auth, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+ta.HTTPAddr()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := ta.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func TestKeyValueRefundAndResetNeedTheAdminToken(t *testing.T) {
	ta := startWithAdminToken(t)
	body := `{"name": "NewRegistrationsPerIPAddress", "id": "192.0.2.9", "cost": 1}`
	post := func(path, auth string) int {
		t.Helper()
		code, _ := postAuth(t, ta, path, auth, body)
		return code
	}
	for _, tc := range []struct {
		path, auth string
		want       int
	}{
		{path: "/v1/spend", want: http.StatusOK},
		{path: "/v1/refund", want: http.StatusForbidden},
		{path: "/v1/reset", auth: "Bearer wrong", want: http.StatusForbidden},
		{path: "/v1/refund", auth: "Bearer s3cret", want: http.StatusOK},
		{path: "/v1/reset", auth: "Bearer s3cret", want: http.StatusOK},
	} {
		if got := post(tc.path, tc.auth); got != tc.want {
			t.Errorf("POST %s with %q: got %d, want %d", tc.path, tc.auth, got, tc.want)
		}
	}
	cc, err := grpc.NewClient(ta.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	kv := sluicev1.NewLimitsClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := &sluicev1.Request{Name: "NewRegistrationsPerIPAddress", Id: "192.0.2.9"}
	if _, err := kv.Reset(ctx, req); status.Code(err) != codes.PermissionDenied {
		t.Errorf("gRPC Reset without the token: got %v, want PermissionDenied", err)
	}
	if _, err := kv.Reset(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer s3cret"), req); err != nil {
		t.Errorf("gRPC Reset with the token: got %v, want it done", err)
	}
	if _, err := kv.Check(ctx, req); err != nil {
		t.Errorf("gRPC Check without the token: got %v, want it answered", err)
	}
}

func TestKVAdminFlagsAreChecked(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{args: []string{"--kv-admin-client-san", "admin.example"}, want: "needs --tls-client-ca"},
		{args: []string{"--kv-admin-token-file", empty}, want: "holds no token"},
		{args: []string{"--kv-admin-token-file", filepath.Join(t.TempDir(), "missing")}, want: "read the token"},
	} {
		if _, err := app.ParseServe(tc.args, func(string) string { return "" }, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}
