package app_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/app"
	"github.com/sluice-rl/sluice/store/memcache/memcachetest"
	"github.com/sluice-rl/sluice/store/redis/redistest"
)

// Issue 15 item 3: inspect and reset a descriptor's counters on the admin
// listener.

const adminConfig = `
domain: adm
descriptors:
  - key: window
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: smooth
    rate_limit: {unit: minute, requests_per_unit: 3, burst: 3}
  - key: free
    rate_limit: {unlimited: true}
`

// counters is the JSON answer of /v1/descriptors/*.
type counters struct {
	Status  string `json:"status"`
	Domain  string `json:"domain"`
	Entries []struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	} `json:"entries"`
	Rule  string `json:"rule"`
	Key   string `json:"key"`
	Limit *struct {
		RequestsPerUnit uint32 `json:"requests_per_unit"`
		Unit            string `json:"unit"`
		UnitMultiplier  uint32 `json:"unit_multiplier"`
		Burst           uint32 `json:"burst"`
		Algorithm       string `json:"algorithm"`
	} `json:"limit"`
	Count          int64 `json:"count"`
	Remaining      int64 `json:"remaining"`
	ResetInSeconds int64 `json:"reset_in_seconds"`
	Reset          bool  `json:"reset"`
	Limits         []struct {
		Rule           string `json:"rule"`
		Key            string `json:"key"`
		Count          int64  `json:"count"`
		Remaining      int64  `json:"remaining"`
		ResetInSeconds int64  `json:"reset_in_seconds"`
	} `json:"limits"`
}

// adminCall makes an HTTP request with the bearer token tok (none when empty) and returns the status and body.
func adminCall(t *testing.T, c *http.Client, method, url, tok, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// decodeCounters reads a 200 answer of /v1/descriptors/*.
func decodeCounters(t *testing.T, code int, body string) counters {
	t.Helper()
	if code != http.StatusOK {
		t.Fatalf("got %d %s, want 200", code, body)
	}
	var c counters
	if err := json.Unmarshal([]byte(body), &c); err != nil {
		t.Fatalf("answer %s: %v", body, err)
	}
	return c
}

// inspect reads the counters of domain's one-entry descriptor key=value
// over HTTP.
func (ta *testApp) inspect(t *testing.T, domain, key, value string) counters {
	t.Helper()
	q := url.Values{"domain": {domain}, "entry": {key + "=" + value}}
	code, body := adminCall(t, ta.http, http.MethodGet, "http://"+ta.AdminAddr()+"/v1/descriptors/counters?"+q.Encode(), "", "")
	return decodeCounters(t, code, body)
}

// resetHTTP resets the counter of domain's descriptor key=value over HTTP.
func (ta *testApp) resetHTTP(t *testing.T, domain, key, value string) counters {
	t.Helper()
	body := `{"domain": "` + domain + `", "entries": [{"key": "` + key + `", "value": "` + value + `"}]}`
	code, out := adminCall(t, ta.http, http.MethodPost, "http://"+ta.AdminAddr()+"/v1/descriptors/reset", "", body)
	return decodeCounters(t, code, out)
}

// adminGRPC dials the admin listener in plaintext.
func adminGRPC(t *testing.T, addr string) sluicev1.DescriptorsClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return sluicev1.NewDescriptorsClient(conn)
}

func descriptorRequest(domain string, kv ...string) *sluicev1.DescriptorRequest {
	req := &sluicev1.DescriptorRequest{Domain: domain}
	for i := 0; i+1 < len(kv); i += 2 {
		req.Entries = append(req.Entries, &sluicev1.DescriptorEntry{Key: kv[i], Value: kv[i+1]})
	}
	return req
}

// backend is a store for the admin tests: how to point the options at
// a new one.
type backend struct {
	name  string
	setup func(t *testing.T, o *app.Options)
}

