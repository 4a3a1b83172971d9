package app_test

import (
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/app"
	"github.com/sluice-rl/sluice/store/memcache/memcachetest"
	"github.com/sluice-rl/sluice/store/redis/redistest"
)

func TestBackendFlags(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		check func(o app.Options) string // what is wrong, or ""
	}{
		{
			name: "a unix socket for Redis is read from the flags",
			args: []string{"--store", "redis", "--redis-socket-type", "unix", "--redis-addr", "/run/redis.sock"},
			check: func(o app.Options) string {
				if o.Redis.SocketType != "unix" || len(o.Redis.Addrs) != 1 || o.Redis.Addrs[0] != "/run/redis.sock" {
					return "got socket type " + o.Redis.SocketType + " addrs " + strings.Join(o.Redis.Addrs, ",") + ", want unix /run/redis.sock"
				}
				return ""
			},
		},
		{
			name: "the per-second Redis is read from SLUICE_REDIS_PERSECOND_* variables",
			args: []string{"--store", "redis", "--redis-addr", "127.0.0.1:6379"},
			env: map[string]string{
				"SLUICE_REDIS_PERSECOND":             "true",
				"SLUICE_REDIS_PERSECOND_ADDR":        "a:1, b:2",
				"SLUICE_REDIS_PERSECOND_MODE":        "cluster",
				"SLUICE_REDIS_PERSECOND_TIMEOUT":     "3s",
				"SLUICE_REDIS_PERSECOND_SOCKET_TYPE": "tcp",
				"SLUICE_REDIS_PERSECOND_TLS":         "true",
			},
			check: func(o app.Options) string {
				ps := o.PerSecondRedis
				if !o.RedisPerSecond || strings.Join(ps.Addrs, ",") != "a:1,b:2" || ps.Mode != "cluster" || ps.Timeout != 3*time.Second || !ps.TLS {
					return "got " + strconv.FormatBool(o.RedisPerSecond) + " " + strings.Join(ps.Addrs, ",") + " " + ps.Mode + " " + ps.Timeout.String()
				}
				return ""
			},
		},
		{
			name: "memcache is read from the flags, the command line over the environment",
			args: []string{"--store", "memcache", "--memcache-addrs", "m1:11211,m2:11211", "--memcache-max-idle-conns", "8", "--memcache-expiration-jitter", "5m"},
			env:  map[string]string{"SLUICE_MEMCACHE_ADDRS": "ignored:1", "SLUICE_MEMCACHE_TIMEOUT": "250ms"},
			check: func(o app.Options) string {
				m := o.Memcache
				if strings.Join(m.Addrs, ",") != "m1:11211,m2:11211" || m.MaxIdleConns != 8 || m.Timeout != 250*time.Millisecond || m.Jitter != 5*time.Minute {
					return "got " + strings.Join(m.Addrs, ",") + " " + strconv.Itoa(m.MaxIdleConns) + " " + m.Timeout.String()
				}
				return ""
			},
		},
		{
			name: "an SRV name and its refresh are read from the flags",
			args: []string{"--store", "memcache", "--memcache-srv", "_memcache._tcp.example.com", "--memcache-srv-refresh", "30s"},
			check: func(o app.Options) string {
				if o.Memcache.SRV != "_memcache._tcp.example.com" || o.Memcache.SRVRefresh != 30*time.Second {
					return "got " + o.Memcache.SRV + " " + o.Memcache.SRVRefresh.String()
				}
				return ""
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := app.ParseServe(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
			if err != nil {
				t.Fatalf("ParseServe: %v", err)
			}
			if msg := tt.check(o); msg != "" {
				t.Fatal(msg)
			}
		})
	}
}

