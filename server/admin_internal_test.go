package server

import (
	"crypto/x509"
	"errors"
	"net/url"
	"testing"

	"github.com/sluice-rl/sluice/limiter"
)

func TestAdminAuthAdmitsByTokenOrClientSAN(t *testing.T) {
	t.Parallel()
	u, _ := url.Parse("spiffe://example.org/admin")
	admin := &x509.Certificate{DNSNames: []string{"admin.example"}, URIs: []*url.URL{u}}
	other := &x509.Certificate{DNSNames: []string{"app.example"}}
	tests := []struct {
		name  string
		auth  AdminAuth
		bear  string
		certs []*x509.Certificate
		want  bool
	}{
		{name: "the zero value admits everyone", want: true},
		{name: "the right token", auth: AdminAuth{Token: "t"}, bear: "Bearer t", want: true},
		{name: "a wrong token", auth: AdminAuth{Token: "t"}, bear: "Bearer x"},
		{name: "a token without Bearer", auth: AdminAuth{Token: "t"}, bear: "t"},
		{name: "a certificate naming the SAN", auth: AdminAuth{ClientSAN: "admin.example"}, certs: []*x509.Certificate{admin}, want: true},
		{name: "a certificate naming the SAN as a URI", auth: AdminAuth{ClientSAN: "spiffe://example.org/admin"}, certs: []*x509.Certificate{admin}, want: true},
		{name: "a certificate naming another", auth: AdminAuth{ClientSAN: "admin.example"}, certs: []*x509.Certificate{other}},
		{name: "no certificate", auth: AdminAuth{ClientSAN: "admin.example"}},
		{name: "either one with both set", auth: AdminAuth{Token: "t", ClientSAN: "admin.example"}, bear: "Bearer t", certs: []*x509.Certificate{other}, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.auth.allow(tt.bear, tt.certs)
			var e *limiter.Error
			switch {
			case tt.want && err != nil:
				t.Fatalf("got %v, want admitted", err)
			case !tt.want && (!errors.As(err, &e) || e.Kind != limiter.Forbidden):
				t.Fatalf("got %v, want a Forbidden error", err)
			}
		})
	}
}
