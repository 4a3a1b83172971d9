package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TLSFiles are the PEM files of a test certificate authority, a server
// certificate it signed for 127.0.0.1, ::1 and localhost, and a client
// certificate it signed.
type TLSFiles struct {
	CAFile         string
	ServerCertFile string
	ServerKeyFile  string
	ClientCertFile string
	ClientKeyFile  string
	// ServerName is the name in the server certificate ("localhost").
	ServerName string

	pool   *x509.CertPool
	client tls.Certificate
}

// ClientConfig returns a TLS configuration that trusts the test CA and
// presents the client certificate.
func (f *TLSFiles) ClientConfig() *tls.Config {
	return &tls.Config{
		RootCAs:      f.pool,
		Certificates: []tls.Certificate{f.client},
		ServerName:   f.ServerName,
		MinVersion:   tls.VersionTLS12,
	}
}

// MakeTLS writes a fresh CA, server and client certificate into dir, for
// tests of other TLS servers (memcached).
func MakeTLS(t testing.TB, dir string) *TLSFiles {
	t.Helper()
	return makeTLS(t, dir)
}

// makeTLS writes a fresh CA, server and client certificate into dir.
func makeTLS(t testing.TB, dir string) *TLSFiles {
	t.Helper()
	fail := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("redistest: make TLS certificates: %v", err)
		}
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	fail(err)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "sluice test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	fail(err)
	caCert, err := x509.ParseCertificate(caDER)
	fail(err)

	leaf := func(serial int64, name string, usage ...x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		fail(err)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage:  usage,
			DNSNames:     []string{"localhost"},
			IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		fail(err)
		return der, key
	}
	// Redis uses its server certificate as a client one too (cluster bus,
	// replication), so give it both usages.
	srvDER, srvKey := leaf(2, "localhost", x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	cliDER, cliKey := leaf(3, "sluice test client", x509.ExtKeyUsageClientAuth)

	f := &TLSFiles{
		CAFile:         filepath.Join(dir, "ca.pem"),
		ServerCertFile: filepath.Join(dir, "server.pem"),
		ServerKeyFile:  filepath.Join(dir, "server-key.pem"),
		ClientCertFile: filepath.Join(dir, "client.pem"),
		ClientKeyFile:  filepath.Join(dir, "client-key.pem"),
		ServerName:     "localhost",
	}
	writePEM := func(path, typ string, der []byte) {
		fail(os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
	}
	keyDER := func(k *ecdsa.PrivateKey) []byte {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		fail(err)
		return der
	}
	writePEM(f.CAFile, "CERTIFICATE", caDER)
	writePEM(f.ServerCertFile, "CERTIFICATE", srvDER)
	writePEM(f.ServerKeyFile, "PRIVATE KEY", keyDER(srvKey))
	writePEM(f.ClientCertFile, "CERTIFICATE", cliDER)
	writePEM(f.ClientKeyFile, "PRIVATE KEY", keyDER(cliKey))

	f.pool = x509.NewCertPool()
	f.pool.AddCert(caCert)
	f.client, err = tls.LoadX509KeyPair(f.ClientCertFile, f.ClientKeyFile)
	fail(err)
	return f
}
