package app_test

import (
	"context"
	"crypto/tls"
	"io"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluice-rl/sluice/app"
	"github.com/sluice-rl/sluice/xds/xdstest"
)

// xdsDomain is a RateLimitConfig resource limiting key k of domain to rpu
// requests an hour.
func xdsDomain(domain string, rpu uint32) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: domain, Domain: domain, Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key:       "k",
		RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: rpu},
	}}}
}

// reloadCount is the value of sluice_config_reloads_total for descriptors
// and result.
func reloadCount(t *testing.T, ta *testApp, result string) float64 {
	t.Helper()
	mfs, err := ta.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_config_reloads_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["kind"] == "descriptors" && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestXDSConfigServesRLS runs the service with its descriptor config from
// a real management server: nothing is served before the first snapshot,
// ShouldRateLimit answers by the snapshot, an update applies, and a bad
// update is refused while the running config stays.
func TestXDSConfigServesRLS(t *testing.T) {
	srv := xdstest.Start(t)
	const node = "sluice-test"
	// A file in --config is ignored with xDS: domain "file" never limits.
	ta := start(t, map[string]string{"file.yaml": domainFile("file", 1)}, func(o *app.Options) {
		o.ConfigType = app.ConfigTypeXDS
		o.XDS.ServerURL = srv.Addr
		o.XDS.NodeID = node
		o.XDS.NodeMetadata = "zone=z1"
		o.XDS.ConnectRetryInterval = 20 * time.Millisecond
		o.XDS.BackoffInitial = 20 * time.Millisecond
		o.XDS.BackoffMax = 100 * time.Millisecond
	})

	t.Run("before the first snapshot the service is not ready", func(t *testing.T) {
		eventually(t, "the xDS stream opens", func() bool { return srv.Streams() > 0 })
		if err := ta.Ready(context.Background()); err == nil {
			t.Error("Ready: got nil, want an error while no config has arrived")
		}
		if got := srv.Requests()[0].GetNode().GetMetadata().GetFields()["zone"].GetStringValue(); got != "z1" {
			t.Errorf("node metadata zone: got %q, want z1", got)
		}
	})

	t.Run("the first snapshot is served", func(t *testing.T) {
		srv.Set(t, node, "1", xdsDomain("xds", 2))
		eventually(t, "the limit of version 1 is served", func() bool {
			l, err := limitOf(ta, "xds", "k", "v")
			return err == nil && l == 2
		})
		if err := ta.Ready(context.Background()); err != nil {
			t.Errorf("Ready: got %v, want nil", err)
		}
		// limitOf spent one hit; the second is allowed, the third over.
		codes := []rlsv3.RateLimitResponse_Code{
			ta.ask(t, "xds", desc("k", "v")).GetOverallCode(),
			ta.ask(t, "xds", desc("k", "v")).GetOverallCode(),
		}
		if codes[0] != rlsv3.RateLimitResponse_OK || codes[1] != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Errorf("second and third calls: got %v, want [OK OVER_LIMIT]", codes)
		}
		if got := ta.ask(t, "file", desc("k", "v")).GetStatuses()[0].GetCurrentLimit(); got != nil {
			t.Errorf("domain from the ignored file: got limit %v, want none", got)
		}
		if got := reloadCount(t, ta, "success"); got != 1 {
			t.Errorf("successful reloads: got %v, want 1", got)
		}
	})

	t.Run("an update applies", func(t *testing.T) {
		srv.Set(t, node, "2", xdsDomain("xds", 50))
		eventually(t, "the limit of version 2 is served", func() bool {
			l, err := limitOf(ta, "xds", "k", "v")
			return err == nil && l == 50
		})
	})

	t.Run("a bad update is refused and the running config kept", func(t *testing.T) {
		bad := xdsDomain("xds", 70)
		bad.Descriptors = append(bad.Descriptors, bad.Descriptors[0]) // a duplicate key
		srv.Set(t, node, "3", bad)
		eventually(t, "the server sees a NACK", func() bool { return len(srv.NACKs()) > 0 })
		if got, want := srv.NACKs()[0].GetErrorDetail().GetMessage(), `duplicate descriptor key "k"`; !strings.Contains(got, want) {
			t.Errorf("NACK message: got %q, want it to contain %q", got, want)
		}
		if l, err := limitOf(ta, "xds", "k", "v"); err != nil || l != 50 {
			t.Errorf("limit after the bad update: got %d (err %v), want 50", l, err)
		}
		if got := reloadCount(t, ta, "failure"); got != 1 {
			t.Errorf("failed reloads: got %v, want 1", got)
		}
	})

	t.Run("after a server restart a newer snapshot is served", func(t *testing.T) {
		srv.Stop()
		srv.Set(t, node, "4", xdsDomain("xds", 80))
		if l, err := limitOf(ta, "xds", "k", "v"); err != nil || l != 50 {
			t.Errorf("limit while the server is down: got %d (err %v), want 50", l, err)
		}
		srv.Restart(t)
		eventually(t, "the limit of version 4 is served", func() bool {
			l, err := limitOf(ta, "xds", "k", "v")
			return err == nil && l == 80
		})
	})
}

