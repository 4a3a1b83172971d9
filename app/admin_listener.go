package app

import (
	"crypto/tls"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/sluice-rl/sluice/server"
)

// adminRefused is the message of an admin call refused for want of
// credentials.
const adminRefused = "the admin listener needs an administrator's credentials (--admin-token-file or --admin-client-san)"

// adminListenAddr is the address the admin listener binds for addr, and
// whether only this machine can reach it: an address without a host
// (":9091") binds 127.0.0.1; "localhost", a loopback IP and a unix socket
// ("unix:/path") are local; every other host (0.0.0.0, [::], a name, an
// interface's address) is not.
func adminListenAddr(addr string) (bind string, local bool, err error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		if path == "" {
			return "", false, fmt.Errorf("%q names no socket path", addr)
		}
		return addr, true, nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", false, fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	if port == "" {
		return "", false, fmt.Errorf("%q has no port", addr)
	}
	switch host {
	case "":
		return net.JoinHostPort("127.0.0.1", port), true, nil
	case "localhost":
		return addr, true, nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return addr, true, nil
	}
	return addr, false, nil
}

// adminOn reports whether the options turn the admin listener on: an
// address that is neither empty nor "off".
func (o *Options) adminOn() bool { return o.AdminAddr != "" && o.AdminAddr != "off" }

// validateAdmin checks the admin listener's options, reporting each
// problem with bad.
func (o *Options) validateAdmin(bad func(flag, format string, args ...any)) {
	if !o.adminOn() {
		if o.AdminTokenFile != "" {
			bad("admin-token-file", "needs --admin-addr: the admin listener is off")
		}
		if o.AdminClientSAN != "" {
			bad("admin-client-san", "needs --admin-addr: the admin listener is off")
		}
		return
	}
	_, local, err := adminListenAddr(o.AdminAddr)
	if err != nil {
		bad("admin-addr", "%v", err)
		return
	}
	if o.AdminClientSAN != "" && o.TLSClientCA == "" {
		bad("admin-client-san", "needs --tls-client-ca: client certificates are only asked for with mutual TLS")
	}
	if o.AdminTokenFile != "" {
		if _, err := readToken(o.AdminTokenFile); err != nil {
			bad("admin-token-file", "%v", err)
		}
	}
	if !local && o.AdminTokenFile == "" && o.AdminClientSAN == "" {
		bad("admin-addr", "%q is not a loopback address: anyone who reaches it could read and reset counters; set --admin-token-file or --admin-client-san, or bind 127.0.0.1", o.AdminAddr)
	}
}

// readToken reads a bearer token from path: its content without the
// surrounding white space, which must not be empty.
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read the token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("%s holds no token", path)
	}
	return tok, nil
}

// adminAuth reads the admin listener's credentials.
func (o *Options) adminAuth() (server.AdminAuth, error) {
	a := server.AdminAuth{ClientSAN: o.AdminClientSAN, Refused: adminRefused}
	if o.AdminTokenFile == "" {
		return a, nil
	}
	tok, err := readToken(o.AdminTokenFile)
	if err != nil {
		return a, fmt.Errorf("--admin-token-file: %w", err)
	}
	a.Token = tok
	return a, nil
}

// newAdmin builds the admin listener's front door and its server: the
// descriptor counters (sluice.v1.Descriptors, /v1/descriptors/*) on
// server.Admin, served with the service's TLS when tlsConfig is set
// (HTTP/1.1 and HTTP/2 by ALPN), else in plaintext HTTP/1.1 and HTTP/2
// with prior knowledge, as gRPC clients speak it.
func (a *App) newAdmin(tlsConfig *tls.Config, errorLog *log.Logger) (*server.Admin, *http.Server, error) {
	auth, err := a.opts.adminAuth()
	if err != nil {
		return nil, nil, err
	}
	admin := server.NewAdmin(auth)
	server.NewDescriptors(server.DescriptorsOptions{Limiter: a.limiter, Config: a.rls.Config, Logger: a.log}).Mount(admin)
	srv := &http.Server{Handler: admin, TLSConfig: tlsConfig, ErrorLog: errorLog,
		ReadHeaderTimeout: a.opts.HTTPReadTimeout, ReadTimeout: a.opts.HTTPReadTimeout,
		WriteTimeout: a.opts.HTTPWriteTimeout, IdleTimeout: a.opts.HTTPIdleTimeout, MaxHeaderBytes: a.opts.HTTPMaxHeaderBytes,
		Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	if tlsConfig != nil {
		srv.Protocols.SetHTTP2(true)
	} else {
		srv.Protocols.SetUnencryptedHTTP2(true)
	}
	return admin, srv, nil
}
