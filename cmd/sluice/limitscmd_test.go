package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/app"
	"github.com/sluice-rl/sluice/internal/apptest"
)

func TestLimitsShow(t *testing.T) {
	dir := t.TempDir()
	defaults, overrides := filepath.Join(dir, "defaults.yaml"), filepath.Join(dir, "overrides.yaml")
	write := func(path, data string) {
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(defaults, "CertificatesPerDomain:\n  burst: 50\n  count: 50\n  period: 168h\nNewOrdersPerAccount:\n  burst: 300\n  count: 300\n  period: 180m\n")
	write(overrides, "- CertificatesPerDomain:\n    burst: 300\n    count: 300\n    period: 168h\n    ids:\n      - id: le.wtf\n        comment: our test domain\n      - ecdsa.le.wtf\n"+
		"- CertificatesPerDomainPerAccount:\n    burst: 10\n    count: 10\n    period: 1h\n    ids: [\"12345678\"]\n")
	files := []string{"--limits", defaults, "--overrides", overrides}
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  []string
		notOut   []string
		wantErr  []string
	}{
		{name: "a subdomain finds its eTLD+1's override, with file, line, comment and the default it replaces",
			args: []string{"ecdsa.le.wtf"}, wantCode: 0,
			wantOut: []string{`CertificatesPerDomain: bucket 5:le.wtf: burst 300, count 300 per 168h0m0s (override "le.wtf", ` + overrides + `:6, "our test domain"; the default would be burst 50, count 50 per 168h0m0s)`},
			notOut:  []string{"NewOrdersPerAccount"},
			wantErr: []string{`warning: ` + overrides + `:8: override id "ecdsa.le.wtf"`}},
		{name: "an account id shows its default",
			args: []string{"12345678"}, wantCode: 0,
			wantOut: []string{"NewOrdersPerAccount: bucket 3:12345678: burst 300, count 300 per 3h0m0s (default, " + defaults + ":5)"},
			notOut:  []string{"CertificatesPerDomain:"}},
		{name: "regId:domain shows the account-wide override and the names without limits",
			args: []string{"12345678:www.example.com"}, wantCode: 0,
			wantOut: []string{
				`CertificatesPerDomainPerAccount: bucket 6:12345678:example.com: burst 10, count 10 per 1h0m0s (override for the whole account "12345678", ` + overrides + `:13)`,
				"FailedAuthorizationsPerDomainPerAccount: bucket 4:12345678:www.example.com: not limited (no override, no default)",
			}},
		{name: "--name keeps one name and explains a bad id",
			args: []string{"--name", "NewOrdersPerAccount", "www.example.com"}, wantCode: 1,
			wantErr: []string{`invalid id "www.example.com" for NewOrdersPerAccount`}},
		{name: "an id no name takes is an error",
			args: []string{"a b"}, wantCode: 1, wantErr: []string{`no limit name takes id "a b"`}},
		{name: "an unknown --name is an error",
			args: []string{"--name", "Bogus", "1"}, wantCode: 1, wantErr: []string{"Bogus"}},
		{name: "no id is bad usage", args: nil, wantCode: 2, wantErr: []string{"want exactly one id"}},
		{name: "a token without --server is bad usage",
			args: []string{"--admin-token-file", "token", "1"}, wantCode: 2, wantErr: []string{"--admin-token-file is the token for --server, which is not set"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append(append([]string{"limits", "show"}, files...), tt.args...)
			code, out, errOut := runCmd(args...)
			if code != tt.wantCode {
				t.Fatalf("exit %d (stdout %q, stderr %q), want %d", code, out, errOut, tt.wantCode)
			}
			for _, w := range tt.wantOut {
				if !strings.Contains(out, w) {
					t.Errorf("stdout %q: got no %q, want it", out, w)
				}
			}
			for _, w := range tt.notOut {
				if strings.Contains(out, w) {
					t.Errorf("stdout %q: got %q, want none", out, w)
				}
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q: got no %q, want it", errOut, w)
				}
			}
		})
	}
	t.Run("files that do not load are an error", func(t *testing.T) {
		bad := filepath.Join(dir, "bad.yaml")
		write(bad, "NewOrdersPerAccount:\n  burst: 0\n")
		code, _, errOut := runCmd("limits", "show", "--limits", bad, "1")
		if code != 1 || !strings.Contains(errOut, "bad.yaml:") {
			t.Errorf("exit %d, stderr %q: want 1 naming bad.yaml", code, errOut)
		}
	})
	t.Run("the files come from SLUICE_LIMITS and SLUICE_OVERRIDES", func(t *testing.T) {
		t.Setenv("SLUICE_LIMITS", defaults)
		t.Setenv("SLUICE_OVERRIDES", overrides)
		code, out, errOut := runCmd("limits", "show", "le.wtf")
		if code != 0 || !strings.Contains(out, "burst 300, count 300") {
			t.Errorf("exit %d, stdout %q, stderr %q: want le.wtf's override", code, out, errOut)
		}
	})
}

