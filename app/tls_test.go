package app_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluice-rl/sluice/app"
)

// pki is a CA with a server and a client certificate, written as PEM files.
type pki struct {
	caPool                                               *x509.CertPool
	caFile, serverCert, serverKey, clientCert, clientKey string
	client                                               tls.Certificate
}

func newPKI(t *testing.T, dir, name string) *pki {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name + " test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(cn string, usage x509.ExtKeyUsage, serial int64) ([]byte, []byte) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature,
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kb, _ := x509.MarshalECPrivateKey(key)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
	}
	p := &pki{caPool: x509.NewCertPool()}
	p.caPool.AddCert(ca)
	write := func(file string, data []byte) string {
		path := filepath.Join(dir, name+"-"+file)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	p.caFile = write("ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))
	sc, sk := issue("server", x509.ExtKeyUsageServerAuth, 2)
	p.serverCert, p.serverKey = write("server.pem", sc), write("server-key.pem", sk)
	cc, ck := issue("client", x509.ExtKeyUsageClientAuth, 3)
	p.clientCert, p.clientKey = write("client.pem", cc), write("client-key.pem", ck)
	p.client, err = tls.X509KeyPair(cc, ck)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func rlsOverTLS(t *testing.T, addr string, cfg *tls.Config) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain: "basic", Descriptors: []*rlcommon.RateLimitDescriptor{desc("ip", "1.1.1.1")},
	})
	return err
}

func httpsGet(addr string, cfg *tls.Config) (int, error) {
	c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	resp, err := c.Get("https://" + addr + "/healthcheck")
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func TestTLS(t *testing.T) {
	dir := t.TempDir()
	p := newPKI(t, dir, "one")
	ta := start(t, map[string]string{"basic.yaml": basicConfig}, func(o *app.Options) {
		o.TLSCert, o.TLSKey = p.serverCert, p.serverKey
	})
	trusting := &tls.Config{RootCAs: p.caPool, ServerName: "127.0.0.1"}
	if err := rlsOverTLS(t, ta.GRPCAddr(), trusting); err != nil {
		t.Fatalf("gRPC over TLS: %v", err)
	}
	if code, err := httpsGet(ta.HTTPAddr(), trusting); err != nil || code != http.StatusOK {
		t.Fatalf("HTTPS: got %d, %v; want 200", code, err)
	}
	// A client that does not trust the CA fails the handshake.
	if _, err := httpsGet(ta.HTTPAddr(), &tls.Config{ServerName: "127.0.0.1"}); err == nil {
		t.Fatal("HTTPS with an untrusted CA: got success, want a certificate error")
	}
	// Plain HTTP to the TLS port does not get an answer.
	if resp, err := ta.http.Get("http://" + ta.HTTPAddr() + "/healthcheck"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP to the TLS port: got 200, want refusal")
		}
	}
}

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	p := newPKI(t, dir, "one")
	ta := start(t, map[string]string{"basic.yaml": basicConfig}, func(o *app.Options) {
		o.TLSCert, o.TLSKey, o.TLSClientCA = p.serverCert, p.serverKey, p.caFile
	})
	withCert := &tls.Config{RootCAs: p.caPool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{p.client}}
	if err := rlsOverTLS(t, ta.GRPCAddr(), withCert); err != nil {
		t.Fatalf("gRPC with a client certificate: %v", err)
	}
	if code, err := httpsGet(ta.HTTPAddr(), withCert); err != nil || code != http.StatusOK {
		t.Fatalf("HTTPS with a client certificate: got %d, %v; want 200", code, err)
	}
	noCert := &tls.Config{RootCAs: p.caPool, ServerName: "127.0.0.1"}
	if err := rlsOverTLS(t, ta.GRPCAddr(), noCert); err == nil {
		t.Fatal("gRPC without a client certificate: got success, want refusal")
	}
	if _, err := httpsGet(ta.HTTPAddr(), noCert); err == nil {
		t.Fatal("HTTPS without a client certificate: got success, want refusal")
	}
	// A certificate from another CA is refused too.
	other := newPKI(t, dir, "two")
	if _, err := httpsGet(ta.HTTPAddr(), &tls.Config{RootCAs: p.caPool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{other.client}}); err == nil {
		t.Fatal("HTTPS with a foreign client certificate: got success, want refusal")
	}
}

func TestCertificatesReloadWhenFilesChange(t *testing.T) {
	dir := t.TempDir()
	first := newPKI(t, dir, "first")
	second := newPKI(t, dir, "second")
	certFile, keyFile := filepath.Join(dir, "tls.pem"), filepath.Join(dir, "tls-key.pem")
	copyFile := func(from, to string) {
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, to, string(data))
	}
	copyFile(first.serverCert, certFile)
	copyFile(first.serverKey, keyFile)
	ta := start(t, map[string]string{"basic.yaml": basicConfig}, func(o *app.Options) { o.TLSCert, o.TLSKey = certFile, keyFile })
	if code, err := httpsGet(ta.HTTPAddr(), &tls.Config{RootCAs: first.caPool, ServerName: "127.0.0.1"}); err != nil || code != 200 {
		t.Fatalf("first certificate: got %d, %v", code, err)
	}
	// Rotate to a certificate from the second CA; make the new files'
	// modification times differ even on coarse-grained file systems.
	copyFile(second.serverCert, certFile)
	copyFile(second.serverKey, keyFile)
	later := time.Now().Add(2 * time.Second)
	_ = os.Chtimes(certFile, later, later)
	_ = os.Chtimes(keyFile, later, later)
	// The files are looked at again only once a second has passed on the
	// service's clock, which has not moved: the first certificate is still
	// served.
	if code, err := httpsGet(ta.HTTPAddr(), &tls.Config{RootCAs: first.caPool, ServerName: "127.0.0.1"}); err != nil || code != 200 {
		t.Fatalf("before the clock moves: got %d, %v; want 200 with the first certificate", code, err)
	}
	ta.clock.Add(time.Second)
	if code, err := httpsGet(ta.HTTPAddr(), &tls.Config{RootCAs: second.caPool, ServerName: "127.0.0.1"}); err != nil || code != 200 {
		t.Fatalf("a second later on the clock: got %d, %v; want 200 with the rotated certificate", code, err)
	}
}
