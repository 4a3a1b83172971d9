package app_test

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/app"
)

// envOf is a getenv over a fixed set of variables.
func envOf(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestEnvoyEnvSetsTheOption(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		got  func(o app.Options) any
		want any
	}{
		{name: "PORT alone keeps listening on every interface", env: map[string]string{"PORT": "9080"}, got: func(o app.Options) any { return o.HTTPAddr }, want: ":9080"},
		{name: "HOST and PORT make the HTTP address", env: map[string]string{"HOST": "127.0.0.1", "PORT": "9080"}, got: func(o app.Options) any { return o.HTTPAddr }, want: "127.0.0.1:9080"},
		{name: "HOST alone keeps the default port", env: map[string]string{"HOST": "127.0.0.2"}, got: func(o app.Options) any { return o.HTTPAddr }, want: "127.0.0.2:8080"},
		{name: "HOST 0.0.0.0 is every interface", env: map[string]string{"HOST": "0.0.0.0", "PORT": "1"}, got: func(o app.Options) any { return o.HTTPAddr }, want: ":1"},
		{name: "GRPC_HOST and GRPC_PORT make the gRPC address", env: map[string]string{"GRPC_HOST": "::1", "GRPC_PORT": "9081"}, got: func(o app.Options) any { return o.GRPCAddr }, want: "[::1]:9081"},
		{name: "DEBUG_PORT alone keeps the debug port on loopback", env: map[string]string{"DEBUG_PORT": "7070"}, got: func(o app.Options) any { return o.DebugAddr }, want: "127.0.0.1:7070"},
		{name: "DEBUG_HOST 0.0.0.0 opens the debug port to every interface", env: map[string]string{"DEBUG_HOST": "0.0.0.0"}, got: func(o app.Options) any { return o.DebugAddr }, want: ":6070"},
		{name: "GRPC_UDS serves gRPC on a unix socket, whatever GRPC_PORT says", env: map[string]string{"GRPC_UDS": "/tmp/rl.sock", "GRPC_PORT": "9081"}, got: func(o app.Options) any { return o.GRPCAddr }, want: "unix:/tmp/rl.sock"},
		{name: "GRPC_MAX_CONNECTION_AGE", env: map[string]string{"GRPC_MAX_CONNECTION_AGE": "5m"}, got: func(o app.Options) any { return o.GRPCMaxConnectionAge }, want: 5 * time.Minute},
		{name: "GRPC_MAX_CONNECTION_AGE_GRACE", env: map[string]string{"GRPC_MAX_CONNECTION_AGE_GRACE": "30s"}, got: func(o app.Options) any { return o.GRPCMaxConnectionAgeGrace }, want: 30 * time.Second},
		{name: "GRPC_SERVER_USE_TLS secures gRPC only, with client certificates",
			env: map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "c.pem", "GRPC_SERVER_TLS_KEY": "k.pem", "GRPC_CLIENT_TLS_CACERT": "ca.pem"},
			got: func(o app.Options) any { return []any{o.TLSCert, o.TLSKey, o.TLSClientCA, o.HTTPTLS} }, want: []any{"c.pem", "k.pem", "ca.pem", false}},
		{name: "GRPC_CLIENT_TLS_SAN needs a client CA",
			env: map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "c.pem", "GRPC_SERVER_TLS_KEY": "k.pem", "GRPC_CLIENT_TLS_CACERT": "ca.pem", "GRPC_CLIENT_TLS_SAN": "client.example"},
			got: func(o app.Options) any { return o.TLSClientSAN }, want: "client.example"},
		{name: "GRPC_CLIENT_TLS_SAN without a client CA does nothing",
			env: map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "c.pem", "GRPC_SERVER_TLS_KEY": "k.pem", "GRPC_CLIENT_TLS_SAN": "client.example"},
			got: func(o app.Options) any { return o.TLSClientSAN }, want: ""},
		{name: "the gRPC TLS files do nothing without GRPC_SERVER_USE_TLS",
			env: map[string]string{"GRPC_SERVER_TLS_CERT": "c.pem", "GRPC_SERVER_TLS_KEY": "k.pem"},
			got: func(o app.Options) any { return o.TLSCert }, want: ""},
		{name: "RUNTIME_ROOT and its friends name the goruntime layout",
			env: map[string]string{"RUNTIME_ROOT": "/srv/rt/current", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_APPDIRECTORY": "cfg", "RUNTIME_WATCH_ROOT": "false", "RUNTIME_IGNOREDOTFILES": "true"},
			got: func(o app.Options) any {
				return []any{o.RuntimeRoot, o.RuntimeSubdirectory, o.RuntimeAppDirectory, o.RuntimeWatchRoot, o.RuntimeIgnoreDotfiles}
			},
			want: []any{"/srv/rt/current", "ratelimit", "cfg", false, true}},
		{name: "SLUICE_CONFIG wins over RUNTIME_ROOT", env: map[string]string{"RUNTIME_ROOT": "/srv/rt/current", "SLUICE_CONFIG": "/etc/sluice"},
			got: func(o app.Options) any { return []any{o.ConfigPath, o.RuntimeRoot} }, want: []any{"/etc/sluice", ""}},
		{name: "MERGE_DOMAIN_CONFIG", env: map[string]string{"MERGE_DOMAIN_CONFIG": "true"}, got: func(o app.Options) any { return o.MergeDomainConfig }, want: true},
		{name: "CONFIG_TYPE and the xDS settings",
			env: map[string]string{"CONFIG_TYPE": "grpc_xds_sotw", "CONFIG_GRPC_XDS_SERVER_URL": "cp:18000", "CONFIG_GRPC_XDS_NODE_ID": "n1", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "2s", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "20s"},
			got: func(o app.Options) any {
				return []any{o.ConfigType, o.XDS.ServerURL, o.XDS.NodeID, o.XDS.BackoffInitial, o.XDS.BackoffMax}
			},
			want: []any{"GRPC_XDS_SOTW", "cp:18000", "n1", 2 * time.Second, 20 * time.Second}},
		{name: "a REDIS_URL that is a path is a unix socket", env: map[string]string{"REDIS_URL": "/run/redis.sock"},
			got: func(o app.Options) any { return []any{o.Store, o.Redis.SocketType, o.Redis.Addrs} }, want: []any{"redis", "unix", []string{"/run/redis.sock"}}},
		{name: "REDIS_SOCKET_TYPE=tcp keeps host:port", env: map[string]string{"REDIS_URL": "r:6379", "REDIS_SOCKET_TYPE": "tcp"},
			got: func(o app.Options) any { return o.Redis.SocketType }, want: "tcp"},
		{name: "REDIS_PERSECOND and its settings",
			env: map[string]string{"REDIS_URL": "r:1", "REDIS_PERSECOND": "true", "REDIS_PERSECOND_URL": "p:2", "REDIS_PERSECOND_AUTH": "u:pw", "REDIS_PERSECOND_TIMEOUT": "3s", "REDIS_PERSECOND_TYPE": "CLUSTER"},
			got: func(o app.Options) any {
				return []any{o.RedisPerSecond, o.PerSecondRedis.Addrs, o.PerSecondRedis.Username, o.PerSecondRedis.Password, o.PerSecondRedis.Timeout, o.PerSecondRedis.Mode}
			},
			want: []any{true, []string{"p:2"}, "u", "pw", 3 * time.Second, "cluster"}},
		{name: "BACKEND_TYPE=memcache with MEMCACHE_HOST_PORT",
			env: map[string]string{"BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": "m1:11211,m2:11211", "MEMCACHE_MAX_IDLE_CONNS": "5", "CACHE_KEY_PREFIX": "rl_", "EXPIRATION_JITTER_MAX_SECONDS": "30"},
			got: func(o app.Options) any {
				return []any{o.Store, o.Memcache.Addrs, o.Memcache.MaxIdleConns, o.Memcache.KeyPrefix, o.Memcache.Jitter}
			},
			want: []any{"memcache", []string{"m1:11211", "m2:11211"}, 5, "rl_", 30 * time.Second}},
		{name: "LOG_LEVEL in upper case", env: map[string]string{"LOG_LEVEL": "DEBUG"}, got: func(o app.Options) any { return o.LogLevel }, want: "debug"},
		{name: "LOG_LEVEL warning is warn", env: map[string]string{"LOG_LEVEL": "Warning"}, got: func(o app.Options) any { return o.LogLevel }, want: "warn"},
		{name: "LOG_LEVEL trace is debug", env: map[string]string{"LOG_LEVEL": "trace"}, got: func(o app.Options) any { return o.LogLevel }, want: "debug"},
		{name: "LOG_LEVEL fatal is error", env: map[string]string{"LOG_LEVEL": "fatal"}, got: func(o app.Options) any { return o.LogLevel }, want: "error"},
		{name: "LOG_FORMAT json is JSON with envoyproxy/ratelimit's field names", env: map[string]string{"LOG_FORMAT": "JSON"}, got: func(o app.Options) any { return o.LogFormat }, want: "json-envoy"},
		{name: "LOG_FORMAT text", env: map[string]string{"LOG_FORMAT": "text"}, got: func(o app.Options) any { return o.LogFormat }, want: "text"},
		{name: "SHADOW_MODE", env: map[string]string{"SHADOW_MODE": "true"}, got: func(o app.Options) any { return o.GlobalShadowMode }, want: true},
		{name: "QUOTA_MODE", env: map[string]string{"QUOTA_MODE": "1"}, got: func(o app.Options) any { return o.GlobalQuotaMode }, want: true},
		{name: "RESPONSE_DYNAMIC_METADATA", env: map[string]string{"RESPONSE_DYNAMIC_METADATA": "true"}, got: func(o app.Options) any { return o.ResponseDynamicMetadata }, want: true},
		{name: "LIMIT_RESPONSE_HEADERS_ENABLED", env: map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true"}, got: func(o app.Options) any { return o.ResponseHeaders }, want: true},
		{name: "LIMIT_*_HEADER name the headers",
			env: map[string]string{"LIMIT_LIMIT_HEADER": "X-L", "LIMIT_REMAINING_HEADER": "X-R", "LIMIT_RESET_HEADER": "X-Z"},
			got: func(o app.Options) any {
				return []string{o.ResponseHeaderLimit, o.ResponseHeaderRemaining, o.ResponseHeaderReset}
			}, want: []string{"X-L", "X-R", "X-Z"}},
		{name: "NEAR_LIMIT_RATIO", env: map[string]string{"NEAR_LIMIT_RATIO": "0.5"}, got: func(o app.Options) any { return o.NearLimitRatio }, want: 0.5},
		{name: "CACHE_KEY_PREFIX is the Redis key prefix", env: map[string]string{"CACHE_KEY_PREFIX": "rl:"}, got: func(o app.Options) any { return o.Redis.KeyPrefix }, want: "rl:"},
		{name: "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", env: map[string]string{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"}, got: func(o app.Options) any { return o.HealthyWithConfig }, want: true},
		{name: "no variable keeps the memory store", env: map[string]string{}, got: func(o app.Options) any { return o.Store }, want: "memory"},
		{name: "REDIS_URL selects the Redis store",
			env: map[string]string{"REDIS_URL": "10.0.0.1:6379"},
			got: func(o app.Options) any { return []any{o.Store, o.Redis.Addrs, o.Redis.Mode} }, want: []any{"redis", []string{"10.0.0.1:6379"}, "single"}},
		{name: "BACKEND_TYPE redis with REDIS_URL", env: map[string]string{"BACKEND_TYPE": "redis", "REDIS_URL": "r:6379"}, got: func(o app.Options) any { return o.Store }, want: "redis"},
		{name: "BACKEND_TYPE memcache with a REDIS_URL still picks memcache", env: map[string]string{"BACKEND_TYPE": "memcache", "REDIS_URL": "r:6379"}, got: func(o app.Options) any { return o.Store }, want: "memcache"},
		{name: "REDIS_TYPE cluster with a list of seeds",
			env: map[string]string{"REDIS_TYPE": "CLUSTER", "REDIS_URL": "a:1, b:2,c:3"},
			got: func(o app.Options) any { return []any{o.Redis.Mode, o.Redis.Addrs} }, want: []any{"cluster", []string{"a:1", "b:2", "c:3"}}},
		{name: "REDIS_TYPE sentinel takes the master name first",
			env: map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "mymaster,s1:26379,s2:26379"},
			got: func(o app.Options) any { return []any{o.Redis.Mode, o.Redis.MasterName, o.Redis.Addrs} }, want: []any{"sentinel", "mymaster", []string{"s1:26379", "s2:26379"}}},
		{name: "REDIS_AUTH as a password", env: map[string]string{"REDIS_AUTH": "s3cret"},
			got: func(o app.Options) any { return []string{o.Redis.Username, o.Redis.Password} }, want: []string{"", "s3cret"}},
		{name: "REDIS_AUTH as user:password", env: map[string]string{"REDIS_AUTH": "rl:pa:ss"},
			got: func(o app.Options) any { return []string{o.Redis.Username, o.Redis.Password} }, want: []string{"rl", "pa:ss"}},
		{name: "REDIS_SENTINEL_AUTH", env: map[string]string{"REDIS_SENTINEL_AUTH": "su:sp"},
			got: func(o app.Options) any { return []string{o.Redis.SentinelUsername, o.Redis.SentinelPassword} }, want: []string{"su", "sp"}},
		{name: "REDIS_TLS and its files",
			env: map[string]string{"REDIS_TLS": "true", "REDIS_TLS_CLIENT_CERT": "c", "REDIS_TLS_CLIENT_KEY": "k", "REDIS_TLS_CACERT": "ca", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true"},
			got: func(o app.Options) any {
				return []any{o.Redis.TLS, o.Redis.TLSCert, o.Redis.TLSKey, o.Redis.TLSCA, o.Redis.TLSSkipHostname, o.Redis.TLSInsecure}
			},
			want: []any{true, "c", "k", "ca", true, false}},
		{name: "REDIS_TIMEOUT", env: map[string]string{"REDIS_TIMEOUT": "2s"}, got: func(o app.Options) any { return o.Redis.Timeout }, want: 2 * time.Second},
		{name: "REDIS_PIPELINE_WINDOW is the flush delay", env: map[string]string{"REDIS_PIPELINE_WINDOW": "150us"}, got: func(o app.Options) any { return o.Redis.MaxFlushDelay }, want: 150 * time.Microsecond},
		{name: "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", env: map[string]string{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": "true"}, got: func(o app.Options) any { return o.Redis.HealthCheckActiveConnection }, want: true},
		{name: "REDIS_STARTUP_* set the startup backoff",
			env: map[string]string{"REDIS_STARTUP_INITIAL_INTERVAL": "100ms", "REDIS_STARTUP_MAX_INTERVAL": "2s", "REDIS_STARTUP_MAX_ELAPSED_TIME": "1m"},
			got: func(o app.Options) any {
				return []time.Duration{o.Redis.StartupInitialInterval, o.Redis.StartupMaxInterval, o.Redis.StartupMaxElapsedTime}
			},
			want: []time.Duration{100 * time.Millisecond, 2 * time.Second, time.Minute}},
		{name: "REDIS_POOL_ON_EMPTY_BEHAVIOR WAIT is accepted", env: map[string]string{"REDIS_POOL_ON_EMPTY_BEHAVIOR": "wait"}, got: func(o app.Options) any { return o.EnvoyEnvUnsupported }, want: []string(nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := app.ParseServe(nil, envOf(tc.env), io.Discard)
			// memcache is another store; its validation is not this test's.
			if err != nil && o.Store != "memcache" {
				t.Fatalf("ParseServe: %v", err)
			}
			if got := tc.got(o); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %#v, want %#v", got, tc.want)
			}
		})
	}
}

func TestFlagsAndSluiceVariablesWinOverEnvoyVariables(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string // the HTTP address
	}{
		{name: "the envoyproxy/ratelimit variable alone", env: map[string]string{"PORT": "1001"}, want: ":1001"},
		{name: "a SLUICE_ variable wins over it", env: map[string]string{"PORT": "1001", "SLUICE_HTTP_ADDR": ":1002"}, want: ":1002"},
		{name: "a flag wins over both", args: []string{"--http-addr", ":1003"}, env: map[string]string{"PORT": "1001", "SLUICE_HTTP_ADDR": ":1002"}, want: ":1003"},
		{name: "a flag wins over the variable alone", args: []string{"--http-addr", ":1003"}, env: map[string]string{"PORT": "1001"}, want: ":1003"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := app.ParseServe(tc.args, envOf(tc.env), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if o.HTTPAddr != tc.want {
				t.Errorf("got %s, want %s", o.HTTPAddr, tc.want)
			}
		})
	}
	t.Run("SLUICE_STORE=memory wins over REDIS_URL", func(t *testing.T) {
		o, err := app.ParseServe(nil, envOf(map[string]string{"REDIS_URL": "r:1", "SLUICE_STORE": "memory"}), io.Discard)
		if err != nil || o.Store != "memory" {
			t.Fatalf("got %s, %v, want memory", o.Store, err)
		}
	})
	t.Run("a bad SLUICE_ value is not blamed on the variable it overrode", func(t *testing.T) {
		_, err := app.ParseServe(nil, envOf(map[string]string{"REDIS_URL": "r:1", "REDIS_STARTUP_MAX_INTERVAL": "2s", "SLUICE_REDIS_STARTUP_MAX_INTERVAL": "1ms"}), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--redis-startup-max-interval") || strings.Contains(err.Error(), "REDIS_STARTUP_MAX_INTERVAL=") {
			t.Fatalf("got %v, want the flag named and not the envoyproxy/ratelimit variable", err)
		}
	})
	t.Run("--redis-username wins over the user in REDIS_AUTH", func(t *testing.T) {
		o, err := app.ParseServe([]string{"--redis-username", "flaguser"}, envOf(map[string]string{"REDIS_AUTH": "envuser:pw"}), io.Discard)
		if err != nil || o.Redis.Username != "flaguser" {
			t.Fatalf("got %q, %v, want flaguser", o.Redis.Username, err)
		}
	})
}

func TestBadEnvoyVariablesAreErrorsNamingThem(t *testing.T) {
	for _, tc := range []struct {
		name, variable, value string
		also                  map[string]string
	}{
		{name: "a port that is not a number", variable: "PORT", value: "http"},
		{name: "a port out of range", variable: "GRPC_PORT", value: "70000"},
		{name: "a boolean that is not one", variable: "SHADOW_MODE", value: "yes please"},
		{name: "a duration without a unit", variable: "REDIS_TIMEOUT", value: "10"},
		{name: "a Redis timeout Sluice refuses", variable: "REDIS_TIMEOUT", value: "2m"},
		{name: "an unknown log level", variable: "LOG_LEVEL", value: "loud"},
		{name: "an unknown log format", variable: "LOG_FORMAT", value: "xml"},
		{name: "an unknown backend", variable: "BACKEND_TYPE", value: "etcd"},
		{name: "BACKEND_TYPE redis without REDIS_URL", variable: "BACKEND_TYPE", value: "redis"},
		{name: "an unknown Redis type", variable: "REDIS_TYPE", value: "ring"},
		{name: "a sentinel URL without sentinels", variable: "REDIS_URL", value: "mymaster", also: map[string]string{"REDIS_TYPE": "SENTINEL"}},
		{name: "a pool behaviour envoyproxy/ratelimit dropped", variable: "REDIS_POOL_ON_EMPTY_BEHAVIOR", value: "CREATE"},
		{name: "gRPC TLS without its files", variable: "GRPC_SERVER_USE_TLS", value: "true"},
		{name: "a near-limit ratio out of range", variable: "NEAR_LIMIT_RATIO", value: "1.5"},
		{name: "a ratio that is not a number", variable: "NEAR_LIMIT_RATIO", value: "most"},
		{name: "a negative duration", variable: "GRPC_MAX_CONNECTION_AGE", value: "-1s"},
		{name: "a startup interval longer than the maximum", variable: "REDIS_STARTUP_MAX_INTERVAL", value: "1ms", also: map[string]string{"REDIS_URL": "r:1"}},
		{name: "an unsupported variable's bad value", variable: "STATSD_PORT", value: "x"},
		{name: "a header name with a space", variable: "LIMIT_LIMIT_HEADER", value: "Rate Limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{tc.variable: tc.value}
			for k, v := range tc.also {
				env[k] = v
			}
			_, err := app.ParseServe(nil, envOf(env), io.Discard)
			if err == nil {
				t.Fatalf("%s=%q: got no error", tc.variable, tc.value)
			}
			if !strings.Contains(err.Error(), tc.variable) {
				t.Errorf("got %q, want it to name %s", err, tc.variable)
			}
			if !strings.Contains(err.Error(), tc.value) {
				t.Errorf("got %q, want it to quote %q", err, tc.value)
			}
		})
	}
}

func TestUnsupportedEnvoyVariablesAreListedOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []string
	}{
		{name: "no variable, no warning", env: map[string]string{}},
		{name: "upstream defaults change nothing", env: map[string]string{"USE_STATSD": "false", "REDIS_POOL_SIZE": "10", "TRACING_ENABLED": "false"}},
		{name: "an upstream environment without USE_STATSD=false sends StatsD, as upstream does",
			env: map[string]string{"REDIS_URL": "r:1"}},
		{name: "DISABLE_STATS turns StatsD off",
			env: map[string]string{"REDIS_URL": "r:1", "DISABLE_STATS": "true"}},
		{name: "missing features are listed in table order",
			env:  map[string]string{"USE_STATSD": "true", "REDIS_POOL_SIZE": "20"},
			want: []string{"REDIS_POOL_SIZE"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := app.ParseServe(nil, envOf(tc.env), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(o.EnvoyEnvUnsupported, tc.want) {
				t.Errorf("got %q, want %q", o.EnvoyEnvUnsupported, tc.want)
			}
		})
	}
	t.Run("the service warns once, naming them", func(t *testing.T) {
		o := app.Defaults()
		o.EnvoyEnvUnsupported = []string{"TRACING_ENABLED", "USE_STATSD"}
		var buf bytes.Buffer
		a, err := app.New(o, app.Deps{Logger: app.NewLogger(o, &buf)})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = a.Shutdown(t.Context()) }()
		if n := strings.Count(buf.String(), "level=WARN"); n != 1 || !strings.Contains(buf.String(), "TRACING_ENABLED, USE_STATSD") {
			t.Errorf("got %d warnings in %q, want one naming both", n, buf.String())
		}
	})
}