// TestLimitsShowWithARunningServicesRuntimeOverrides sets a runtime
// override on a running service, then asks `sluice limits show --server`:
// the runtime override applies, named as such; without the token the
// service refuses and the command says so.
func TestLimitsShowWithARunningServicesRuntimeOverrides(t *testing.T) {
	dir := t.TempDir()
	defaults, token := filepath.Join(dir, "defaults.yaml"), filepath.Join(dir, "token")
	for path, data := range map[string]string{defaults: "NewOrdersPerAccount: {burst: 300, count: 300, period: 180m}\n", token: "s3cret\n"} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	a := apptest.Start(t, map[string]string{"shop.yaml": queryDomain}, func(o *app.Options) {
		o.LimitsPath, o.KVAdminTokenFile = defaults, token
	}, nil)
	req, err := http.NewRequest(http.MethodPut, "http://"+a.HTTPAddr()+"/v1/overrides/NewOrdersPerAccount/12345678",
		strings.NewReader(`{"burst": 1000, "count": 1000, "period": "3h", "comment": "big customer"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT override: %s", resp.Status)
	}

	code, out, errOut := runCmd("limits", "show", "--limits", defaults, "--server", a.HTTPAddr(), "--admin-token-file", token, "--name", "NewOrdersPerAccount", "12345678")
	want := `NewOrdersPerAccount: bucket 3:12345678: burst 1000, count 1000 per 3h0m0s (override "12345678", runtime override, set `
	if code != 0 || !strings.Contains(out, want) || !strings.Contains(out, `"big customer"; the default would be burst 300, count 300 per 3h0m0s`) {
		t.Fatalf("exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	code, out, _ = runCmd("limits", "show", "--limits", defaults, "--name", "NewOrdersPerAccount", "12345678")
	if code != 0 || !strings.Contains(out, "(default, "+defaults+":1)") {
		t.Fatalf("without --server: exit %d, stdout %q, want the default", code, out)
	}
	code, _, errOut = runCmd("limits", "show", "--limits", defaults, "--server", a.HTTPAddr(), "12345678")
	if code != 1 || !strings.Contains(errOut, "403 Forbidden") {
		t.Fatalf("without the token: exit %d, stderr %q, want 1 and the service's 403", code, errOut)
	}
}

// TestLimitsShowQuotesTheStartOfAForeignErrorPage points --server at a
// server that is not Sluice and answers a large error page: the command
// fails naming the status, quoting only the page's first kilobyte.
func TestLimitsShowQuotesTheStartOfAForeignErrorPage(t *testing.T) {
	page := strings.Repeat("<p>no such thing</p>", 5000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, page, http.StatusNotFound)
	}))
	defer srv.Close()
	code, _, errOut := runCmd("limits", "show", "--server", srv.URL, "12345678")
	if code != 1 || !strings.Contains(errOut, "404 Not Found") || !strings.Contains(errOut, "<p>no such thing</p>") || len(errOut) > 2<<10 {
		t.Fatalf("exit %d, stderr of %d bytes starting %.200q: want 1, the 404 and at most the page's first kilobyte", code, len(errOut), errOut)
	}
}