func adminBackends() []backend {
	return []backend{
		{name: "memory", setup: func(*testing.T, *app.Options) {}},
		{name: "Redis", setup: func(t *testing.T, o *app.Options) {
			srv := redistest.StartSingle(t)
			o.Store, o.Redis.Addrs, o.Redis.Timeout = "redis", []string{srv.Addr}, 2*time.Second
		}},
		{name: "Redis Cluster", setup: func(t *testing.T, o *app.Options) {
			if testing.Short() {
				t.Skip("starts a Redis Cluster")
			}
			cl := redistest.StartCluster(t, 3)
			o.Store, o.Redis.Mode, o.Redis.Addrs, o.Redis.Timeout = "redis", "cluster", cl.Addrs(), 2*time.Second
		}},
		{name: "memcache", setup: func(t *testing.T, o *app.Options) {
			srv := memcachetest.Start(t)
			o.Store, o.Memcache.Addrs, o.Memcache.Timeout = "memcache", []string{srv.Addr}, 2*time.Second
		}},
	}
}

func TestAdminInspectsAndResetsCountersOnEveryBackend(t *testing.T) {
	for _, be := range adminBackends() {
		t.Run("on "+be.name, func(t *testing.T) {
			ta := start(t, map[string]string{"adm.yaml": adminConfig}, func(o *app.Options) {
				o.AdminAddr = "127.0.0.1:0"
				be.setup(t, o)
			})
			rpc := adminGRPC(t, ta.AdminAddr())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for _, tc := range []struct {
				key, algorithm string
				reset          int64 // reset_in_seconds right after the requests
			}{
				{key: "window", algorithm: "fixed_window", reset: 60},
				// Two of three tokens in use refill in 2 × 20 s.
				{key: "smooth", algorithm: "gcra", reset: 40},
			} {
				t.Run("a "+tc.algorithm+" rule", func(t *testing.T) {
					for range 2 {
						if got := ta.ask(t, "adm", desc(tc.key, "x")).GetOverallCode(); got != rlsv3.RateLimitResponse_OK {
							t.Fatalf("request: got %s, want OK", got)
						}
					}
					first := ta.inspect(t, "adm", tc.key, "x")
					if first.Status != "limited" || first.Count != 2 || first.Remaining != 1 || first.ResetInSeconds != tc.reset {
						t.Fatalf("inspect after 2 requests: got %+v, want limited, count 2, remaining 1, reset in %d s", first, tc.reset)
					}
					if first.Rule != "adm."+tc.key || first.Key != "adm_"+tc.key+"_x_" || first.Limit == nil ||
						first.Limit.RequestsPerUnit != 3 || first.Limit.Unit != "minute" || first.Limit.Algorithm != tc.algorithm {
						t.Fatalf("inspect: got rule %q key %q limit %+v, want rule adm.%s, key adm_%s_x_, 3 per minute, %s", first.Rule, first.Key, first.Limit, tc.key, tc.key, tc.algorithm)
					}
					if again := ta.inspect(t, "adm", tc.key, "x"); again.Count != 2 || again.Remaining != 1 {
						t.Fatalf("a second inspect: got count %d remaining %d, want 2 and 1 (inspecting counts nothing)", again.Count, again.Remaining)
					}
					g, err := rpc.Inspect(ctx, descriptorRequest("adm", tc.key, "x"))
					if err != nil {
						t.Fatalf("gRPC Inspect: %v", err)
					}
					if g.GetStatus() != sluicev1.Counters_LIMITED || g.GetCount() != 2 || g.GetRemaining() != 1 || g.GetRule() != "adm."+tc.key || g.GetLimit().GetAlgorithm() != tc.algorithm {
						t.Fatalf("gRPC Inspect: got %v, want LIMITED, count 2, remaining 1", g)
					}
					// Use the rest up: the next request is over.
					ta.ask(t, "adm", desc(tc.key, "x"))
					if got := ta.ask(t, "adm", desc(tc.key, "x")).GetOverallCode(); got != rlsv3.RateLimitResponse_OVER_LIMIT {
						t.Fatalf("the fourth request: got %s, want OVER_LIMIT", got)
					}
					if over := ta.inspect(t, "adm", tc.key, "x"); over.Remaining != 0 {
						t.Fatalf("inspect over the limit: got remaining %d, want 0", over.Remaining)
					}
					after := ta.resetHTTP(t, "adm", tc.key, "x")
					if !after.Reset || after.Count != 0 || after.Remaining != 3 {
						t.Fatalf("reset: got %+v, want reset, count 0, remaining 3", after)
					}
					if got := ta.ask(t, "adm", desc(tc.key, "x")).GetOverallCode(); got != rlsv3.RateLimitResponse_OK {
						t.Fatalf("the request after the reset: got %s, want OK", got)
					}
					g, err = rpc.Reset(ctx, descriptorRequest("adm", tc.key, "x"))
					if err != nil {
						t.Fatalf("gRPC Reset: %v", err)
					}
					if !g.GetWasReset() || g.GetCount() != 0 || g.GetRemaining() != 3 {
						t.Fatalf("gRPC Reset: got %v, want was_reset, count 0, remaining 3", g)
					}
				})
			}
			t.Run("no rule and unlimited rules say so", func(t *testing.T) {
				for _, tc := range []struct{ domain, key, want string }{
					{domain: "adm", key: "nothing", want: "no_rule"},
					{domain: "unknown", key: "window", want: "no_rule"},
					{domain: "adm", key: "free", want: "unlimited"},
				} {
					if got := ta.inspect(t, tc.domain, tc.key, "x"); got.Status != tc.want || got.Limit != nil {
						t.Errorf("%s %s=x: got %+v, want status %s and no limit", tc.domain, tc.key, got, tc.want)
					}
				}
				g, err := rpc.Inspect(ctx, descriptorRequest("adm", "free", "x"))
				if err != nil || g.GetStatus() != sluicev1.Counters_UNLIMITED {
					t.Errorf("gRPC Inspect of an unlimited rule: got %v, %v; want UNLIMITED", g, err)
				}
			})
		})
	}
}