// TestXDSOverMutualTLS takes the config from a management server that
// requires a client certificate, checking its certificate by a name that
// is not the dialled address.
func TestXDSOverMutualTLS(t *testing.T) {
	p := newPKI(t, t.TempDir(), "xds")
	serverCert, err := tls.LoadX509KeyPair(p.serverCert, p.serverKey)
	if err != nil {
		t.Fatal(err)
	}
	srv := xdstest.Start(t, grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{serverCert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: p.caPool,
	})))
	srv.Set(t, "default", "1", xdsDomain("tls", 9))
	ta := start(t, nil, func(o *app.Options) {
		o.ConfigType = app.ConfigTypeXDS
		o.XDS.ServerURL = srv.Addr // 127.0.0.1:port; the certificate also names localhost
		o.XDS.UseTLS = true
		o.XDS.ClientTLSCert, o.XDS.ClientTLSKey = p.clientCert, p.clientKey
		o.XDS.ServerTLSCACert = p.caFile
		o.XDS.ServerTLSSAN = "localhost"
		o.XDS.ConnectRetryInterval = 20 * time.Millisecond
		o.XDS.BackoffInitial, o.XDS.BackoffMax = 20*time.Millisecond, 100*time.Millisecond
	})
	eventually(t, "the limit from the TLS server is served", func() bool {
		l, err := limitOf(ta, "tls", "k", "v")
		return err == nil && l == 9
	})
}

func TestParseServeXDSFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(t *testing.T, o app.Options)
		wantErr string
	}{
		{
			name: "the defaults are a file config and envoyproxy/ratelimit's xDS defaults",
			check: func(t *testing.T, o app.Options) {
				if o.ConfigType != "FILE" || o.XDS.ServerURL != "localhost:18000" || o.XDS.NodeID != "default" ||
					o.XDS.ConnectRetryInterval != 3*time.Second || o.XDS.BackoffInitial != 10*time.Second || o.XDS.BackoffMax != 60*time.Second {
					t.Errorf("got %q %+v, want FILE and the defaults", o.ConfigType, o.XDS)
				}
			},
		},
		{
			name: "every xDS flag reads its SLUICE_ variable",
			env: map[string]string{
				"SLUICE_CONFIG_TYPE": "GRPC_XDS_SOTW", "SLUICE_XDS_SERVER_URL": "cp:9000", "SLUICE_XDS_NODE_ID": "n1",
				"SLUICE_XDS_NODE_METADATA": "a=b", "SLUICE_XDS_CLIENT_HEADERS": "x-token:t",
				"SLUICE_XDS_CONNECT_RETRY_INTERVAL": "1s", "SLUICE_XDS_BACKOFF_INITIAL": "2s", "SLUICE_XDS_BACKOFF_MAX": "4s",
				"SLUICE_XDS_MAX_RECV_MSG_SIZE": "1000", "SLUICE_XDS_SERVER_USE_TLS": "true",
				"SLUICE_XDS_CLIENT_TLS_CERT": "c.pem", "SLUICE_XDS_CLIENT_TLS_KEY": "k.pem",
				"SLUICE_XDS_SERVER_TLS_CACERT": "ca.pem", "SLUICE_XDS_SERVER_TLS_SAN": "cp.example",
			},
			check: func(t *testing.T, o app.Options) {
				want := app.XDSOptions{ServerURL: "cp:9000", NodeID: "n1", NodeMetadata: "a=b", Headers: "x-token:t",
					ConnectRetryInterval: time.Second, BackoffInitial: 2 * time.Second, BackoffMax: 4 * time.Second,
					MaxRecvMsgSize: 1000, UseTLS: true, ClientTLSCert: "c.pem", ClientTLSKey: "k.pem",
					ServerTLSCACert: "ca.pem", ServerTLSSAN: "cp.example"}
				if o.ConfigType != app.ConfigTypeXDS || o.XDS != want {
					t.Errorf("got %q %+v, want GRPC_XDS_SOTW %+v", o.ConfigType, o.XDS, want)
				}
			},
		},
		{
			name:    "an unknown config type is refused",
			args:    []string{"--config-type", "grpc"},
			wantErr: `--config-type: "grpc" is not one of FILE, GRPC_XDS_SOTW`,
		},
		{
			name:    "metadata without a separator is refused",
			args:    []string{"--config-type", "GRPC_XDS_SOTW", "--xds-node-metadata", "zone"},
			wantErr: `--xds-node-metadata: entry "zone" has no "="`,
		},
		{
			name:    "a backoff maximum below its start is refused",
			args:    []string{"--config-type", "GRPC_XDS_SOTW", "--xds-backoff-initial", "5s", "--xds-backoff-max", "1s"},
			wantErr: "--xds-backoff-max: 1s is less than --xds-backoff-initial 5s",
		},
		{
			name:    "a client certificate without its key is refused",
			args:    []string{"--config-type", "GRPC_XDS_SOTW", "--xds-client-tls-cert", "c.pem"},
			wantErr: "--xds-client-tls-cert: --xds-client-tls-cert and --xds-client-tls-key go together",
		},
		{
			name: "bad xDS flags are not checked with a file config",
			args: []string{"--xds-node-metadata", "zone"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := app.ParseServe(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseServe: %v", err)
			}
			if tt.check != nil {
				tt.check(t, o)
			}
		})
	}
}
