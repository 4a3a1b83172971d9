package app

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/sluice-rl/sluice/descriptors"
	"github.com/sluice-rl/sluice/xds"
)

// The values of Options.ConfigType, envoyproxy/ratelimit's CONFIG_TYPE.
const (
	ConfigTypeFile = "FILE"
	ConfigTypeXDS  = "GRPC_XDS_SOTW"
)

// XDSOptions are the --xds-* flags: the xDS management server the Envoy
// descriptor configuration comes from with --config-type GRPC_XDS_SOTW.
type XDSOptions struct {
	ServerURL            string        // --xds-server-url, host:port; default localhost:18000
	NodeID               string        // --xds-node-id; default "default"
	NodeMetadata         string        // --xds-node-metadata, "k1=v1,k2=v2" (also "k1:v1")
	Headers              string        // --xds-client-headers, "k1:v1,k2:v2"
	ConnectRetryInterval time.Duration // --xds-connect-retry-interval; default 3s, > 0
	BackoffInitial       time.Duration // --xds-backoff-initial; default 10s, > 0
	BackoffMax           time.Duration // --xds-backoff-max; default 60s, >= BackoffInitial
	MaxRecvMsgSize       int           // --xds-max-recv-msg-size in bytes; 0 (default): 4 MiB
	UseTLS               bool          // --xds-server-use-tls
	ClientTLSCert        string        // --xds-client-tls-cert, with ClientTLSKey for mutual TLS
	ClientTLSKey         string        // --xds-client-tls-key
	ServerTLSCACert      string        // --xds-server-tls-cacert; default: the system's CAs
	ServerTLSSAN         string        // --xds-server-tls-san; default: the host of ServerURL
}

// xdsDefaults are envoyproxy/ratelimit's defaults.
func xdsDefaults() XDSOptions {
	return XDSOptions{
		ServerURL:            "localhost:18000",
		NodeID:               "default",
		ConnectRetryInterval: 3 * time.Second,
		BackoffInitial:       10 * time.Second,
		BackoffMax:           60 * time.Second,
	}
}

// validateXDS checks --config-type and, when it is GRPC_XDS_SOTW, the
// --xds-* flags.
func (o *Options) validateXDS() []error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	switch o.ConfigType {
	case "", ConfigTypeFile:
		return nil
	case ConfigTypeXDS:
	default:
		bad("config-type", "%q is not one of %s, %s", o.ConfigType, ConfigTypeFile, ConfigTypeXDS)
		return errs
	}
	x := &o.XDS
	if x.ServerURL == "" {
		bad("xds-server-url", "required with --config-type %s", ConfigTypeXDS)
	}
	if x.NodeID == "" {
		bad("xds-node-id", "must not be empty")
	}
	if _, err := xds.ParseNodeMetadata(x.NodeMetadata); err != nil {
		bad("xds-node-metadata", "%v", err)
	}
	if _, err := xds.ParseHeaders(x.Headers); err != nil {
		bad("xds-client-headers", "%v", err)
	}
	if x.ConnectRetryInterval <= 0 {
		bad("xds-connect-retry-interval", "%s must be positive", x.ConnectRetryInterval)
	}
	if x.BackoffInitial <= 0 {
		bad("xds-backoff-initial", "%s must be positive", x.BackoffInitial)
	}
	if x.BackoffMax < x.BackoffInitial {
		bad("xds-backoff-max", "%s is less than --xds-backoff-initial %s", x.BackoffMax, x.BackoffInitial)
	}
	if x.MaxRecvMsgSize < 0 {
		bad("xds-max-recv-msg-size", "%d is negative", x.MaxRecvMsgSize)
	}
	if (x.ClientTLSCert == "") != (x.ClientTLSKey == "") {
		bad("xds-client-tls-cert", "--xds-client-tls-cert and --xds-client-tls-key go together")
	}
	return errs
}

// startXDS starts the xDS client when the configuration comes from a
// management server. Every configuration it accepts goes to the RLS as a
// reload does, counted in the reload metrics; every one it refuses counts
// as a failed reload and leaves the running one in place.
func (a *App) startXDS() error {
	if a.opts.ConfigType != ConfigTypeXDS {
		return nil
	}
	x := a.opts.XDS
	meta, _ := xds.ParseNodeMetadata(x.NodeMetadata) // checked by Validate
	headers, _ := xds.ParseHeaders(x.Headers)
	var creds credentials.TransportCredentials
	if x.UseTLS {
		var err error
		if creds, err = xds.TLSCredentials(x.ClientTLSCert, x.ClientTLSKey, x.ServerTLSCACert, x.ServerTLSSAN); err != nil {
			return fmt.Errorf("--xds-server-use-tls: %w", err)
		}
	}
	c, err := xds.New(xds.Options{
		Server: x.ServerURL, NodeID: x.NodeID, NodeMetadata: meta, Headers: headers,
		Credentials: creds, MaxRecvMsgSize: x.MaxRecvMsgSize, ConnectRetry: x.ConnectRetryInterval,
		BackoffInitial: x.BackoffInitial, BackoffMax: x.BackoffMax, Logger: a.log,
		Apply: func(cfg *descriptors.Config, _ string) {
			a.rls.SetConfig(cfg)
			a.metrics.Stats().ConfigLoad(true)
			a.configStatus.record(a.clock.Now(), nil)
			a.reloads.WithLabelValues("descriptors", "success").Inc()
			a.lastReload.WithLabelValues("descriptors").Set(1)
		},
		Reject: func(_ string, err error) {
			a.metrics.Stats().ConfigLoad(false)
			a.configStatus.record(a.clock.Now(), err)
			a.reloads.WithLabelValues("descriptors", "failure").Inc()
			a.lastReload.WithLabelValues("descriptors").Set(0)
		},
	})
	if err != nil {
		return fmt.Errorf("--xds-server-url: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx)
	}()
	a.stopXDS = func() {
		cancel()
		<-done
	}
	return nil
}
