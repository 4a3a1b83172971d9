package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluice-rl/sluice/app"
	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/internal/apptest"
)

const queryDomain = `domain: shop
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, name: per_user}
  - key: path
    value: /health
    rate_limit: {unlimited: true}
`

// startService runs a Sluice service on free loopback ports with the
// query test's domain, and returns its gRPC address.
func startService(t *testing.T, tweak func(*app.Options)) string {
	t.Helper()
	return apptest.Start(t, map[string]string{"shop.yaml": queryDomain}, tweak, nil).GRPCAddr()
}

func TestQuery(t *testing.T) {
	// Half past the hour, on a clock that stays there: in an hour's first
	// minute the minute's window and the hour's begin together, and share
	// a counter key (as envoyproxy/ratelimit's do), so that the --limit
	// 100/hour step would count on user=ann's minute.
	clk := clock.NewFake(time.Date(2026, 1, 1, 10, 30, 0, 0, time.UTC))
	addr := apptest.Start(t, map[string]string{"shop.yaml": queryDomain}, func(o *app.Options) { o.ResponseHeaders = true }, clk).GRPCAddr()
	// The steps share the service's counters, in order: user=ann has 2 a
	// minute.
	steps := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  []string
	}{
		{name: "the first call is OK and shows the limit, remaining and reset",
			args: []string{"user=ann"}, wantCode: 0,
			wantOut: []string{"OK\n", "  1 user=ann OK limit=2/minute name=per_user remaining=1 reset=", "response header RateLimit-Limit: 2"}},
		{name: "hits-addend 0 reads without counting",
			args: []string{"--hits-addend", "0", "user=ann"}, wantCode: 0,
			wantOut: []string{"remaining=1"}},
		{name: "the second call spends the last",
			args: []string{"user=ann"}, wantCode: 0, wantOut: []string{"remaining=0"}},
		{name: "the third call is over the limit with its own exit code",
			args: []string{"user=ann"}, wantCode: exitOverLimit,
			wantOut: []string{"OVER_LIMIT\n", "  1 user=ann OVER_LIMIT limit=2/minute"}},
		{name: "each argument is one descriptor, answered in order",
			args: []string{"user=bob", "path=/health", "other=x,more=y"}, wantCode: 0,
			wantOut: []string{"  1 user=bob OK limit=2/minute", "  2 path=/health OK unlimited", "  3 other=x,more=y OK no limit"}},
		{name: "a limit given on the command line replaces the configured one",
			args: []string{"--limit", "100/hour", "user=ann"}, wantCode: 0,
			wantOut: []string{"  1 user=ann OK limit=100/hour remaining=99"}},
		{name: "an unknown domain answers OK",
			args: []string{"--domain", "nope", "user=ann"}, wantCode: 0, wantOut: []string{"OK\n"}},
	}
	for _, tt := range steps {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"query", "--addr", addr, "--domain", "shop"}, tt.args...)
			code, out, errOut := runCmd(args...)
			if code != tt.wantCode {
				t.Fatalf("got exit %d (stdout %q, stderr %q), want %d", code, out, errOut, tt.wantCode)
			}
			for _, w := range tt.wantOut {
				if !strings.Contains(out, w) {
					t.Errorf("stdout %q lacks %q", out, w)
				}
			}
		})
	}
}

func TestQueryJSON(t *testing.T) {
	addr := startService(t, nil)
	for i, wantCode := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		code, out, errOut := runCmd("query", "--addr", addr, "--domain", "shop", "--json", "user=cy")
		var resp rlsv3.RateLimitResponse
		if err := protojson.Unmarshal([]byte(out), &resp); err != nil {
			t.Fatalf("call %d: stdout %q is not a RateLimitResponse: %v (stderr %q)", i+1, out, err, errOut)
		}
		if got := resp.GetOverallCode(); got != wantCode {
			t.Errorf("call %d: got overall code %s, want %s", i+1, got, wantCode)
		}
		if got, want := resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit(), uint32(2); got != want {
			t.Errorf("call %d: got requests_per_unit %d, want %d", i+1, got, want)
		}
		wantExit := 0
		if wantCode == rlsv3.RateLimitResponse_OVER_LIMIT {
			wantExit = exitOverLimit
		}
		if code != wantExit {
			t.Errorf("call %d: got exit %d, want %d", i+1, code, wantExit)
		}
	}
}

func TestQueryErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close() // nothing listens there now
	tests := []struct {
		name    string
		args    []string
		wantErr []string
	}{
		{name: "an entry without = names the argument and the entry",
			args: []string{"--domain", "d", "user=ann", "a=1,key"}, wantErr: []string{`descriptor 2 "a=1,key"`, `entry 2 "key" has no "="`}},
		{name: "an empty key is refused",
			args: []string{"--domain", "d", "=v"}, wantErr: []string{`descriptor 1 "=v"`, "empty key"}},
		{name: "the domain is required",
			args: []string{"user=ann"}, wantErr: []string{"--domain is required"}},
		{name: "a descriptor is required",
			args: []string{"--domain", "d"}, wantErr: []string{"no descriptor"}},
		{name: "a bad --limit names the unit",
			args: []string{"--domain", "d", "--limit", "10/fortnight", "user=ann"}, wantErr: []string{`--limit "10/fortnight"`, `unit "fortnight"`}},
		{name: "a --limit without a unit is refused",
			args: []string{"--domain", "d", "--limit", "10", "user=ann"}, wantErr: []string{"want N/UNIT"}},
		{name: "a timeout of 0 is refused",
			args: []string{"--domain", "d", "--timeout", "0s", "user=ann"}, wantErr: []string{"--timeout 0s: must be more than 0"}},
		{name: "an unknown flag is an error",
			args: []string{"--frobnicate"}, wantErr: []string{"frobnicate"}},
		{name: "a client certificate needs its key",
			args: []string{"--domain", "d", "--tls-cert", "c.pem", "user=ann"}, wantErr: []string{"--tls-cert and --tls-key go together"}},
		{name: "an unreachable server is named",
			args: []string{"--addr", closed, "--domain", "d", "--timeout", "2s", "user=ann"}, wantErr: []string{"cannot reach " + closed}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"query", "--addr", closed}, tt.args...)
			code, out, errOut := runCmd(args...)
			if code != 1 || out != "" {
				t.Fatalf("got exit %d, stdout %q, want 1 and nothing on stdout", code, out)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q lacks %q", errOut, w)
				}
			}
		})
	}
}

// A service that answers nothing is given up on after --timeout.
func TestQueryTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	start := time.Now()
	code, _, errOut := runCmd("query", "--addr", ln.Addr().String(), "--domain", "d", "--timeout", "300ms", "user=ann")
	if code != 1 || !strings.Contains(errOut, ln.Addr().String()) {
		t.Fatalf("got exit %d, stderr %q, want 1 naming %s", code, errOut, ln.Addr())
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %s, want about the 300ms --timeout", took)
	}
}

// writeCert writes a self-signed certificate for 127.0.0.1 and
// sluice.test, and its key, as PEM files.
func writeCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "sluice.test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		DNSNames:              []string{"sluice.test"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func TestQueryTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeCert(t, dir)
	addr := startService(t, func(o *app.Options) {
		o.TLSCert, o.TLSKey, o.TLSClientCA = cert, key, cert // client certificates required
	})
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{name: "with the CA and a client certificate the call is answered",
			args: []string{"--tls-ca", cert, "--tls-cert", cert, "--tls-key", key}, wantCode: 0},
		{name: "the server name can be given",
			args: []string{"--tls-ca", cert, "--tls-cert", cert, "--tls-key", key, "--tls-server-name", "sluice.test"}, wantCode: 0},
		{name: "a server name the certificate lacks fails",
			args: []string{"--tls-ca", cert, "--tls-cert", cert, "--tls-key", key, "--tls-server-name", "other.test"}, wantCode: 1, wantErr: "cannot reach"},
		{name: "plaintext to a TLS server fails",
			args: nil, wantCode: 1, wantErr: "cannot reach"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"query", "--addr", addr, "--domain", "shop", "--timeout", "3s"}, tt.args...)
			code, _, errOut := runCmd(append(args, "user=tls")...)
			if code != tt.wantCode || !strings.Contains(errOut, tt.wantErr) {
				t.Fatalf("got exit %d, stderr %q; want %d and %q", code, errOut, tt.wantCode, tt.wantErr)
			}
		})
	}
}

// TestQueryDocCommands runs every `sluice query` command of the README and
// docs/envoy.md as written, against a service on the example configs (with
// --addr pointed at it): each must be answered OK, by a rule.
func TestQueryDocCommands(t *testing.T) {
	examples := t.TempDir()
	for link, dir := range map[string]string{"config": "../../examples/config", "envoy": "../../examples/envoy/config"} {
		abs, err := filepath.Abs(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(abs, filepath.Join(examples, link)); err != nil {
			t.Fatal(err)
		}
	}
	addr := startService(t, func(o *app.Options) { o.ConfigPath = examples })
	cmdRe := regexp.MustCompile("sluice query ([^`\n]+)")
	seen := 0
	for _, doc := range []string{"../../README.md", "../../docs/envoy.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range cmdRe.FindAllStringSubmatch(string(b), -1) {
			fields := strings.Fields(m[1])
			args := []string{"query", "--addr", addr}
			for i := 0; i < len(fields); i++ {
				if fields[i] == "--addr" {
					i++ // the documented address, replaced by the test's
					continue
				}
				args = append(args, fields[i])
			}
			seen++
			t.Run(doc+": "+m[0], func(t *testing.T) {
				code, out, errOut := runCmd(args...)
				if code != 0 || strings.Contains(out, "no limit") {
					t.Errorf("got exit %d, stdout %q, stderr %q; want 0 and a limit for every descriptor", code, out, errOut)
				}
			})
		}
	}
	if seen < 2 {
		t.Errorf("found %d sluice query commands in the README and docs/envoy.md, want at least 2", seen)
	}
}

func TestQueryHelp(t *testing.T) {
	code, out, errOut := runCmd("query", "--help")
	if code != 0 {
		t.Fatalf("got exit %d, want 0", code)
	}
	for _, w := range []string{"usage: sluice query", "Exit status: 0 OK, 3 OVER_LIMIT, 1 error", "-tls-ca", "-json"} {
		if !strings.Contains(out+errOut, w) {
			t.Errorf("help %q lacks %q", out+errOut, w)
		}
	}
	if _, out, _ := runCmd("help"); !strings.Contains(out, "query ") {
		t.Errorf("sluice help %q does not list query", out)
	}
}
