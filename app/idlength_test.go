package app_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/app"
)

func TestKeyValueIDsAreBoundedInLength(t *testing.T) {
	dir := t.TempDir()
	defaults := filepath.Join(dir, "defaults.yaml")
	writeFile(t, defaults, seedDefaults+"CertificatesPerFQDNSet:\n  burst: 5\n  count: 5\n  period: 1h\n")
	ta := start(t, nil, func(o *app.Options) { o.LimitsPath = defaults })

	// fqdnSet builds a set of n distinct 250-byte domain names.
	fqdnSet := func(n int) string {
		names := make([]string, n)
		for i := range names {
			label := strings.Repeat("a", 60)
			names[i] = fmt.Sprintf("n%05d.%s.%s.%s.%s.com", i, label, label, label, label[:50])
		}
		return strings.Join(names, ",")
	}
	tests := []struct {
		name     string
		limit    string
		id       string
		wantCode int
		wantBody []string
	}{
		{
			name: "an id of 2,000 bytes is refused, naming its length and the maximum", limit: "NewRegistrationsPerIPAddress",
			id: strings.Repeat("1", 2000), wantCode: http.StatusBadRequest, wantBody: []string{"2000 bytes", "1024 bytes"},
		},
		{
			name: "an FQDN set of 100 long names is accepted", limit: "CertificatesPerFQDNSet",
			id: fqdnSet(100), wantCode: http.StatusOK, wantBody: []string{`"allowed":true`},
		},
		{
			name: "an FQDN set of 300 long names is refused", limit: "CertificatesPerFQDNSet",
			id: fqdnSet(300), wantCode: http.StatusBadRequest, wantBody: []string{"65536 bytes"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, err := json.Marshal(map[string]any{"name": tt.limit, "id": tt.id, "cost": 1})
			if err != nil {
				t.Fatal(err)
			}
			code, got := ta.post(t, "http://"+ta.HTTPAddr()+"/v1/spend", string(body))
			if code != tt.wantCode {
				t.Fatalf("got %d %.300s, want %d", code, got, tt.wantCode)
			}
			for _, w := range tt.wantBody {
				if !strings.Contains(got, w) {
					t.Errorf("got body %.300s, want it to contain %q", got, w)
				}
			}
			if len(got) > 1024 {
				t.Errorf("got a %d-byte answer, want the id not echoed in full", len(got))
			}
		})
	}
}
