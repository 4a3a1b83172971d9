package xds

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"google.golang.org/grpc/credentials"
)

// TLSCredentials are the credentials of a TLS connection to the
// management server: the server's certificate is checked against the CA
// file's certificates (the system's when caFile is ""), for serverName
// when it is not "" (envoyproxy/ratelimit's CONFIG_GRPC_XDS_SERVER_TLS_SAN)
// and the host of the server address otherwise; certFile and keyFile,
// both or neither, are the client's certificate for mutual TLS.
func TLSCredentials(certFile, keyFile, caFile, serverName string) (credentials.TransportCredentials, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("xds TLS: a client certificate and key go together")
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("xds TLS client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("xds TLS CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("xds TLS CA %s: no PEM certificate in it", caFile)
		}
		cfg.RootCAs = pool
	}
	return credentials.NewTLS(cfg), nil
}
