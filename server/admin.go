package server

import (
	"context"
	"crypto/subtle"
	"crypto/x509"
	"net/http"
	"slices"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sluice-rl/sluice/limiter"
)

// AdminAuth guards the key-value calls that give capacity back — Refund
// and Reset, over gRPC and HTTP — which let whoever makes them undo a
// limit. The zero value guards nothing: everyone who reaches the port may
// make them. When Token is set, a call must carry "Authorization: Bearer
// <Token>" (an HTTP header, or gRPC metadata "authorization"); when
// ClientSAN is set, the call's TLS client certificate (mutual TLS) must
// name it (a DNS name, an email address or a URI). With both set, either
// one admits the call. Safe for concurrent use.
//
// The same credentials guard the admin listener (see Admin), with Refused
// naming its flags.
type AdminAuth struct {
	Token     string
	ClientSAN string
	// Refused is the message of a call refused for want of credentials;
	// empty: the key-value API's, which names --kv-admin-token-file and
	// --kv-admin-client-san.
	Refused string
}

// kvRefused is the message of a key-value refund or reset refused for
// want of credentials.
const kvRefused = "refund and reset need an administrator's credentials (--kv-admin-token-file or --kv-admin-client-san)"

// on reports whether a guards anything.
func (a AdminAuth) on() bool { return a.Token != "" || a.ClientSAN != "" }

// allow checks a call's credentials: the Authorization value and the
// client certificates it came with.
func (a AdminAuth) allow(authorization string, certs []*x509.Certificate) error {
	if !a.on() {
		return nil
	}
	if a.Token != "" {
		if tok, ok := strings.CutPrefix(authorization, "Bearer "); ok && subtle.ConstantTimeCompare([]byte(tok), []byte(a.Token)) == 1 {
			return nil
		}
	}
	if a.ClientSAN != "" && len(certs) > 0 {
		c := certs[0]
		uris := make([]string, len(c.URIs))
		for i, u := range c.URIs {
			uris[i] = u.String()
		}
		if slices.Contains(c.DNSNames, a.ClientSAN) || slices.Contains(c.EmailAddresses, a.ClientSAN) || slices.Contains(uris, a.ClientSAN) {
			return nil
		}
	}
	msg := a.Refused
	if msg == "" {
		msg = kvRefused
	}
	return &limiter.Error{Kind: limiter.Forbidden, Msg: msg}
}

// allowGRPC checks the credentials of a gRPC call.
func (a AdminAuth) allowGRPC(ctx context.Context) error {
	if !a.on() {
		return nil
	}
	var auth string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			auth = v[0]
		}
	}
	var certs []*x509.Certificate
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			certs = ti.State.PeerCertificates
		}
	}
	return a.allow(auth, certs)
}

// allowHTTP checks the credentials of an HTTP request.
func (a AdminAuth) allowHTTP(r *http.Request) error {
	if !a.on() {
		return nil
	}
	var certs []*x509.Certificate
	if r.TLS != nil {
		certs = r.TLS.PeerCertificates
	}
	return a.allow(r.Header.Get("Authorization"), certs)
}