func TestAdminReadsAndResetsEnvoyproxyRatelimitsCounters(t *testing.T) {
	// The fake clock stands on an hour boundary: the minute window
	// starts now.
	window := strconv.FormatInt(time.Unix(1_800_000_000, 0).Unix(), 10)
	for _, be := range []struct {
		name string
		// setup points o at a new Redis and returns the server that
		// holds a key.
		setup func(t *testing.T, o *app.Options) func(key string) *redistest.Server
	}{
		{name: "Redis", setup: func(t *testing.T, o *app.Options) func(string) *redistest.Server {
			srv := redistest.StartSingle(t)
			o.Store, o.Redis.Addrs, o.Redis.Timeout, o.Redis.KeyPrefix = "redis", []string{srv.Addr}, 2*time.Second, "rl:"
			return func(string) *redistest.Server { return srv }
		}},
		{name: "Redis Cluster", setup: func(t *testing.T, o *app.Options) func(string) *redistest.Server {
			if testing.Short() {
				t.Skip("starts a Redis Cluster")
			}
			cl := redistest.StartCluster(t, 3)
			o.Store, o.Redis.Mode, o.Redis.Addrs, o.Redis.Timeout, o.Redis.KeyPrefix = "redis", "cluster", cl.Addrs(), 2*time.Second, "rl:"
			return func(key string) *redistest.Server { return cl.NodeFor(t, key) }
		}},
	} {
		t.Run("on "+be.name, func(t *testing.T) {
			var adminRedis func(key string) *redistest.Server
			ta := start(t, map[string]string{"adm.yaml": adminConfig}, func(o *app.Options) {
				o.AdminAddr = "127.0.0.1:0"
				adminRedis = be.setup(t, o)
			})
			// envoyproxy/ratelimit counts with INCRBY on
			// <prefix><domain>_<key>_<value>_<window start>.
			key := "rl:adm_window_y_" + window
			adminRedis(key).MustDo("INCRBY", key, "2")
			if got := ta.inspect(t, "adm", "window", "y"); got.Count != 2 || got.Remaining != 1 {
				t.Fatalf("inspect after upstream's INCRBY of 2: got count %d remaining %d, want 2 and 1", got.Count, got.Remaining)
			}
			ta.resetHTTP(t, "adm", "window", "y")
			if n := adminRedis(key).MustDo("EXISTS", key); n != int64(0) {
				t.Fatalf("EXISTS %s after the reset: got %v, want 0 (deleted)", key, n)
			}
		})
	}
	t.Run("on memcache", func(t *testing.T) {
		srv := memcachetest.Start(t)
		ta := start(t, map[string]string{"adm.yaml": adminConfig}, func(o *app.Options) {
			o.AdminAddr = "127.0.0.1:0"
			o.Store, o.Memcache.Addrs, o.Memcache.Timeout, o.Memcache.KeyPrefix = "memcache", []string{srv.Addr}, 2*time.Second, "rl:"
		})
		key := "rl:adm_window_y_" + window
		if lines, err := srv.Do("add " + key + " 0 60 1\r\n2"); err != nil || len(lines) == 0 || lines[0] != "STORED" {
			t.Fatalf("add %s: got %v, %v", key, lines, err)
		}
		if got := ta.inspect(t, "adm", "window", "y"); got.Count != 2 || got.Remaining != 1 {
			t.Fatalf("inspect after upstream's counter of 2: got count %d remaining %d, want 2 and 1", got.Count, got.Remaining)
		}
		ta.resetHTTP(t, "adm", "window", "y")
		if got, ok := srv.Get(key); ok && got != "0" {
			t.Fatalf("memcached %s after the reset: got %q, want it gone or 0", key, got)
		}
	})
}

