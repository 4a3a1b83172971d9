package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/sluice-rl/sluice/limiter"
)

func TestOverrideCallerNamesWhoMadeTheCall(t *testing.T) {
	t.Parallel()
	admin := &x509.Certificate{DNSNames: []string{"admin.example"}}
	other := &x509.Certificate{DNSNames: []string{"app.example"}}
	tests := []struct {
		name    string
		auth    AdminAuth
		bearer  string
		certs   []*x509.Certificate
		wantWho string // "" for refused
	}{
		{name: "the zero value refuses everyone, unlike refund and reset", auth: AdminAuth{}, bearer: "Bearer t"},
		{name: "the right token is the token", auth: AdminAuth{Token: "t"}, bearer: "Bearer t", wantWho: "token"},
		{name: "a wrong token is refused", auth: AdminAuth{Token: "t"}, bearer: "Bearer x"},
		{name: "a certificate naming the SAN is the certificate", auth: AdminAuth{ClientSAN: "admin.example"}, certs: []*x509.Certificate{admin},
			wantWho: "client certificate admin.example"},
		{name: "a certificate naming another is refused", auth: AdminAuth{ClientSAN: "admin.example"}, certs: []*x509.Certificate{other}},
		{name: "with both set, a wrong token and the right certificate is the certificate", auth: AdminAuth{Token: "t", ClientSAN: "admin.example"},
			bearer: "Bearer x", certs: []*x509.Certificate{admin}, wantWho: "client certificate admin.example"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kv := &KV{guard: tt.auth}
			r := httptest.NewRequest("GET", "/v1/overrides", nil)
			if tt.bearer != "" {
				r.Header.Set("Authorization", tt.bearer)
			}
			if tt.certs != nil {
				r.TLS = &tls.ConnectionState{PeerCertificates: tt.certs}
			}
			who, err := kv.overrideCaller(r)
			var e *limiter.Error
			switch {
			case tt.wantWho == "" && (!errors.As(err, &e) || e.Kind != limiter.Forbidden):
				t.Errorf("got %q, %v, want a Forbidden error", who, err)
			case tt.wantWho != "" && (err != nil || who != tt.wantWho):
				t.Errorf("got %q, %v, want %q", who, err, tt.wantWho)
			}
		})
	}
}
