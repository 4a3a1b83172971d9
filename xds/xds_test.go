package xds_test

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-rl/sluice/descriptors"
	"github.com/sluice-rl/sluice/xds"
	"github.com/sluice-rl/sluice/xds/xdstest"
)

// limitConfig is a RateLimitConfig for domain with one descriptor key
// limited to rpu requests a minute.
func limitConfig(name, domain, key string, rpu uint32) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: name, Domain: domain, Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key:       key,
		RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: rpu},
	}}}
}

func TestDomainReadsEveryField(t *testing.T) {
	meta, _ := structpb.NewStruct(map[string]any{"team": "payments"})
	rc := &rlsconfv3.RateLimitConfig{Name: "shop-config", Domain: "shop", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "user", DetailedMetric: true, Metadata: meta,
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 5, Name: "per-user"},
			Descriptors: []*rlsconfv3.RateLimitDescriptor{
				{Key: "plan", Value: "gold", ShadowMode: true,
					RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_WEEK, RequestsPerUnit: 100,
						Replaces: []*rlsconfv3.RateLimitReplace{{Name: "per-user"}}}},
				{Key: "plan", QuotaMode: true, RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true}},
			}},
		{Key: "path", Value: "/api/*", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_YEAR, RequestsPerUnit: 1}},
	}}
	const yaml = `domain: shop
descriptors:
  - key: user
    detailed_metric: true
    metadata: {team: payments}
    rate_limit: {unit: second, requests_per_unit: 5, name: per-user}
    descriptors:
      - key: plan
        value: gold
        shadow_mode: true
        rate_limit: {unit: week, requests_per_unit: 100, replaces: [{name: per-user}]}
      - key: plan
        quota_mode: true
        rate_limit: {unlimited: true}
  - key: path
    value: "/api/*"
    rate_limit: {unit: year, requests_per_unit: 1}
`
	built, err := xds.Domain(rc)
	if err != nil {
		t.Fatalf("Domain: %v", err)
	}
	parsed, err := descriptors.Parse("shop.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	bc, _ := descriptors.New(built)
	pc, _ := descriptors.New(parsed)
	if got, want := bc.String(), pc.String(); got != want {
		t.Errorf("rules from xDS: got\n%s\nwant (from YAML)\n%s", got, want)
	}
	r := bc.Match("shop", []descriptors.Entry{{Key: "user", Value: "u1"}, {Key: "plan", Value: "gold"}})
	if r == nil || !r.ShadowMode || len(r.Replaces) != 1 || r.Replaces[0] != "per-user" {
		t.Errorf("user/plan=gold: got rule %v, want the shadow weekly rule replacing per-user", r)
	}
	if got, want := r.File, `RateLimitConfig "shop-config"`; got != want {
		t.Errorf("rule File: got %q, want %q", got, want)
	}
	// The user rule's metadata arrives as a file's would.
	bu := bc.Match("shop", []descriptors.Entry{{Key: "user", Value: "u1"}})
	pu := pc.Match("shop", []descriptors.Entry{{Key: "user", Value: "u1"}})
	if bu == nil || pu == nil || !reflect.DeepEqual(bu.Metadata, pu.Metadata) || bu.Metadata["team"] != "payments" {
		t.Errorf("user rule metadata: got %v from xDS and %v from YAML, want team payments in both", metadataOf(bu), metadataOf(pu))
	}
}