// writeToken writes tok to a file and returns its path.
func writeToken(t *testing.T, tok string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestAdminRefusesCallersWithoutTheToken(t *testing.T) {
	ta := start(t, map[string]string{"adm.yaml": adminConfig}, func(o *app.Options) {
		o.AdminAddr, o.AdminTokenFile = "127.0.0.1:0", writeToken(t, "adm1n")
	})
	counters := "http://" + ta.AdminAddr() + "/v1/descriptors/counters?domain=adm&entry=window=x"
	reset := "http://" + ta.AdminAddr() + "/v1/descriptors/reset?domain=adm&entry=window=x"
	for _, tc := range []struct {
		name, method, url, tok string
		want                   int
	}{
		{name: "an inspect without a token is forbidden", method: http.MethodGet, url: counters, want: http.StatusForbidden},
		{name: "a reset without a token is forbidden", method: http.MethodPost, url: reset, want: http.StatusForbidden},
		{name: "an inspect with a wrong token is forbidden", method: http.MethodGet, url: counters, tok: "guess", want: http.StatusForbidden},
		{name: "an inspect with the token is answered", method: http.MethodGet, url: counters, tok: "adm1n", want: http.StatusOK},
		{name: "a reset with the token is answered", method: http.MethodPost, url: reset, tok: "adm1n", want: http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := adminCall(t, ta.http, tc.method, tc.url, tc.tok, "")
			if code != tc.want {
				t.Fatalf("got %d %s, want %d", code, body, tc.want)
			}
			if code == http.StatusForbidden && !strings.Contains(body, "--admin-token-file") {
				t.Fatalf("got %s, want a message naming --admin-token-file", body)
			}
		})
	}
	rpc := adminGRPC(t, ta.AdminAddr())
	for _, tc := range []struct {
		name string
		md   []string
		want codes.Code
	}{
		{name: "a gRPC call without a token is denied", want: codes.PermissionDenied},
		{name: "a gRPC call with a wrong token is denied", md: []string{"authorization", "Bearer guess"}, want: codes.PermissionDenied},
		{name: "a gRPC call with the token is answered", md: []string{"authorization", "Bearer adm1n"}, want: codes.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if tc.md != nil {
				ctx = metadata.AppendToOutgoingContext(ctx, tc.md...)
			}
			_, err := rpc.Inspect(ctx, descriptorRequest("adm", "window", "x"))
			if got := status.Code(err); got != tc.want {
				t.Fatalf("got %s (%v), want %s", got, err, tc.want)
			}
			_, err = rpc.Reset(ctx, descriptorRequest("adm", "window", "x"))
			if got := status.Code(err); got != tc.want {
				t.Fatalf("Reset: got %s (%v), want %s", got, err, tc.want)
			}
		})
	}
}

