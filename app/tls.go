package app

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/clock"
)

// certReloader serves the certificate, key and client CA files of the
// listeners, re-reading them when their modification times change (checked
// at most once a second, on handshakes), so rotated certificates are used
// without a restart; the second is measured on clk. A rotation that fails
// to load keeps the previous material and is logged.
type certReloader struct {
	certFile, keyFile, caFile string
	clk                       clock.Clock
	onError                   func(error)

	mu      sync.Mutex // protects the fields below
	checked time.Time
	mtimes  [3]time.Time
	cert    *tls.Certificate
	pool    *x509.CertPool
}

// newCertReloader loads the files once (an error if they do not load) and
// returns a reloader that looks at them again when a handshake comes a
// second or more of clk's time after its last look.
func newCertReloader(certFile, keyFile, caFile string, clk clock.Clock, onError func(error)) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, caFile: caFile, clk: clk, onError: onError}
	if err := r.load(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *certReloader) stat() [3]time.Time {
	var m [3]time.Time
	for i, f := range []string{r.certFile, r.keyFile, r.caFile} {
		if f == "" {
			continue
		}
		if st, err := os.Stat(f); err == nil {
			m[i] = st.ModTime()
		}
	}
	return m
}

// load reads every file. requires r.mu held, or no concurrent use.
func (r *certReloader) load() error {
	m := r.stat()
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("load TLS certificate %s and key %s: %w", r.certFile, r.keyFile, err)
	}
	var pool *x509.CertPool
	if r.caFile != "" {
		pem, err := os.ReadFile(r.caFile)
		if err != nil {
			return fmt.Errorf("load TLS client CA: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("load TLS client CA %s: no PEM certificates found", r.caFile)
		}
	}
	r.cert, r.pool, r.mtimes = &cert, pool, m
	return nil
}

// refresh reloads the files if they changed since the last look.
func (r *certReloader) refresh() {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clk.Now()
	if now.Sub(r.checked) < time.Second {
		return
	}
	r.checked = now
	if r.stat() == r.mtimes {
		return
	}
	if err := r.load(); err != nil && r.onError != nil {
		r.onError(err)
	}
}

// config returns the tls.Config for a listener.
func (r *certReloader) config() *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS12}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		r.refresh()
		r.mu.Lock()
		cert, pool := r.cert, r.pool
		r.mu.Unlock()
		if cert == nil {
			return nil, errors.New("no TLS certificate loaded")
		}
		c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*cert}, NextProtos: []string{"h2", "http/1.1"}}
		if pool != nil {
			c.ClientCAs = pool
			c.ClientAuth = tls.RequireAndVerifyClientCert
		}
		return c, nil
	}
	return base
}