func TestJSONEnvoyLogsUseEnvoyFieldNames(t *testing.T) {
	o := app.Defaults()
	o.LogFormat, o.LogLevel = "json-envoy", "debug"
	var buf bytes.Buffer
	log := app.NewLogger(o, &buf)
	log.Warn("hello", "k", "v")
	log.Debug("quiet")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2: %q", len(lines), buf.String())
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &m); err != nil {
		t.Fatal(err)
	}
	if m["@message"] != "hello" || m["level"] != "warning" || m["k"] != "v" {
		t.Errorf("got %v, want @message hello, level warning, k v", m)
	}
	ts, _ := m["@timestamp"].(string)
	if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
		t.Errorf("@timestamp: got %q, want RFC 3339: %v", ts, err)
	}
	if !strings.Contains(lines[1], `"level":"debug"`) {
		t.Errorf("got %s, want level debug", lines[1])
	}
}

// docs/envoy.md's table names every variable envoyproxy/ratelimit reads.
func TestEveryEnvoyVariableIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "## envoyproxy/ratelimit's environment")
	if !ok {
		t.Fatal(`docs/envoy.md has no "## envoyproxy/ratelimit's environment" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	rows := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([A-Z0-9_]+)`").FindAllStringSubmatch(section, -1) {
		rows[m[1]] = true
	}
	for _, name := range app.EnvoyVariables() {
		if !rows[name] {
			t.Errorf("%s: no row in docs/envoy.md's table", name)
		}
		delete(rows, name)
	}
	for name := range rows {
		if !strings.HasPrefix(name, "OTEL_") {
			t.Errorf("%s: documented but not in app's table", name)
		}
	}
}

// Any value of any envoyproxy/ratelimit variable is parsed or refused with
// an error; never a panic.
func FuzzEnvoyEnv(f *testing.F) {
	f.Add(uint8(0), "127.0.0.1", "8080")
	f.Add(uint8(60), "sentinel", "m,a:1,b:2")
	f.Add(uint8(61), "CLUSTER", "a:1,,b:2")
	f.Add(uint8(14), "JSON", "")
	f.Fuzz(func(t *testing.T, pick uint8, v1, v2 string) {
		names := app.EnvoyVariables()
		a, b := names[int(pick)%len(names)], names[(int(pick)+1)%len(names)]
		o, err := app.ParseServe(nil, envOf(map[string]string{a: v1, b: v2, "REDIS_TYPE": v1, "REDIS_URL": v2}), io.Discard)
		if err == nil && o.Store == "redis" && len(o.Redis.Addrs) == 0 {
			t.Fatalf("%s=%q %s=%q: the Redis store with no address passed validation", a, v1, b, v2)
		}
	})
}