func TestConfigRefusesBadResources(t *testing.T) {
	mustAny := func(rc *rlsconfv3.RateLimitConfig) *anypb.Any {
		a, err := anypb.New(rc)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	tests := []struct {
		name    string
		res     []*anypb.Any
		wantErr string
	}{
		{
			name: "a limit with the UNKNOWN unit is refused with its resource and path",
			res: []*anypb.Any{mustAny(&rlsconfv3.RateLimitConfig{Name: "r1", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{
				{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{RequestsPerUnit: 3}}}})},
			wantErr: `RateLimitConfig "r1": descriptors[0].rate_limit: rate_limit needs a unit`,
		},
		{
			name: "a unit number the enum does not know is refused",
			res: []*anypb.Any{mustAny(&rlsconfv3.RateLimitConfig{Name: "r1", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{
				{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: 42, RequestsPerUnit: 3}}}})},
			wantErr: `invalid rate limit unit "unit(42)"`,
		},
		{
			name:    "two resources for one domain are refused",
			res:     []*anypb.Any{mustAny(limitConfig("a", "d", "k", 1)), mustAny(limitConfig("b", "d", "k", 2))},
			wantErr: `RateLimitConfig "b": duplicate domain "d", already in RateLimitConfig "a"`,
		},
		{
			name:    "a resource of another type is refused",
			res:     []*anypb.Any{{TypeUrl: "type.googleapis.com/google.protobuf.Empty"}},
			wantErr: `resource 0 has type "type.googleapis.com/google.protobuf.Empty"`,
		},
		{
			name:    "a resource that does not decode is refused",
			res:     []*anypb.Any{{TypeUrl: xds.TypeURL, Value: []byte{0xff, 0xff}}},
			wantErr: "resource 0:",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := xds.Config(tt.res)
			if err == nil {
				t.Fatalf("got config %v, want an error", cfg.Domains())
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("got error %q, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestParseNodeMetadata(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    map[string]string
		wantErr string
	}{
		{name: "empty text is no metadata", in: "", want: map[string]string{}},
		{name: "equals signs separate keys from values, as upstream reads them", in: "cluster=eu,zone=a", want: map[string]string{"cluster": "eu", "zone": "a"}},
		{name: "colons work when an entry has no equals sign", in: "cluster:eu, zone : a,", want: map[string]string{"cluster": "eu", "zone": "a"}},
		{name: "an equals sign wins over a colon in the value", in: "url=http://x:1", want: map[string]string{"url": "http://x:1"}},
		{name: "an entry without a separator is an error", in: "cluster=eu,zone", wantErr: `entry "zone" has no "="`},
		{name: "an empty key is an error", in: "=eu", wantErr: `entry "=eu" has an empty key`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := xds.ParseNodeMetadata(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// recorder keeps what a Client applies and rejects.
type recorder struct {
	mu       sync.Mutex // protects the fields below
	cfg      *descriptors.Config
	versions []string
	rejected []string
}

func (r *recorder) apply(cfg *descriptors.Config, version string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cfg, r.versions = cfg, append(r.versions, version)
}

func (r *recorder) reject(version string, _ error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rejected = append(r.rejected, version)
}

// limit is the requests per unit of key k in domain, 0 for none.
func (r *recorder) limit(domain string) uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rule := r.cfg.Match(domain, []descriptors.Entry{{Key: "k", Value: "v"}}); rule != nil {
		return rule.RequestsPerUnit
	}
	return 0
}

func (r *recorder) lastVersion() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.versions) == 0 {
		return ""
	}
	return r.versions[len(r.versions)-1]
}

// eventually polls cond until it holds or 10 seconds pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestClientFollowsServer runs a client against a real management server
// through a first config, an update, a bad update and a server restart.
func TestClientFollowsServer(t *testing.T) {
	srv := xdstest.Start(t)
	const node = "test-node"
	srv.Set(t, node, "1", limitConfig("a", "a", "k", 10))

	rec := &recorder{}
	c, err := xds.New(xds.Options{
		Server: srv.Addr, NodeID: node, NodeMetadata: map[string]string{"zone": "z1"},
		ConnectRetry: 20 * time.Millisecond, BackoffInitial: 20 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
		Apply: rec.apply, Reject: rec.reject, Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Run: got %v, want context.Canceled", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	})

	t.Run("the first snapshot is applied and ACKed", func(t *testing.T) {
		eventually(t, "version 1 is applied", func() bool { return rec.limit("a") == 10 })
		eventually(t, "the server sees the ACK of version 1", func() bool {
			for _, r := range srv.Requests() {
				if r.GetVersionInfo() == "1" && r.GetResponseNonce() != "" && r.GetErrorDetail() == nil {
					return true
				}
			}
			return false
		})
		first := srv.Requests()[0]
		if got := first.GetNode().GetId(); got != node {
			t.Errorf("node id: got %q, want %q", got, node)
		}
		if got := first.GetNode().GetMetadata().GetFields()["zone"].GetStringValue(); got != "z1" {
			t.Errorf("node metadata zone: got %q, want z1", got)
		}
		if got := first.GetTypeUrl(); got != xds.TypeURL {
			t.Errorf("type url: got %q, want %q", got, xds.TypeURL)
		}
	})

	t.Run("an update replaces the configuration", func(t *testing.T) {
		srv.Set(t, node, "2", limitConfig("a", "a", "k", 20), limitConfig("b", "b", "k", 7))
		eventually(t, "version 2 is applied", func() bool { return rec.limit("a") == 20 && rec.limit("b") == 7 })
	})

	t.Run("a bad update is NACKed and the configuration kept", func(t *testing.T) {
		bad := limitConfig("a", "a", "k", 30)
		bad.Descriptors[0].RateLimit.Unit = rlsconfv3.RateLimitUnit_UNKNOWN
		srv.Set(t, node, "3", bad)
		eventually(t, "the server sees a NACK", func() bool { return len(srv.NACKs()) > 0 })
		nack := srv.NACKs()[0]
		if got, want := nack.GetVersionInfo(), "2"; got != want {
			t.Errorf("NACK version: got %q, want the last good one, %q", got, want)
		}
		if got, want := nack.GetErrorDetail().GetMessage(), "rate_limit needs a unit"; !strings.Contains(got, want) {
			t.Errorf("NACK message: got %q, want it to contain %q", got, want)
		}
		if got := rec.limit("a"); got != 20 {
			t.Errorf("limit of a after the bad update: got %d, want 20 (version 2 kept)", got)
		}
		rec.mu.Lock()
		rejected := append([]string(nil), rec.rejected...)
		rec.mu.Unlock()
		if len(rejected) != 1 || rejected[0] != "3" {
			t.Errorf("rejected versions: got %v, want [3]", rejected)
		}
	})

	t.Run("after a server restart the client reconnects and takes a newer snapshot", func(t *testing.T) {
		streams := srv.Streams()
		srv.Stop()
		srv.Set(t, node, "4", limitConfig("a", "a", "k", 40))
		// While the server is away the last good configuration stays.
		time.Sleep(50 * time.Millisecond)
		if got := rec.limit("a"); got != 20 {
			t.Errorf("limit of a while the server is down: got %d, want 20", got)
		}
		srv.Restart(t)
		eventually(t, "version 4 is applied", func() bool { return rec.limit("a") == 40 })
		if got := srv.Streams(); got <= streams {
			t.Errorf("streams opened: got %d, want more than %d", got, streams)
		}
		if got := rec.lastVersion(); got != "4" {
			t.Errorf("last version applied: got %q, want 4", got)
		}
	})
}

func TestNewRefusesBadOptions(t *testing.T) {
	apply := func(*descriptors.Config, string) {}
	tests := []struct {
		name    string
		opts    xds.Options
		wantErr string
	}{
		{name: "a client needs a server", opts: xds.Options{Apply: apply}, wantErr: "no server address"},
		{name: "a client needs a callback", opts: xds.Options{Server: "127.0.0.1:1"}, wantErr: "no Apply callback"},
		{name: "the backoff maximum may not be below its start",
			opts:    xds.Options{Server: "127.0.0.1:1", Apply: apply, BackoffInitial: time.Second, BackoffMax: time.Millisecond},
			wantErr: "backoff max 1ms is less than backoff initial 1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := xds.New(tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("got error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestTLSCredentialsRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	notPEM := dir + "/not.pem"
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name          string
		cert, key, ca string
		wantErr       string
	}{
		{name: "a certificate without a key is refused", cert: "c.pem", wantErr: "a client certificate and key go together"},
		{name: "a missing client certificate is refused", cert: dir + "/none.pem", key: dir + "/none-key.pem", wantErr: "xds TLS client certificate"},
		{name: "a missing CA file is refused", ca: dir + "/none-ca.pem", wantErr: "xds TLS CA"},
		{name: "a CA file without a certificate is refused", ca: notPEM, wantErr: "no PEM certificate in it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := xds.TLSCredentials(tt.cert, tt.key, tt.ca, "")
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("got error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func metadataOf(r *descriptors.Rule) map[string]any {
	if r == nil {
		return nil
	}
	return r.Metadata
}