func TestAdminOverTLSWithAClientCertificate(t *testing.T) {
	p := newPKI(t, t.TempDir(), "admin")
	ta := start(t, map[string]string{"adm.yaml": adminConfig}, func(o *app.Options) {
		o.TLSCert, o.TLSKey, o.TLSClientCA = p.serverCert, p.serverKey, p.caFile
		o.AdminAddr, o.AdminClientSAN = "127.0.0.1:0", "localhost"
	})
	cfg := &tls.Config{RootCAs: p.caPool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{p.client}}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	code, body := adminCall(t, c, http.MethodGet, "https://"+ta.AdminAddr()+"/v1/descriptors/counters?domain=adm&entry=window=x", "", "")
	if got := decodeCounters(t, code, body); got.Status != "limited" {
		t.Fatalf("HTTPS inspect: got %+v, want limited", got)
	}
	conn, err := grpc.NewClient(ta.AdminAddr(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if g, err := sluicev1.NewDescriptorsClient(conn).Inspect(ctx, descriptorRequest("adm", "window", "x")); err != nil || g.GetStatus() != sluicev1.Counters_LIMITED {
		t.Fatalf("gRPC over TLS: got %v, %v; want LIMITED", g, err)
	}
	// Plaintext to the TLS port gets no answer.
	if resp, err := ta.http.Get("http://" + ta.AdminAddr() + "/v1/descriptors/counters?domain=adm&entry=window=x"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP to the TLS admin port: got 200, want refusal")
		}
	}
}

func TestAdminClientCertificateMustNameTheSAN(t *testing.T) {
	p := newPKI(t, t.TempDir(), "admin")
	ta := start(t, map[string]string{"adm.yaml": adminConfig}, func(o *app.Options) {
		o.TLSCert, o.TLSKey, o.TLSClientCA = p.serverCert, p.serverKey, p.caFile
		o.AdminAddr, o.AdminClientSAN = "127.0.0.1:0", "ops.example.com"
	})
	cfg := &tls.Config{RootCAs: p.caPool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{p.client}}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	code, body := adminCall(t, c, http.MethodGet, "https://"+ta.AdminAddr()+"/v1/descriptors/counters?domain=adm&entry=window=x", "", "")
	if code != http.StatusForbidden {
		t.Fatalf("a client certificate naming localhost, not ops.example.com: got %d %s, want 403", code, body)
	}
}

func TestAdminListenerAddresses(t *testing.T) {
	t.Run("the admin listener is off by default", func(t *testing.T) {
		if got := app.Defaults().AdminAddr; got != "" {
			t.Fatalf("default --admin-addr: got %q, want empty (off)", got)
		}
		ta := start(t, map[string]string{"adm.yaml": adminConfig}, nil)
		if got := ta.AdminAddr(); got != "" {
			t.Fatalf("AdminAddr: got %q, want \"\" (no port opened)", got)
		}
		if ta.Admin() != nil {
			t.Fatal("Admin: got a front door, want nil")
		}
		// Nor do the service's own ports answer the admin paths.
		if code, _ := ta.get(t, "http://"+ta.HTTPAddr()+"/v1/descriptors/counters?domain=adm&entry=window=x"); code == http.StatusOK {
			t.Fatalf("the HTTP port: got %d for /v1/descriptors/counters, want no answer", code)
		}
	})
	t.Run("an address without a host binds loopback", func(t *testing.T) {
		ta := start(t, map[string]string{"adm.yaml": adminConfig}, func(o *app.Options) { o.AdminAddr = ":0" })
		host, _, err := net.SplitHostPort(ta.AdminAddr())
		if err != nil || host != "127.0.0.1" {
			t.Fatalf("AdminAddr: got %q (%v), want 127.0.0.1:port", ta.AdminAddr(), err)
		}
		if got := ta.inspect(t, "adm", "window", "x"); got.Status != "limited" {
			t.Fatalf("inspect: got %+v, want limited", got)
		}
	})
	t.Run("off is off", func(t *testing.T) {
		ta := start(t, map[string]string{"adm.yaml": adminConfig}, func(o *app.Options) { o.AdminAddr = "off" })
		if got := ta.AdminAddr(); got != "" {
			t.Fatalf("AdminAddr: got %q, want \"\" (no port opened)", got)
		}
	})
	t.Run("a unix socket serves without credentials", func(t *testing.T) {
		sock := filepath.Join(t.TempDir(), "admin.sock")
		ta := start(t, map[string]string{"adm.yaml": adminConfig}, func(o *app.Options) { o.AdminAddr = "unix:" + sock })
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}}
		code, body := adminCall(t, c, http.MethodGet, "http://admin/v1/descriptors/counters?domain=adm&entry=window=x", "", "")
		if got := decodeCounters(t, code, body); got.Status != "limited" {
			t.Fatalf("inspect over %s: got %+v, want limited", ta.AdminAddr(), got)
		}
	})
	t.Run("SLUICE_ADMIN_ADDR turns it on", func(t *testing.T) {
		o, err := app.ParseServe(nil, func(k string) string { return map[string]string{"SLUICE_ADMIN_ADDR": ":9091"}[k] }, io.Discard)
		if err != nil || o.AdminAddr != ":9091" {
			t.Fatalf("got %q, %v; want :9091", o.AdminAddr, err)
		}
	})
}