func TestBackendFlagsRefused(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "an unknown socket type", args: []string{"--redis-socket-type", "udp"}, wantErr: `--redis-socket-type: "udp" is not one of tcp, unix`},
		{name: "a unix socket with Redis Cluster", args: []string{"--store", "redis", "--redis-addr", "/s", "--redis-mode", "cluster", "--redis-socket-type", "unix"}, wantErr: "--redis-socket-type: unix needs --redis-mode single"},
		{name: "a per-second Redis without Redis", args: []string{"--redis-persecond", "--redis-persecond-addr", "a:1"}, wantErr: "--redis-persecond: needs --store redis"},
		{name: "a per-second Redis without an address", args: []string{"--store", "redis", "--redis-addr", "a:1", "--redis-persecond"}, wantErr: "--redis-persecond-addr: required with --redis-persecond"},
		{name: "a per-second Sentinel without a master", args: []string{"--store", "redis", "--redis-addr", "a:1", "--redis-persecond", "--redis-persecond-addr", "b:1", "--redis-persecond-mode", "sentinel"}, wantErr: "--redis-persecond-master: required"},
		{name: "memcache without a server", args: []string{"--store", "memcache"}, wantErr: "--memcache-addrs: --memcache-addrs or --memcache-srv is required"},
		{name: "memcache with both addresses and SRV", args: []string{"--store", "memcache", "--memcache-addrs", "a:1", "--memcache-srv", "_m._tcp.x"}, wantErr: "--memcache-srv: not with --memcache-addrs"},
		{name: "no idle memcache connection", args: []string{"--store", "memcache", "--memcache-addrs", "a:1", "--memcache-max-idle-conns", "0"}, wantErr: "--memcache-max-idle-conns: 0 must be at least 1"},
		{name: "a negative expiration jitter", args: []string{"--store", "memcache", "--memcache-addrs", "a:1", "--memcache-expiration-jitter", "-1s"}, wantErr: "--memcache-expiration-jitter: -1s is negative"},
		{name: "a memcache timeout of an hour", args: []string{"--store", "memcache", "--memcache-addrs", "a:1", "--memcache-timeout", "1h"}, wantErr: "--memcache-timeout: 1h0m0s is outside"},
	}
	for _, tt := range tests {
		t.Run(tt.name+" is refused", func(t *testing.T) {
			_, err := app.ParseServe(tt.args, func(string) string { return "" }, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

const backendConfig = `
domain: be
descriptors:
  - key: fast
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: slow
    rate_limit: {unit: minute, requests_per_unit: 2}
`

// askThree asks three times for key=v and checks the third is over the
// limit of 2.
func askThree(t *testing.T, ta *testApp, key string) {
	t.Helper()
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if got := ta.ask(t, "be", desc(key, "v")).GetOverallCode(); got != want {
			t.Fatalf("%s request %d: got %s, want %s", key, i+1, got, want)
		}
	}
}

func TestServesOnMemcache(t *testing.T) {
	srv := memcachetest.Start(t)
	ta := start(t, map[string]string{"be.yaml": backendConfig}, func(o *app.Options) {
		o.Store = "memcache"
		o.Memcache.Addrs = []string{srv.Addr}
		o.Memcache.Timeout = 2 * time.Second
		o.Memcache.KeyPrefix = "rl:"
	})
	askThree(t, ta, "fast")
	askThree(t, ta, "slow")
	now := ta.clock.Now()
	for _, key := range []string{
		"rl:be_fast_v_" + strconv.FormatInt(now.Unix(), 10),
		"rl:be_slow_v_" + strconv.FormatInt(now.Truncate(time.Minute).Unix(), 10),
	} {
		if got, ok := srv.Get(key); !ok || got != "3" {
			t.Fatalf("memcached %s: got %q (found %v), want \"3\" (envoyproxy/ratelimit's key and counter)", key, got, ok)
		}
	}
}

func TestServesWithPerSecondRedis(t *testing.T) {
	main := redistest.StartSingle(t)
	perSecond := redistest.StartSingle(t, redistest.WithUnixSocket())
	ta := start(t, map[string]string{"be.yaml": backendConfig}, func(o *app.Options) {
		o.Store = "redis"
		o.Redis.Addrs = []string{main.Addr}
		o.Redis.Timeout = 2 * time.Second
		o.RedisPerSecond = true
		o.PerSecondRedis.Addrs = []string{perSecond.Socket}
		o.PerSecondRedis.SocketType = "unix"
		o.PerSecondRedis.Timeout = 2 * time.Second
	})
	askThree(t, ta, "fast")
	askThree(t, ta, "slow")
	tests := []struct {
		name    string
		srv     *redistest.Server
		pattern string
		want    int
	}{
		{name: "the per-second window is in the per-second Redis", srv: perSecond, pattern: "be_fast_*", want: 1},
		{name: "the per-second window is not in the main Redis", srv: main, pattern: "be_fast_*", want: 0},
		{name: "the minute window is in the main Redis", srv: main, pattern: "be_slow_*", want: 1},
		{name: "the minute window is not in the per-second Redis", srv: perSecond, pattern: "be_slow_*", want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys := tt.srv.MustDo("KEYS", tt.pattern).([]any)
			if len(keys) != tt.want {
				t.Fatalf("got %d keys %v, want %d", len(keys), keys, tt.want)
			}
		})
	}
}

func TestServesOverARedisUnixSocket(t *testing.T) {
	srv := redistest.StartSingle(t, redistest.WithUnixSocket())
	ta := start(t, map[string]string{"be.yaml": backendConfig}, func(o *app.Options) {
		o.Store = "redis"
		o.Redis.Addrs = []string{srv.Socket}
		o.Redis.SocketType = "unix"
		o.Redis.Timeout = 2 * time.Second
	})
	askThree(t, ta, "slow")
	if keys := srv.MustDo("KEYS", "be_slow_*").([]any); len(keys) != 1 {
		t.Fatalf("got keys %v, want one be_slow_ key", keys)
	}
}

func TestServesOnMemcacheOverTLS(t *testing.T) {
	srv := memcachetest.StartTLS(t)
	ta := start(t, map[string]string{"be.yaml": backendConfig}, func(o *app.Options) {
		o.Store = "memcache"
		o.Memcache.Addrs = []string{srv.Addr}
		o.Memcache.Timeout = 2 * time.Second
		o.Memcache.TLS = true
		o.Memcache.TLSCA, o.Memcache.TLSCert, o.Memcache.TLSKey = srv.TLS.CAFile, srv.TLS.ClientCertFile, srv.TLS.ClientKeyFile
	})
	askThree(t, ta, "slow")
}