func TestAdminListenerOptionsRefused(t *testing.T) {
	tok := writeToken(t, "adm1n")
	empty := writeToken(t, " ")
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string // "" when accepted
	}{
		{name: "a loopback address without credentials is accepted", args: []string{"--admin-addr", "127.0.0.1:9091"}},
		{name: "localhost without credentials is accepted", args: []string{"--admin-addr", "localhost:9091"}},
		{name: "an IPv6 loopback address without credentials is accepted", args: []string{"--admin-addr", "[::1]:9091"}},
		{name: "all interfaces with a token is accepted", args: []string{"--admin-addr", "0.0.0.0:9091", "--admin-token-file", tok}},
		{name: "all interfaces without credentials is refused", args: []string{"--admin-addr", "0.0.0.0:9091"}, wantErr: `--admin-addr: "0.0.0.0:9091" is not a loopback address`},
		{name: "all IPv6 interfaces without credentials is refused", args: []string{"--admin-addr", "[::]:9091"}, wantErr: "is not a loopback address"},
		{name: "a host name without credentials is refused", args: []string{"--admin-addr", "admin.example.com:9091"}, wantErr: "is not a loopback address"},
		{name: "an address without a port is refused", args: []string{"--admin-addr", "127.0.0.1"}, wantErr: `--admin-addr: "127.0.0.1" is not host:port`},
		{name: "a token file without the admin listener is refused", args: []string{"--admin-token-file", tok}, wantErr: "--admin-token-file: needs --admin-addr"},
		{name: "an empty token file is refused", args: []string{"--admin-addr", ":9091", "--admin-token-file", empty}, wantErr: "--admin-token-file: " + empty + " holds no token"},
		{name: "a missing token file is refused", args: []string{"--admin-addr", ":9091", "--admin-token-file", tok + ".missing"}, wantErr: "--admin-token-file: read the token"},
		{name: "a client SAN without mutual TLS is refused", args: []string{"--admin-addr", ":9091", "--admin-client-san", "ops"}, wantErr: "--admin-client-san: needs --tls-client-ca"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := app.ParseServe(tc.args, func(string) string { return "" }, io.Discard)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("got error %v, want none", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("got error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
	t.Run("the service refuses to start on all interfaces without credentials", func(t *testing.T) {
		o := app.Defaults()
		o.AdminAddr = "0.0.0.0:0"
		if _, err := app.New(o, app.Deps{}); err == nil || !strings.Contains(err.Error(), "--admin-addr") {
			t.Fatalf("app.New: got %v, want an error naming --admin-addr", err)
		}
	})
}

func TestAdminRefusesBadRequests(t *testing.T) {
	ta := start(t, map[string]string{"adm.yaml": adminConfig}, func(o *app.Options) { o.AdminAddr = "127.0.0.1:0" })
	base := "http://" + ta.AdminAddr()
	for _, tc := range []struct {
		name, method, path, body string
		want                     int
		wantErr                  string
	}{
		{name: "an entry without = is refused", method: http.MethodGet, path: "/v1/descriptors/counters?domain=adm&entry=window", want: 400, wantErr: `entry 0 \"window\" has no \"=\"`},
		{name: "no domain is refused", method: http.MethodGet, path: "/v1/descriptors/counters?entry=window=x", want: 400, wantErr: "domain must not be empty"},
		{name: "no entry is refused", method: http.MethodGet, path: "/v1/descriptors/counters?domain=adm", want: 400, wantErr: "no entries"},
		{name: "an empty key is refused", method: http.MethodGet, path: "/v1/descriptors/counters?domain=adm&entry==x", want: 400, wantErr: "entry 0 has an empty key"},
		{name: "an unknown parameter is refused", method: http.MethodGet, path: "/v1/descriptors/counters?domain=adm&entry=window=x&hits=1", want: 400, wantErr: `unknown query parameter \"hits\"`},
		{name: "a POST to counters is refused", method: http.MethodPost, path: "/v1/descriptors/counters?domain=adm&entry=window=x", want: 405},
		{name: "a GET of reset is refused", method: http.MethodGet, path: "/v1/descriptors/reset?domain=adm&entry=window=x", want: 405},
		{name: "a body with an unknown field is refused", method: http.MethodPost, path: "/v1/descriptors/reset", body: `{"domain": "adm", "entries": [{"key": "window", "value": "x"}], "cost": 1}`, want: 400, wantErr: "unknown field"},
		{name: "a body that is not JSON is refused", method: http.MethodPost, path: "/v1/descriptors/reset", body: `domain=adm`, want: 400, wantErr: "invalid JSON"},
		{name: "a body and a query string together are refused", method: http.MethodPost, path: "/v1/descriptors/reset?domain=adm", body: `{"domain": "adm"}`, want: 400, wantErr: "not both"},
		{name: "a percent-encoded value is read decoded", method: http.MethodGet, path: "/v1/descriptors/counters?domain=adm&entry=window=a%26b%3Dc", want: 200, wantErr: `"value":"a&b=c"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := adminCall(t, ta.http, tc.method, base+tc.path, "", tc.body)
			if code != tc.want || !strings.Contains(body, tc.wantErr) {
				t.Fatalf("got %d %s, want %d with %q", code, body, tc.want, tc.wantErr)
			}
		})
	}
	rpc := adminGRPC(t, ta.AdminAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := rpc.Inspect(ctx, descriptorRequest("")); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("gRPC Inspect of nothing: got %v, want InvalidArgument", err)
	}
}

func TestAdminResetLiftsTheLocalOverLimitCache(t *testing.T) {
	srv := redistest.StartSingle(t)
	ta := start(t, map[string]string{"adm.yaml": adminConfig}, func(o *app.Options) {
		o.AdminAddr, o.LocalCacheSize = "127.0.0.1:0", 1<<20
		o.Store, o.Redis.Addrs, o.Redis.Timeout = "redis", []string{srv.Addr}, 2*time.Second
	})
	for range 3 {
		ta.ask(t, "adm", desc("window", "z"))
	}
	// Over the limit: the local cache now answers for the window.
	for range 2 {
		if got := ta.ask(t, "adm", desc("window", "z")).GetOverallCode(); got != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("request over the limit: got %s, want OVER_LIMIT", got)
		}
	}
	if got := ta.inspect(t, "adm", "window", "z"); got.Remaining != 0 {
		t.Fatalf("inspect over the limit: got remaining %d, want 0", got.Remaining)
	}
	ta.resetHTTP(t, "adm", "window", "z")
	if got := ta.ask(t, "adm", desc("window", "z")).GetOverallCode(); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("the request after the reset: got %s, want OK (the reset must clear the local cache too)", got)
	}
}

// A descriptor with several limits (rate_limits) shows each, and the
// closest as the answer does; a reset empties them all.
func TestAdminInspectsAndResetsSeveralLimits(t *testing.T) {
	const cfg = `
domain: adm
descriptors:
  - key: user
    rate_limits:
      - {unit: minute, requests_per_unit: 3}
      - {unit: hour, requests_per_unit: 10, name: hourly}
`
	for _, be := range adminBackends() {
		t.Run("on "+be.name, func(t *testing.T) {
			ta := start(t, map[string]string{"adm.yaml": cfg}, func(o *app.Options) {
				o.AdminAddr = "127.0.0.1:0"
				be.setup(t, o)
			})
			for range 2 {
				ta.ask(t, "adm", desc("user", "u"))
			}
			c := ta.inspect(t, "adm", "user", "u")
			if c.Rule != "adm.user.minute" || c.Count != 2 || c.Remaining != 1 || len(c.Limits) != 2 {
				t.Fatalf("inspect: got rule %q count %d remaining %d with %d limits, want the minute's (2 counted, 1 left) and 2 limits", c.Rule, c.Count, c.Remaining, len(c.Limits))
			}
			want := []struct {
				rule, key        string
				count, remaining int64
			}{
				{"adm.user.minute", "{adm_user_u_}minute_", 2, 1},
				{"adm.user.hourly", "{adm_user_u_}hourly_", 2, 8},
			}
			for i, w := range want {
				l := c.Limits[i]
				if l.Rule != w.rule || l.Key != w.key || l.Count != w.count || l.Remaining != w.remaining {
					t.Errorf("limit %d: got %+v, want rule %s key %s count %d remaining %d", i, l, w.rule, w.key, w.count, w.remaining)
				}
			}
			g, err := adminGRPC(t, ta.AdminAddr()).Inspect(context.Background(), descriptorRequest("adm", "user", "u"))
			if err != nil || len(g.GetLimits()) != 2 || g.GetLimits()[1].GetRule() != "adm.user.hourly" || g.GetLimits()[1].GetRemaining() != 8 || g.GetRule() != "adm.user.minute" {
				t.Fatalf("gRPC Inspect: got %v, %v; want both limits, the minute's reported", g, err)
			}
			r := ta.resetHTTP(t, "adm", "user", "u")
			if !r.Reset || len(r.Limits) != 2 || r.Limits[0].Count != 0 || r.Limits[1].Count != 0 || r.Limits[1].Remaining != 10 {
				t.Fatalf("reset: got %+v, want both limits empty", r)
			}
		})
	}
}
