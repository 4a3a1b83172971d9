// Package app wires Sluice together: options and their defaults, the store,
// the limiter, the gRPC, HTTP and debug servers, configuration reloads and
// graceful shutdown. Tests and other programs embed the whole service
// through it; cmd/sluice is a thin shell around it.
package app

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/server"
)

// Options configure a Sluice service. Every field has a command-line flag
// and an environment variable (SLUICE_ plus the flag name in upper case
// with dashes as underscores: --grpc-addr is SLUICE_GRPC_ADDR); a flag
// given on the command line wins over the variable.
type Options struct {
	// ConfigPath is a descriptor config file or a directory of *.yaml/*.yml
	// domain files (dotfiles ignored). Empty: no Envoy domains.
	ConfigPath string

	// RuntimeRoot, with RuntimeSubdirectory and RuntimeAppDirectory, names
	// the descriptor config directory the way envoyproxy/ratelimit's
	// goruntime layout does (RUNTIME_ROOT, RUNTIME_SUBDIRECTORY,
	// RUNTIME_APPDIRECTORY): RuntimeRoot/RuntimeSubdirectory/
	// RuntimeAppDirectory. Empty RuntimeRoot (the default): ConfigPath is
	// used; the two are exclusive. RuntimeAppDirectory defaults to "config".
	RuntimeRoot, RuntimeSubdirectory, RuntimeAppDirectory string
	// RuntimeWatchRoot (default true, RUNTIME_WATCH_ROOT) also reloads when
	// RuntimeRoot itself is replaced, as an atomic symlink swap does;
	// false watches only the config directory.
	RuntimeWatchRoot bool
	// RuntimeIgnoreDotfiles (default false, RUNTIME_IGNOREDOTFILES) skips
	// dot-named files and directories under the runtime layout; when false
	// they load too, as upstream does. ConfigPath always skips them.
	RuntimeIgnoreDotfiles bool
	// MergeDomainConfig (default false, MERGE_DOMAIN_CONFIG) merges files
	// that declare the same domain instead of rejecting them.
	MergeDomainConfig bool
	// GRPCAddr, HTTPAddr and DebugAddr are listen addresses. Defaults
	// :8081, :8080 and 127.0.0.1:6070 (envoyproxy/ratelimit's ports).
	GRPCAddr, HTTPAddr, DebugAddr string
	// Store is the backend: "memory" (default), "redis" or "memcache".
	Store string
	// MemoryMaxEntries bounds the memory store's buckets; default 4194304.
	MemoryMaxEntries int
	// MemoryMaxBytes bounds the bytes the memory store's buckets take,
	// each counted as its key's length plus memory.EntryOverhead; default
	// 268435456 (256 MiB), 0 means the default.
	MemoryMaxBytes int64
	// LogLevel is debug, info (default), warn or error; LogFormat is text
	// (default), json, or json-envoy (JSON with envoyproxy/ratelimit's
	// field names: @timestamp, level, @message).
	LogLevel, LogFormat string

	// GlobalShadowMode answers OK to every Envoy request while counting.
	GlobalShadowMode bool
	// GlobalQuotaMode treats every Envoy descriptor as quota_mode: the
	// request is over the limit only when every descriptor is
	// (envoyproxy/ratelimit's QUOTA_MODE).
	GlobalQuotaMode bool
	// ResponseDynamicMetadata adds dynamic_metadata describing the request
	// and the configured metadata of the descriptors that passed to Envoy
	// responses (envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA).
	ResponseDynamicMetadata bool
	// ResponseHeaders adds RateLimit-Limit/Remaining/Reset headers to Envoy
	// responses.
	ResponseHeaders bool
	// ResponseHeaderLimit, ResponseHeaderRemaining and ResponseHeaderReset
	// name those headers; defaults RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset (envoyproxy/ratelimit's LIMIT_*_HEADER); empty means
	// the default.
	ResponseHeaderLimit, ResponseHeaderRemaining, ResponseHeaderReset string
	// NearLimitRatio is the share of a limit past which hits count as near
	// the limit in metrics; default 0.8, range (0, 1].
	NearLimitRatio float64
	// ReloadDelay coalesces bursts of file changes into one reload; default
	// 250ms.
	ReloadDelay time.Duration

	// LimitsPath and OverridesPath are the key-value limits' defaults and
	// overrides files (Boulder's formats). Empty: no key-value limits.
	LimitsPath, OverridesPath string

	// ShutdownTimeout bounds how long in-flight calls may run after a stop
	// signal; default 10s.
	ShutdownTimeout time.Duration
	// ShutdownDrainDelay is how long the service keeps serving after a stop
	// signal while its health checks already answer unhealthy, so that
	// load balancers stop sending calls before the listeners close;
	// default 0.
	ShutdownDrainDelay time.Duration
	// HealthyWithConfig keeps the health checks unhealthy until at least
	// one domain is loaded (envoyproxy/ratelimit's
	// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED).
	HealthyWithConfig bool

	// GRPCMaxConnectionAge closes a gRPC connection (with a GOAWAY) once it
	// is this old, and GRPCMaxConnectionAgeGrace then gives its calls this
	// long before the connection is cut. Defaults 24h and 1h
	// (envoyproxy/ratelimit's); 0 is no limit.
	GRPCMaxConnectionAge, GRPCMaxConnectionAgeGrace time.Duration

	// GRPCWorkers is how many long-lived goroutines serve gRPC calls
	// (grpc.NumStreamWorkers); a call finding none free gets a goroutine
	// of its own. Reused goroutines keep their grown stacks, which saves
	// the stack copying a new goroutine pays on every call. 0: a new
	// goroutine per call, grpc-go's default. Default 64.
	GRPCWorkers int
	// GRPCBatch has Sluice's gRPC server answer the Envoy calls that a
	// connection sends together (read together) as one batch, counting
	// all their descriptors in one store call: one Redis round trip for
	// the batch (server.RLS.ShouldRateLimits). It applies to stores other
	// than the memory store (whose calls run where they are read) with
	// tracing off and --grpc-server sluice. Default true.
	GRPCBatch bool
	// GRPCServer chooses the gRPC server: "sluice" (package h2grpc, HTTP/2
	// frames read and written directly, a fraction of grpc-go's CPU per
	// call) or "grpc-go" (grpc-go's own server). Both serve the same
	// services with the same settings. Default "sluice".
	GRPCServer string
	// MaxDescriptors, MaxDescriptorEntries and MaxDescriptorEntryBytes
	// cap an Envoy request: its descriptors (default 1000), a descriptor's
	// entries (default 64), an entry key's or value's length and the
	// domain's (default 65,536 bytes: more than any value Envoy's
	// default 60 KiB of request headers can carry). A request past one is
	// refused before any store work.
	MaxDescriptors, MaxDescriptorEntries, MaxDescriptorEntryBytes int
	// RequestLimits (default true) honours a limit an Envoy request
	// carries for a descriptor; NegativeHits (default true) honours
	// is_negative_hits. Either lets a caller who reaches the port change
	// its own counting: turn them off where callers are not trusted.
	RequestLimits, NegativeHits bool
	// RetryAfterHeader adds retry-after to Envoy's response headers when
	// the answer is OVER_LIMIT (server.RLSOptions.RetryAfterHeader).
	RetryAfterHeader bool
	// KVAdminTokenFile and KVAdminClientSAN guard the key-value Refund and
	// Reset calls (server.AdminAuth): a bearer token read from the file,
	// or a TLS client certificate naming the SAN (needs TLSClientCA). Both
	// empty (the default): every caller may make them.
	KVAdminTokenFile, KVAdminClientSAN string
	// AdminAddr is the admin listener's address (inspect and reset a
	// descriptor's counters, over HTTP and gRPC on one port); default ""
	// (off; "off" too). An address without a host (":9091") binds
	// 127.0.0.1, not every interface. On an address that is not loopback,
	// AdminTokenFile or AdminClientSAN is required.
	AdminAddr string
	// AdminTokenFile and AdminClientSAN guard the admin listener as
	// KVAdminTokenFile and KVAdminClientSAN guard key-value refunds: a
	// bearer token read from the file, or a TLS client certificate naming
	// the SAN (needs TLSClientCA). Both empty: every caller who reaches
	// the admin address may use it.
	AdminTokenFile, AdminClientSAN string
	// RequestLog is a file to append sampled Envoy requests to, one line
	// each in the format sluice replay reads (server.RequestLog); empty
	// (the default): no log. RequestLogSample is the fraction of requests
	// logged: default 1, range (0, 1].
	RequestLog       string
	RequestLogSample float64
	// KVRetryAfterJitter lengthens the retry_in of denied key-value
	// answers, and so their Retry-After, by a random 0-3%, as Boulder does
	// (server.KVOptions.RetryJitter).
	KVRetryAfterJitter bool
	// KVOverridesRefresh is how often the key-value overrides set at
	// runtime are read again from the store, so that the services sharing
	// it converge. Default 10s; 0 reads them only at start and after this
	// service's own changes (and retries every 10s while the first read
	// fails). Must be >= 0.
	KVOverridesRefresh time.Duration

	// TLS for the gRPC and HTTP listeners: certificate and key files, and an
	// optional client CA file that turns on mutual TLS. Certificates are
	// reloaded when the files change.
	TLSCert, TLSKey, TLSClientCA string
	// TLSClientSAN, with TLSClientCA, also requires the client
	// certificate to name this host (a DNS or IP SAN), as
	// envoyproxy/ratelimit's GRPC_CLIENT_TLS_SAN.
	TLSClientSAN string
	// HTTPTLS serves the HTTP listener with TLS too when TLSCert is set;
	// default true. False keeps HTTP in clear text (envoyproxy/ratelimit's
	// GRPC_SERVER_USE_TLS secures the gRPC listener only).
	HTTPTLS bool

	// Redis settings, used with Store "redis".
	Redis RedisOptions
	// RedisPerSecond, when true, keeps the fixed windows shorter than a
	// minute in a Redis of their own, PerSecondRedis (store/split;
	// envoyproxy/ratelimit's REDIS_PERSECOND). Its key prefix, clock and
	// Envoy keys are the main Redis's.
	RedisPerSecond bool
	PerSecondRedis RedisOptions
	// Memcache settings, used with Store "memcache".
	Memcache MemcacheOptions
	// OnStoreError says what to answer while the store fails: error
	// (default), allow, deny, or local (fall back to an in-memory store).
	OnStoreError string

	// ConfigType is where the Envoy descriptor configuration comes from:
	// FILE (the default: ConfigPath) or GRPC_XDS_SOTW (an xDS management
	// server, see XDS; ConfigPath is then ignored).
	ConfigType string
	// XDS configures the xDS client used with ConfigType GRPC_XDS_SOTW.
	XDS XDSOptions
	// LocalCacheSize, in bytes, turns on the local over-limit cache of the
	// Envoy service when above zero (--local-cache-size,
	// envoyproxy/ratelimit's LOCAL_CACHE_SIZE_IN_BYTES): a descriptor
	// found over its limit is answered over the limit from memory, with no
	// store round trip, until its window ends (see limiter.Options).
	// Default 0: off. At most 1 TiB.
	LocalCacheSize int
	// StopCacheKeyIncrementWhenOverLimit (--stop-cache-key-increment-when-overlimit,
	// envoyproxy/ratelimit's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT):
	// when one descriptor of a request is over its limit, the others are
	// not counted. Default false.
	StopCacheKeyIncrementWhenOverLimit bool
	// EnvoyEnvUnsupported lists the envoyproxy/ratelimit environment
	// variables that were set but change nothing in Sluice (see
	// docs/envoy.md); the service warns about them once at startup.
	EnvoyEnvUnsupported []string
	// Tracing configures OpenTelemetry tracing; off by default.
	Tracing TracingOptions

	// Connection limits against slow or greedy clients (docs/operations.md).
	// HTTPReadTimeout bounds reading a whole HTTP request, headers and
	// body, and also a gRPC connection's handshake and a unary gRPC call's
	// request (with --grpc-server sluice); HTTPWriteTimeout bounds
	// an HTTP request from the end of its headers to the end of the answer
	// (not on the debug listener, whose CPU profiles take their time);
	// HTTPIdleTimeout closes a keep-alive HTTP connection idle this long.
	// Defaults 10s, 30s, 2m.
	HTTPReadTimeout, HTTPWriteTimeout, HTTPIdleTimeout time.Duration
	// HTTPMaxHeaderBytes bounds an HTTP request's header block on every
	// HTTP listener (HTTP, debug, admin, and sluice proxy's); a larger
	// one is answered 431. Default 65,536: past Envoy's own default limit
	// (60 KiB), where net/http's 1 MiB let 2,000 connections sending long
	// headers slowly hold 2.9 GB (scenario 8 of scripts/faults.sh).
	HTTPMaxHeaderBytes int
	// MaxConnections caps the open connections of each listener (gRPC,
	// HTTP, debug); past it a new connection waits in the kernel's accept
	// queue until one closes. Default 4096; 0: no cap.
	MaxConnections int
	// GRPCMaxConnectionIdle closes (GOAWAY) a gRPC connection that has had
	// no call for this long; default 5m, 0: never.
	GRPCMaxConnectionIdle time.Duration
	// GRPCKeepaliveMinTime is the shortest interval between a client's
	// keepalive pings; a client pinging faster is disconnected. Default
	// 10s. Pings on connections without calls are allowed.
	GRPCKeepaliveMinTime time.Duration
	// GRPCMaxConcurrentStreams caps the calls in flight on one gRPC
	// connection; default 1000, at least 1.
	GRPCMaxConcurrentStreams int
	// GRPCMaxStreams bounds the calls open on the whole gRPC server, and
	// GRPCMaxPendingBytes the bytes of their requests held unfinished,
	// every connection together; past a bound, only connections holding
	// less than an even share may take more, past twice it none
	// (--grpc-server sluice only). Defaults 65,536 and 64 MiB, 0: none.
	GRPCMaxStreams      int
	GRPCMaxPendingBytes int64

	// Stats configure the StatsD/DogStatsD sink and envoyproxy/ratelimit's
	// Prometheus series (--statsd-*, --stats-*, --dogstatsd*,
	// --prometheus-*).
	Stats StatsOptions
}

// TracingOptions configure OpenTelemetry tracing (package
// internal/tracing). The exporter's endpoint, headers, certificates and
// timeout come from the standard OTEL_EXPORTER_OTLP_* environment
// variables, which the OpenTelemetry SDK reads itself.
type TracingOptions struct {
	// Enabled starts a span per call and exports the spans. Default false:
	// no exporter, no propagation, no cost.
	Enabled bool
	// ExporterProtocol is "http" (OTLP/HTTP, the default) or "grpc".
	ExporterProtocol string
	// ServiceName is the spans' service.name; default "RateLimit",
	// envoyproxy/ratelimit's.
	ServiceName string
	// ServiceNamespace is the spans' service.namespace; default none.
	ServiceNamespace string
	// ServiceInstanceID is the spans' service.instance.id; default a random
	// UUID at each start.
	ServiceInstanceID string
	// SamplingRate is the fraction of new traces sampled, in [0, 1];
	// default 1. A call that continues a caller's trace follows the
	// caller's sampling decision.
	SamplingRate float64
}

// RedisOptions are the --redis-* flags.
type RedisOptions struct {
	Addrs        []string      // --redis-addr, one or more host:port, comma-separated
	Mode         string        // --redis-mode single (default), cluster or sentinel
	MasterName   string        // --redis-master, the Sentinel master name
	Username     string        // --redis-username, an ACL user
	PasswordFile string        // --redis-password-file; the password is never logged
	TLS          bool          // --redis-tls
	TLSCA        string        // --redis-tls-ca
	TLSCert      string        // --redis-tls-cert
	TLSKey       string        // --redis-tls-key
	TLSInsecure  bool          // --redis-tls-insecure-skip-verify, for tests only
	Timeout      time.Duration // --redis-timeout, default 100ms
	KeyPrefix    string        // --redis-key-prefix
	Clock        string        // --redis-clock local (default) or server
	EnvoyKeys    bool          // --redis-envoy-keys (default true): fixed windows counted with envoyproxy/ratelimit's commands and keys
	SocketType   string        // --redis-socket-type tcp (default) or unix: Addrs is then one socket path

	// ExpirationJitter (--redis-expiration-jitter, default 0, at most 24h)
	// adds a random 0 to this much (whole seconds) to each fixed-window
	// key's TTL, as envoyproxy/ratelimit's EXPIRATION_JITTER_MAX_SECONDS.
	// The per-second Redis uses the main one's.
	ExpirationJitter time.Duration

	TLSSkipHostname bool          // --redis-tls-skip-hostname-verification: verify the chain, not the name
	MaxFlushDelay   time.Duration // --redis-max-flush-delay: how long a connection may gather pipelined commands while others are in flight; default 20µs, 0: write at once
	// HealthCheckActiveConnection (--redis-health-check-active-connection)
	// makes the health checks fail while Redis does not answer, whatever
	// --on-store-error says.
	HealthCheckActiveConnection bool

	// Startup retries: while Redis does not answer at startup, try again
	// after StartupInitialInterval (default 1s), doubling up to
	// StartupMaxInterval (default 30s), for at most StartupMaxElapsedTime
	// (default 0: forever). --redis-startup-*. Zero intervals mean the
	// defaults.
	StartupInitialInterval, StartupMaxInterval, StartupMaxElapsedTime time.Duration

	// Password, and SentinelUsername with SentinelPassword, have no flag:
	// they come from envoyproxy/ratelimit's REDIS_AUTH and
	// REDIS_SENTINEL_AUTH (--redis-password-file wins over Password).
	Password, SentinelUsername, SentinelPassword string
}

// MemcacheOptions are the --memcache-* flags.
type MemcacheOptions struct {
	Addrs        []string      // --memcache-addrs, host:port, comma-separated, the same order on every instance
	SRV          string        // --memcache-srv, a DNS SRV name _service._proto.name (not with Addrs)
	SRVRefresh   time.Duration // --memcache-srv-refresh, 0 (default): looked up once
	MaxIdleConns int           // --memcache-max-idle-conns, default 2
	Timeout      time.Duration // --memcache-timeout, default 100ms
	KeyPrefix    string        // --memcache-key-prefix
	Jitter       time.Duration // --memcache-expiration-jitter, default 0: up to this much (whole seconds) added to each window's expiry
	TLS          bool          // --memcache-tls
	TLSCA        string        // --memcache-tls-ca
	TLSCert      string        // --memcache-tls-cert
	TLSKey       string        // --memcache-tls-key
	TLSInsecure  bool          // --memcache-tls-insecure-skip-verify, for tests only
}

// Defaults returns the options with every default set.
func Defaults() Options {
	return Options{
		GRPCAddr:        ":8081",
		HTTPAddr:        ":8080",
		DebugAddr:       "127.0.0.1:6070",
		Store:           "memory",
		MemoryMaxBytes:  256 << 20,
		LogLevel:        "info",
		LogFormat:       "text",
		NearLimitRatio:  0.8,
		ReloadDelay:     250 * time.Millisecond,
		ShutdownTimeout: 10 * time.Second,
		GRPCWorkers:     64,
		GRPCBatch:       true,
		GRPCServer:      "sluice",

		KVOverridesRefresh: 10 * time.Second,

		RequestLimits:           true,
		NegativeHits:            true,
		RequestLogSample:        1,
		MaxDescriptors:          1000,
		MaxDescriptorEntries:    64,
		MaxDescriptorEntryBytes: 65536,

		OnStoreError: "error",
		Redis: RedisOptions{
			Mode: "single", Timeout: 100 * time.Millisecond, Clock: "local", EnvoyKeys: true, SocketType: "tcp",
			MaxFlushDelay:          20 * time.Microsecond,
			StartupInitialInterval: time.Second, StartupMaxInterval: 30 * time.Second,
		},
		PerSecondRedis:            RedisOptions{Mode: "single", Timeout: 100 * time.Millisecond, SocketType: "tcp"},
		Memcache:                  MemcacheOptions{MaxIdleConns: 2, Timeout: 100 * time.Millisecond},
		ConfigType:                ConfigTypeFile,
		XDS:                       xdsDefaults(),
		ResponseHeaderLimit:       "RateLimit-Limit",
		ResponseHeaderRemaining:   "RateLimit-Remaining",
		ResponseHeaderReset:       "RateLimit-Reset",
		GRPCMaxConnectionAge:      24 * time.Hour,
		GRPCMaxConnectionAgeGrace: time.Hour,
		HTTPTLS:                   true,
		Tracing:                   TracingOptions{ExporterProtocol: "http", ServiceName: "RateLimit", SamplingRate: 1},

		RuntimeAppDirectory: "config",
		RuntimeWatchRoot:    true,

		Stats: StatsOptions{FlushInterval: 10 * time.Second, PrometheusPath: "/metrics"},

		HTTPReadTimeout:          10 * time.Second,
		HTTPMaxHeaderBytes:       64 << 10,
		HTTPWriteTimeout:         30 * time.Second,
		HTTPIdleTimeout:          2 * time.Minute,
		MaxConnections:           4096,
		GRPCMaxConnectionIdle:    5 * time.Minute,
		GRPCKeepaliveMinTime:     10 * time.Second,
		GRPCMaxConcurrentStreams: 1000,
		GRPCMaxStreams:           65536,
		GRPCMaxPendingBytes:      64 << 20,
	}
}

// ErrHelp is returned by ParseServe when -h or --help was given.
var ErrHelp = flag.ErrHelp

// ParseServe reads the serve command's flags from args, falling back to the
// environment (getenv) for flags not given, on top of Defaults: a flag
// wins over its SLUICE_ variable, which wins over the envoyproxy/ratelimit
// variable that sets the same option (see applyEnvoyEnv). Usage goes to
// out.
func ParseServe(args []string, getenv func(string) string, out io.Writer) (Options, error) {
	o := Defaults()
	fs := flag.NewFlagSet("sluice serve", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: sluice serve [flags]

Runs the rate limit service. Every flag also reads an environment variable,
SLUICE_ and its name in capitals (--grpc-addr: SLUICE_GRPC_ADDR), and the
service reads envoyproxy/ratelimit's variables too (REDIS_URL, RUNTIME_ROOT,
...); a flag wins over its SLUICE_ variable, which wins over
envoyproxy/ratelimit's. docs/configuration.md lists them all; docs/envoy.md
has envoyproxy/ratelimit's.

flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.ConfigPath, "config", o.ConfigPath, "descriptor config file or directory of *.yaml domain files")

	fs.StringVar(&o.RuntimeRoot, "runtime-root", o.RuntimeRoot, "goruntime layout root (often a symlink); descriptor files are in root/subdirectory/appdirectory (instead of --config)")
	fs.StringVar(&o.RuntimeSubdirectory, "runtime-subdirectory", o.RuntimeSubdirectory, "goruntime layout subdirectory below --runtime-root")
	fs.StringVar(&o.RuntimeAppDirectory, "runtime-appdirectory", o.RuntimeAppDirectory, "goruntime layout directory of domain files below the subdirectory")
	fs.BoolVar(&o.RuntimeWatchRoot, "runtime-watch-root", o.RuntimeWatchRoot, "reload when --runtime-root itself is replaced (a symlink swap); false: watch only the config directory")
	fs.BoolVar(&o.RuntimeIgnoreDotfiles, "runtime-ignore-dotfiles", o.RuntimeIgnoreDotfiles, "skip dot-named files and directories in the goruntime layout")
	fs.BoolVar(&o.MergeDomainConfig, "merge-domain-config", o.MergeDomainConfig, "merge files that declare the same domain instead of rejecting them")

	fs.StringVar(&o.GRPCAddr, "grpc-addr", o.GRPCAddr, "gRPC listen address (RLS v3 and sluice.v1)")
	fs.StringVar(&o.HTTPAddr, "http-addr", o.HTTPAddr, "HTTP listen address (/json, /v1/*, /healthcheck)")
	fs.StringVar(&o.DebugAddr, "debug-addr", o.DebugAddr, "debug listen address (/metrics, /rlconfig, /debug/pprof/)")
	fs.StringVar(&o.LogLevel, "log-level", o.LogLevel, "log level: debug, info, warn, error")
	fs.StringVar(&o.LogFormat, "log-format", o.LogFormat, "log format: text, json, or json-envoy (envoyproxy/ratelimit's JSON field names)")
	fs.BoolVar(&o.GlobalShadowMode, "global-shadow-mode", o.GlobalShadowMode, "answer OK to every request while still counting")
	fs.BoolVar(&o.GlobalQuotaMode, "global-quota-mode", o.GlobalQuotaMode, "treat every descriptor as quota_mode: the request is over only when every descriptor is")
	fs.BoolVar(&o.ResponseDynamicMetadata, "response-dynamic-metadata", o.ResponseDynamicMetadata, "add dynamic_metadata (domain, descriptors, configured metadata) to RLS responses")
	fs.BoolVar(&o.ResponseHeaders, "response-headers", o.ResponseHeaders, "add RateLimit-Limit/Remaining/Reset headers to RLS responses")
	fs.StringVar(&o.ResponseHeaderLimit, "response-header-limit", o.ResponseHeaderLimit, "name of the limit header added by --response-headers")
	fs.StringVar(&o.ResponseHeaderRemaining, "response-header-remaining", o.ResponseHeaderRemaining, "name of the remaining header added by --response-headers")
	fs.StringVar(&o.ResponseHeaderReset, "response-header-reset", o.ResponseHeaderReset, "name of the reset header added by --response-headers")
	fs.Float64Var(&o.NearLimitRatio, "near-limit-ratio", o.NearLimitRatio, "share of a limit past which hits count as near the limit")
	durationVar(fs, &o.ReloadDelay, "reload-delay", o.ReloadDelay, "quiet time that coalesces config file changes into one reload")
	fs.StringVar(&o.LimitsPath, "limits", o.LimitsPath, "key-value limits defaults file")
	fs.StringVar(&o.OverridesPath, "overrides", o.OverridesPath, "key-value limits overrides file")
	durationVar(fs, &o.ShutdownTimeout, "shutdown-timeout", o.ShutdownTimeout, "how long in-flight calls may finish after SIGINT/SIGTERM")
	durationVar(fs, &o.ShutdownDrainDelay, "shutdown-drain-delay", o.ShutdownDrainDelay, "how long to keep serving, reported unhealthy, after SIGINT/SIGTERM before closing the listeners")
	fs.BoolVar(&o.HealthyWithConfig, "healthy-with-at-least-one-config-loaded", o.HealthyWithConfig, "report unhealthy until at least one domain is loaded")
	fs.BoolVar(&o.Redis.HealthCheckActiveConnection, "redis-health-check-active-connection", o.Redis.HealthCheckActiveConnection, "report unhealthy while Redis does not answer, whatever --on-store-error says")
	durationVar(fs, &o.GRPCMaxConnectionAge, "grpc-max-connection-age", o.GRPCMaxConnectionAge, "close gRPC connections this old with a GOAWAY (0: never)")
	durationVar(fs, &o.GRPCMaxConnectionAgeGrace, "grpc-max-connection-age-grace", o.GRPCMaxConnectionAgeGrace, "time given to a closing gRPC connection's calls (0: unbounded)")
	fs.IntVar(&o.GRPCWorkers, "grpc-workers", o.GRPCWorkers, "goroutines kept to serve gRPC calls (0: one new goroutine per call)")
	fs.StringVar(&o.GRPCServer, "grpc-server", o.GRPCServer, "gRPC server: sluice (its own HTTP/2 transport, cheaper per call) or grpc-go")
	fs.BoolVar(&o.GRPCBatch, "grpc-batch", o.GRPCBatch, "count the Envoy calls a connection sends together in one store call (Sluice's gRPC server; stores other than memory; tracing off); false: one store call per call")
	fs.IntVar(&o.MaxDescriptors, "max-descriptors", o.MaxDescriptors, "most descriptors in one Envoy request")
	fs.BoolVar(&o.RequestLimits, "request-limits", o.RequestLimits, "honour a limit an Envoy request carries for a descriptor (false: count against the configured rules)")
	fs.BoolVar(&o.RetryAfterHeader, "retry-after-header", o.RetryAfterHeader, "add retry-after (seconds until the first over-limit descriptor frees) to OVER_LIMIT answers' response headers")
	fs.BoolVar(&o.NegativeHits, "negative-hits", o.NegativeHits, "honour is_negative_hits, giving hits back (false: count them, as envoyproxy/ratelimit does)")
	fs.StringVar(&o.RequestLog, "request-log", o.RequestLog, "append sampled Envoy requests to this file, one line each, for sluice replay (empty: off)")
	fs.Float64Var(&o.RequestLogSample, "request-log-sample", o.RequestLogSample, "fraction of Envoy requests written to --request-log, in (0, 1]")
	fs.BoolVar(&o.KVRetryAfterJitter, "kv-retry-after-jitter", o.KVRetryAfterJitter, "add a random 0-3% to the retry_in and Retry-After of denied key-value answers, as Boulder does, so that denied callers do not all come back at once")
	durationVar(fs, &o.KVOverridesRefresh, "kv-overrides-refresh", o.KVOverridesRefresh, "how often to read the key-value overrides set at runtime from the store again, so that services sharing it agree; 0: only at start and after this service's changes")
	fs.StringVar(&o.KVAdminTokenFile, "kv-admin-token-file", o.KVAdminTokenFile, "file holding the bearer token that key-value refund and reset calls must carry")
	fs.StringVar(&o.KVAdminClientSAN, "kv-admin-client-san", o.KVAdminClientSAN, "a name a TLS client certificate must carry to make key-value refund and reset calls (needs --tls-client-ca)")
	fs.StringVar(&o.AdminAddr, "admin-addr", o.AdminAddr, "admin listen address for inspecting and resetting descriptor counters, HTTP and gRPC on one port (empty or off: off); without a host (\":9091\") it binds 127.0.0.1 only, and any non-loopback address needs --admin-token-file or --admin-client-san")
	fs.StringVar(&o.AdminTokenFile, "admin-token-file", o.AdminTokenFile, "file holding the bearer token every call to --admin-addr must carry")
	fs.StringVar(&o.AdminClientSAN, "admin-client-san", o.AdminClientSAN, "a name a TLS client certificate must carry to call --admin-addr (needs --tls-client-ca)")
	fs.IntVar(&o.MaxDescriptorEntries, "max-descriptor-entries", o.MaxDescriptorEntries, "most entries in one descriptor of an Envoy request")
	fs.IntVar(&o.MaxDescriptorEntryBytes, "max-descriptor-entry-bytes", o.MaxDescriptorEntryBytes, "longest key or value of a descriptor entry, and longest domain, in bytes")
	fs.StringVar(&o.TLSCert, "tls-cert", o.TLSCert, "TLS certificate file for the gRPC and HTTP listeners")
	fs.StringVar(&o.TLSKey, "tls-key", o.TLSKey, "TLS key file")
	fs.StringVar(&o.TLSClientCA, "tls-client-ca", o.TLSClientCA, "CA file for client certificates (turns on mutual TLS)")
	fs.StringVar(&o.TLSClientSAN, "tls-client-san", o.TLSClientSAN, "with --tls-client-ca, also require client certificates to name this host (SAN)")
	fs.BoolVar(&o.HTTPTLS, "http-tls", o.HTTPTLS, "serve HTTP with TLS too when --tls-cert is set (false: gRPC only)")
	addrs := o.addStoreFlags(fs)
	fs.StringVar(&o.ConfigType, "config-type", o.ConfigType, "where the descriptor config comes from: FILE (--config) or GRPC_XDS_SOTW (an xDS management server)")
	fs.StringVar(&o.XDS.ServerURL, "xds-server-url", o.XDS.ServerURL, "xDS management server address, host:port")
	fs.StringVar(&o.XDS.NodeID, "xds-node-id", o.XDS.NodeID, "node id sent to the xDS server, which keys its snapshots by it")
	fs.StringVar(&o.XDS.NodeMetadata, "xds-node-metadata", o.XDS.NodeMetadata, "node metadata sent to the xDS server, \"k1=v1,k2=v2\"")
	fs.StringVar(&o.XDS.Headers, "xds-client-headers", o.XDS.Headers, "gRPC headers added to the xDS stream, \"k1:v1,k2:v2\"")
	durationVar(fs, &o.XDS.ConnectRetryInterval, "xds-connect-retry-interval", o.XDS.ConnectRetryInterval, "how often to dial the xDS server again while it cannot be reached")
	durationVar(fs, &o.XDS.BackoffInitial, "xds-backoff-initial", o.XDS.BackoffInitial, "wait before reopening a broken xDS stream; doubles after each stream that broke without a response")
	durationVar(fs, &o.XDS.BackoffMax, "xds-backoff-max", o.XDS.BackoffMax, "longest wait before reopening a broken xDS stream")
	fs.IntVar(&o.XDS.MaxRecvMsgSize, "xds-max-recv-msg-size", o.XDS.MaxRecvMsgSize, "largest xDS response accepted, in bytes (0: 4 MiB)")
	fs.BoolVar(&o.XDS.UseTLS, "xds-server-use-tls", o.XDS.UseTLS, "connect to the xDS server over TLS")
	fs.StringVar(&o.XDS.ClientTLSCert, "xds-client-tls-cert", o.XDS.ClientTLSCert, "client certificate file for the xDS server (mutual TLS)")
	fs.StringVar(&o.XDS.ClientTLSKey, "xds-client-tls-key", o.XDS.ClientTLSKey, "client key file for the xDS server")
	fs.StringVar(&o.XDS.ServerTLSCACert, "xds-server-tls-cacert", o.XDS.ServerTLSCACert, "CA file for the xDS server certificate (default: the system's)")
	fs.StringVar(&o.XDS.ServerTLSSAN, "xds-server-tls-san", o.XDS.ServerTLSSAN, "name to verify in the xDS server certificate (default: the host of --xds-server-url)")

	// envoyproxy/ratelimit's local cache and its companions.
	fs.IntVar(&o.LocalCacheSize, "local-cache-size", o.LocalCacheSize, "bytes of memory for remembering Envoy descriptors over their limit, answered without a store round trip until their window ends (0: off)")
	fs.BoolVar(&o.StopCacheKeyIncrementWhenOverLimit, "stop-cache-key-increment-when-overlimit", o.StopCacheKeyIncrementWhenOverLimit, "when one descriptor of a request is over its limit, do not count the others")
	durationVar(fs, &o.Redis.ExpirationJitter, "redis-expiration-jitter", o.Redis.ExpirationJitter, "add a random 0 to this much (whole seconds) to each Redis window key's TTL")
	fs.BoolVar(&o.Tracing.Enabled, "tracing", o.Tracing.Enabled, "export OpenTelemetry spans over OTLP (endpoint from OTEL_EXPORTER_OTLP_* variables)")
	fs.StringVar(&o.Tracing.ExporterProtocol, "tracing-exporter-protocol", o.Tracing.ExporterProtocol, "OTLP exporter protocol: http or grpc")
	fs.StringVar(&o.Tracing.ServiceName, "tracing-service-name", o.Tracing.ServiceName, "service.name of the spans")
	fs.StringVar(&o.Tracing.ServiceNamespace, "tracing-service-namespace", o.Tracing.ServiceNamespace, "service.namespace of the spans (default none)")
	fs.StringVar(&o.Tracing.ServiceInstanceID, "tracing-service-instance-id", o.Tracing.ServiceInstanceID, "service.instance.id of the spans (default a random UUID at each start)")
	fs.Float64Var(&o.Tracing.SamplingRate, "tracing-sampling-rate", o.Tracing.SamplingRate, "fraction of new traces sampled, 0 to 1 (a caller's sampled trace is always continued)")

	// Statistics sinks (docs/envoy.md, "Statistics").
	fs.StringVar(&o.Stats.StatsdAddr, "statsd-addr", o.Stats.StatsdAddr, "send envoyproxy/ratelimit's statistics to this StatsD server, host:port (empty: off)")
	fs.StringVar(&o.Stats.StatsdProtocol, "statsd-protocol", o.Stats.StatsdProtocol, "StatsD transport: tcp or udp (empty: tcp, udp with --dogstatsd)")
	durationVar(fs, &o.Stats.FlushInterval, "stats-flush-interval", o.Stats.FlushInterval, "how often to send the statistics' changes to StatsD")
	fs.StringVar(&o.Stats.ExtraTags, "stats-extra-tags", o.Stats.ExtraTags, "tags added to every StatsD stat, \"k1:v1,k2:v2\"")
	fs.BoolVar(&o.Stats.DogStatsD, "dogstatsd", o.Stats.DogStatsD, "send DogStatsD lines (tags after |#) to --statsd-addr")
	fs.Func("dogstatsd-mogrifiers", "DogStatsD mogrifiers to apply, comma-separated NAMEs, each defined by DOG_STATSD_MOGRIFIER_<NAME>_PATTERN, _NAME and _TAGS", func(v string) error { o.Stats.Mogrifiers = splitList(v); return nil })
	fs.BoolVar(&o.Stats.PrometheusCompat, "prometheus-compat", o.Stats.PrometheusCompat, "also expose envoyproxy/ratelimit's Prometheus series (ratelimit_service_*) on the debug /metrics")
	fs.StringVar(&o.Stats.PrometheusAddr, "prometheus-addr", o.Stats.PrometheusAddr, "with --prometheus-compat, also serve those series on this listen address (empty: none)")
	fs.StringVar(&o.Stats.PrometheusPath, "prometheus-path", o.Stats.PrometheusPath, "path of the series on --prometheus-addr")
	fs.BoolVar(&o.Stats.PrometheusResponseTimeMillis, "prometheus-response-time-ms", o.Stats.PrometheusResponseTimeMillis, "report ratelimit_service_response_time_seconds in milliseconds, as upstream's PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS")

	// Connection limits against slow or greedy clients.
	durationVar(fs, &o.HTTPReadTimeout, "http-read-timeout", o.HTTPReadTimeout, "longest time to read a whole HTTP request, a gRPC connection's handshake, and a unary gRPC call's request")
	durationVar(fs, &o.HTTPWriteTimeout, "http-write-timeout", o.HTTPWriteTimeout, "longest time from an HTTP request's headers to the end of its answer (not on the debug listener); on the gRPC port, the longest a write to a connection may take")
	durationVar(fs, &o.HTTPIdleTimeout, "http-idle-timeout", o.HTTPIdleTimeout, "close keep-alive HTTP connections idle this long")
	fs.IntVar(&o.HTTPMaxHeaderBytes, "http-max-header-bytes", o.HTTPMaxHeaderBytes, "largest HTTP request header block, in bytes, on every HTTP listener; larger ones are answered 431")
	fs.IntVar(&o.MaxConnections, "max-connections", o.MaxConnections, "most open connections per listener (gRPC, HTTP, debug); more wait to be accepted (0: no cap)")
	durationVar(fs, &o.GRPCMaxConnectionIdle, "grpc-max-connection-idle", o.GRPCMaxConnectionIdle, "close gRPC connections without a call for this long with a GOAWAY (0: never)")
	durationVar(fs, &o.GRPCKeepaliveMinTime, "grpc-keepalive-min-time", o.GRPCKeepaliveMinTime, "shortest interval between a gRPC client's keepalive pings; faster pingers are disconnected")
	fs.IntVar(&o.GRPCMaxConcurrentStreams, "grpc-max-concurrent-streams", o.GRPCMaxConcurrentStreams, "most calls in flight on one gRPC connection")
	fs.IntVar(&o.GRPCMaxStreams, "grpc-max-streams", o.GRPCMaxStreams, "calls open on the gRPC server, every connection together, past which only connections holding less than an even share may open more, with --grpc-server sluice (0: no bound)")
	fs.Int64Var(&o.GRPCMaxPendingBytes, "grpc-max-pending-bytes", o.GRPCMaxPendingBytes, "bytes of unfinished request messages the gRPC server holds, every call together, shared as --grpc-max-streams (0: no bound)")

	// Least to most precedence: envoyproxy/ratelimit's variables, SLUICE_
	// variables, flags; each layer overwrites what the one before set.
	sources, err := applyEnvoyEnv(fs, &o, getenv)
	if err != nil {
		return o, err
	}
	if err := applyEnv(fs, getenv); err != nil {
		return o, err
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	o.Redis.Addrs = splitList(*addrs)
	// --config (or SLUICE_CONFIG) names the descriptor files: it wins over
	// a RUNTIME_ROOT that only envoyproxy/ratelimit's environment set.
	if src, ok := sources["runtime-root"]; ok && o.ConfigPath != "" && o.RuntimeRoot == src.value {
		o.RuntimeRoot = ""
	}
	o.Stats.MogrifierDefs = mogrifierDefs(o.Stats.Mogrifiers, getenv)
	if err := o.Validate(); err != nil {
		return o, explainSources(err, fs, sources, getenv)
	}
	return o, nil
}

// addStoreFlags registers the store flags shared by serve and proxy. The
// returned string receives --redis-addr's comma-separated list.
func (o *Options) addStoreFlags(fs *flag.FlagSet) *string {
	fs.StringVar(&o.Store, "store", o.Store, "store backend: memory, redis or memcache")
	fs.IntVar(&o.MemoryMaxEntries, "memory-max-entries", o.MemoryMaxEntries, "bound on buckets kept by the memory store (0: 4194304)")
	fs.Int64Var(&o.MemoryMaxBytes, "memory-max-bytes", o.MemoryMaxBytes, "bound on bytes kept by the memory store, each bucket counted as its key length plus 160 (0: 268435456)")
	fs.StringVar(&o.OnStoreError, "on-store-error", o.OnStoreError, "answer while the store fails: error, allow, deny or local")
	addrs := strings.Join(o.Redis.Addrs, ",")
	fs.StringVar(&addrs, "redis-addr", addrs, "Redis address(es), host:port, comma-separated")
	fs.StringVar(&o.Redis.Mode, "redis-mode", o.Redis.Mode, "Redis topology: single, cluster or sentinel")
	fs.StringVar(&o.Redis.MasterName, "redis-master", o.Redis.MasterName, "Sentinel master name")
	fs.StringVar(&o.Redis.Username, "redis-username", o.Redis.Username, "Redis ACL user name")
	fs.StringVar(&o.Redis.PasswordFile, "redis-password-file", o.Redis.PasswordFile, "file holding the Redis password")
	fs.BoolVar(&o.Redis.TLS, "redis-tls", o.Redis.TLS, "connect to Redis over TLS")
	fs.StringVar(&o.Redis.TLSCA, "redis-tls-ca", o.Redis.TLSCA, "CA file for the Redis server certificate")
	fs.StringVar(&o.Redis.TLSCert, "redis-tls-cert", o.Redis.TLSCert, "client certificate file for Redis")
	fs.StringVar(&o.Redis.TLSKey, "redis-tls-key", o.Redis.TLSKey, "client key file for Redis")
	fs.BoolVar(&o.Redis.TLSInsecure, "redis-tls-insecure-skip-verify", o.Redis.TLSInsecure, "do not verify the Redis certificate (tests only)")
	durationVar(fs, &o.Redis.Timeout, "redis-timeout", o.Redis.Timeout, "bound on each Redis call")
	fs.StringVar(&o.Redis.KeyPrefix, "redis-key-prefix", o.Redis.KeyPrefix, "prefix of every Redis key")
	fs.StringVar(&o.Redis.Clock, "redis-clock", o.Redis.Clock, "time source for Redis decisions: local or server")
	fs.BoolVar(&o.Redis.EnvoyKeys, "redis-envoy-keys", o.Redis.EnvoyKeys, "count fixed windows with envoyproxy/ratelimit's pipelined INCRBY+EXPIRE on its keys (false: with the Lua script)")
	fs.BoolVar(&o.Redis.TLSSkipHostname, "redis-tls-skip-hostname-verification", o.Redis.TLSSkipHostname, "verify the Redis certificate's chain but not its host name")
	durationVar(fs, &o.Redis.MaxFlushDelay, "redis-max-flush-delay", o.Redis.MaxFlushDelay, "how long a Redis connection may wait, while other calls are in flight on it, to gather their commands into one write (0: write at once)")
	durationVar(fs, &o.Redis.StartupInitialInterval, "redis-startup-initial-interval", o.Redis.StartupInitialInterval, "first wait before retrying Redis at startup")
	durationVar(fs, &o.Redis.StartupMaxInterval, "redis-startup-max-interval", o.Redis.StartupMaxInterval, "longest wait between Redis retries at startup")
	durationVar(fs, &o.Redis.StartupMaxElapsedTime, "redis-startup-max-elapsed-time", o.Redis.StartupMaxElapsedTime, "give up starting when Redis has not answered for this long (0: retry forever)")

	// The Redis socket type, the per-second Redis and memcache.
	fs.StringVar(&o.Redis.SocketType, "redis-socket-type", o.Redis.SocketType, "how to reach Redis: tcp, or unix (--redis-addr is then a socket path)")
	ps := &o.PerSecondRedis
	fs.BoolVar(&o.RedisPerSecond, "redis-persecond", o.RedisPerSecond, "keep fixed windows shorter than a minute in a second Redis (--redis-persecond-*)")
	fs.Func("redis-persecond-addr", "per-second Redis address(es), host:port, comma-separated", func(v string) error { ps.Addrs = splitList(v); return nil })
	fs.StringVar(&ps.Mode, "redis-persecond-mode", ps.Mode, "per-second Redis topology: single, cluster or sentinel")
	fs.StringVar(&ps.MasterName, "redis-persecond-master", ps.MasterName, "per-second Redis Sentinel master name")
	fs.StringVar(&ps.Username, "redis-persecond-username", ps.Username, "per-second Redis ACL user name")
	fs.StringVar(&ps.PasswordFile, "redis-persecond-password-file", ps.PasswordFile, "file holding the per-second Redis password")
	fs.StringVar(&ps.SocketType, "redis-persecond-socket-type", ps.SocketType, "how to reach the per-second Redis: tcp, or unix (a socket path)")
	fs.BoolVar(&ps.TLS, "redis-persecond-tls", ps.TLS, "connect to the per-second Redis over TLS")
	fs.StringVar(&ps.TLSCA, "redis-persecond-tls-ca", ps.TLSCA, "CA file for the per-second Redis server certificate")
	fs.StringVar(&ps.TLSCert, "redis-persecond-tls-cert", ps.TLSCert, "client certificate file for the per-second Redis")
	fs.StringVar(&ps.TLSKey, "redis-persecond-tls-key", ps.TLSKey, "client key file for the per-second Redis")
	fs.BoolVar(&ps.TLSInsecure, "redis-persecond-tls-insecure-skip-verify", ps.TLSInsecure, "do not verify the per-second Redis certificate (tests only)")
	durationVar(fs, &ps.Timeout, "redis-persecond-timeout", ps.Timeout, "bound on each per-second Redis call")
	mc := &o.Memcache
	fs.Func("memcache-addrs", "memcached servers, host:port, comma-separated, in the same order on every instance", func(v string) error { mc.Addrs = splitList(v); return nil })
	fs.StringVar(&mc.SRV, "memcache-srv", mc.SRV, "DNS SRV name (_service._proto.name) listing the memcached servers")
	durationVar(fs, &mc.SRVRefresh, "memcache-srv-refresh", mc.SRVRefresh, "how often to look --memcache-srv up again (0: once)")
	fs.IntVar(&mc.MaxIdleConns, "memcache-max-idle-conns", mc.MaxIdleConns, "idle connections kept per memcached server")
	durationVar(fs, &mc.Timeout, "memcache-timeout", mc.Timeout, "bound on each memcached round trip and store call")
	fs.StringVar(&mc.KeyPrefix, "memcache-key-prefix", mc.KeyPrefix, "prefix of every memcached key")
	durationVar(fs, &mc.Jitter, "memcache-expiration-jitter", mc.Jitter, "add a random 0 to this much (whole seconds) to each window's expiry")
	fs.BoolVar(&mc.TLS, "memcache-tls", mc.TLS, "connect to memcached over TLS")
	fs.StringVar(&mc.TLSCA, "memcache-tls-ca", mc.TLSCA, "CA file for the memcached server certificates")
	fs.StringVar(&mc.TLSCert, "memcache-tls-cert", mc.TLSCert, "client certificate file for memcached")
	fs.StringVar(&mc.TLSKey, "memcache-tls-key", mc.TLSKey, "client key file for memcached")
	fs.BoolVar(&mc.TLSInsecure, "memcache-tls-insecure-skip-verify", mc.TLSInsecure, "do not verify the memcached certificates (tests only)")

	return &addrs
}

// applyEnv sets every flag whose SLUICE_* variable is set and non-empty.
func applyEnv(fs *flag.FlagSet, getenv func(string) string) error {
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		name := EnvName(f.Name)
		if v := getenv(name); v != "" {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("environment variable %s=%q: %w", name, v, err))
			}
		}
	})
	return errors.Join(errs...)
}

// EnvName is the environment variable read for a flag: "grpc-addr" →
// "SLUICE_GRPC_ADDR".
func EnvName(flagName string) string {
	return "SLUICE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Validate checks the options and names every bad one.
func (o *Options) Validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	oneOf := func(flag, v string, allowed ...string) {
		for _, a := range allowed {
			if v == a {
				return
			}
		}
		bad(flag, "%q is not one of %s", v, strings.Join(allowed, ", "))
	}
	oneOf("store", o.Store, "memory", "redis", "memcache")
	oneOf("log-level", o.LogLevel, "debug", "info", "warn", "error")
	oneOf("log-format", o.LogFormat, "text", "json", "json-envoy")
	oneOf("on-store-error", o.OnStoreError, "error", "allow", "deny", "local")
	oneOf("redis-mode", o.Redis.Mode, "single", "cluster", "sentinel")
	oneOf("redis-clock", o.Redis.Clock, "local", "server")
	oneOf("grpc-server", o.GRPCServer, "sluice", "grpc-go")
	if o.KVOverridesRefresh < 0 {
		bad("kv-overrides-refresh", "%s is negative, want 0 (no refresh) or more", o.KVOverridesRefresh)
	}
	if o.KVAdminClientSAN != "" && o.TLSClientCA == "" {
		bad("kv-admin-client-san", "needs --tls-client-ca: client certificates are only asked for with mutual TLS")
	}
	if o.KVAdminTokenFile != "" {
		if _, err := o.kvAdmin(); err != nil {
			bad("kv-admin-token-file", "%v", err)
		}
	}
	o.validateAdmin(bad)
	for _, c := range [...]struct {
		flag string
		v    int
	}{{"max-descriptors", o.MaxDescriptors}, {"max-descriptor-entries", o.MaxDescriptorEntries}, {"max-descriptor-entry-bytes", o.MaxDescriptorEntryBytes}} {
		if c.v < 1 {
			bad(c.flag, "%d must be at least 1", c.v)
		}
	}
	if o.RuntimeRoot != "" && o.ConfigPath != "" {
		bad("runtime-root", "--config and --runtime-root are exclusive: give one")
	}
	for _, f := range [...][2]string{{"runtime-subdirectory", o.RuntimeSubdirectory}, {"runtime-appdirectory", o.RuntimeAppDirectory}} {
		if f[1] != "" && !filepath.IsLocal(f[1]) {
			bad(f[0], "%q must be a relative path inside --runtime-root", f[1])
		}
	}
	errs = append(errs, o.validateXDS()...)
	if o.NearLimitRatio <= 0 || o.NearLimitRatio > 1 {
		bad("near-limit-ratio", "%s is outside (0, 1]", strconv.FormatFloat(o.NearLimitRatio, 'g', -1, 64))
	}
	if !(o.RequestLogSample > 0 && o.RequestLogSample <= 1) {
		bad("request-log-sample", "%s is outside (0, 1]", strconv.FormatFloat(o.RequestLogSample, 'g', -1, 64))
	}
	if o.ReloadDelay < 0 {
		bad("reload-delay", "%s is negative", o.ReloadDelay)
	}
	if o.ShutdownTimeout <= 0 {
		bad("shutdown-timeout", "%s must be positive", o.ShutdownTimeout)
	}
	if o.ShutdownDrainDelay < 0 {
		bad("shutdown-drain-delay", "%s is negative", o.ShutdownDrainDelay)
	}
	if o.GRPCMaxConnectionAge < 0 {
		bad("grpc-max-connection-age", "%s is negative", o.GRPCMaxConnectionAge)
	}
	if o.GRPCMaxConnectionAgeGrace < 0 {
		bad("grpc-max-connection-age-grace", "%s is negative", o.GRPCMaxConnectionAgeGrace)
	}
	for flag, v := range map[string]string{"response-header-limit": o.ResponseHeaderLimit, "response-header-remaining": o.ResponseHeaderRemaining, "response-header-reset": o.ResponseHeaderReset} {
		if v != "" && !validHeaderName(v) {
			bad(flag, "%q is not a header name", v)
		}
	}
	for _, d := range [...]struct {
		flag string
		v    time.Duration
	}{{"http-read-timeout", o.HTTPReadTimeout}, {"http-write-timeout", o.HTTPWriteTimeout}, {"http-idle-timeout", o.HTTPIdleTimeout}, {"grpc-keepalive-min-time", o.GRPCKeepaliveMinTime}} {
		if d.v <= 0 {
			bad(d.flag, "%s must be positive", d.v)
		}
	}
	if o.GRPCMaxConnectionIdle < 0 {
		bad("grpc-max-connection-idle", "%s is negative", o.GRPCMaxConnectionIdle)
	}
	for _, n := range [...]struct {
		flag   string
		v, min int64
		zero   string // what 0 means, when it is allowed
	}{
		{"max-connections", int64(o.MaxConnections), 0, "no cap"},
		{"grpc-max-concurrent-streams", int64(o.GRPCMaxConcurrentStreams), 1, ""},
		{"http-max-header-bytes", int64(o.HTTPMaxHeaderBytes), 1024, ""},
		{"grpc-max-streams", int64(o.GRPCMaxStreams), 0, "no bound"},
		{"grpc-max-pending-bytes", o.GRPCMaxPendingBytes, 0, "no bound"},
	} {
		switch {
		case n.v >= n.min:
		case n.min == 0:
			bad(n.flag, "%d is negative (0: %s)", n.v, n.zero)
		default:
			bad(n.flag, "%d must be at least %d", n.v, n.min)
		}
	}
	if o.GRPCWorkers < 0 || o.GRPCWorkers > 1<<16 {
		bad("grpc-workers", "%d is outside [0, 65536]", o.GRPCWorkers)
	}
	if o.Tracing.Enabled {
		oneOf("tracing-exporter-protocol", o.Tracing.ExporterProtocol, "http", "grpc")
		if r := o.Tracing.SamplingRate; !(r >= 0 && r <= 1) {
			bad("tracing-sampling-rate", "%s is outside [0, 1]", strconv.FormatFloat(r, 'g', -1, 64))
		}
	}
	if o.MemoryMaxEntries < 0 {
		bad("memory-max-entries", "%d is negative", o.MemoryMaxEntries)
	}
	if o.MemoryMaxBytes < 0 {
		bad("memory-max-bytes", "%d is negative", o.MemoryMaxBytes)
	}
	if (o.TLSCert == "") != (o.TLSKey == "") {
		bad("tls-cert", "--tls-cert and --tls-key go together")
	}
	if o.TLSClientCA != "" && o.TLSCert == "" {
		bad("tls-client-ca", "needs --tls-cert and --tls-key")
	}
	if o.TLSClientSAN != "" && o.TLSClientCA == "" {
		bad("tls-client-san", "needs --tls-client-ca")
	}
	if o.OverridesPath != "" && o.LimitsPath == "" {
		bad("overrides", "needs --limits")
	}
	if o.Store == "redis" {
		if len(o.Redis.Addrs) == 0 {
			bad("redis-addr", "required with --store redis")
		}
		if o.Redis.Mode == "sentinel" && o.Redis.MasterName == "" {
			bad("redis-master", "required with --redis-mode sentinel")
		}
		if o.Redis.Timeout <= 0 {
			bad("redis-timeout", "%s must be positive", o.Redis.Timeout)
		}
		if o.Redis.MaxFlushDelay < 0 {
			bad("redis-max-flush-delay", "%s is negative", o.Redis.MaxFlushDelay)
		}
		if o.Redis.StartupInitialInterval < 0 {
			bad("redis-startup-initial-interval", "%s is negative", o.Redis.StartupInitialInterval)
		}
		if o.Redis.StartupMaxInterval != 0 && o.Redis.StartupMaxInterval < o.Redis.StartupInitialInterval {
			bad("redis-startup-max-interval", "%s is shorter than --redis-startup-initial-interval %s", o.Redis.StartupMaxInterval, o.Redis.StartupInitialInterval)
		}
		if o.Redis.StartupMaxElapsedTime < 0 {
			bad("redis-startup-max-elapsed-time", "%s is negative", o.Redis.StartupMaxElapsedTime)
		}
	}
	// The Redis socket type, the per-second Redis and memcache.
	redisSocket := func(prefix string, r *RedisOptions) {
		oneOf(prefix+"-socket-type", r.SocketType, "tcp", "unix")
		if r.SocketType == "unix" && (r.Mode != "single" || len(r.Addrs) > 1) {
			bad(prefix+"-socket-type", "unix needs --%s-mode single and one socket path in --%s-addr", prefix, prefix)
		}
	}
	redisSocket("redis", &o.Redis)
	if o.RedisPerSecond {
		ps := &o.PerSecondRedis
		if o.Store != "redis" {
			bad("redis-persecond", "needs --store redis")
		}
		if len(ps.Addrs) == 0 {
			bad("redis-persecond-addr", "required with --redis-persecond")
		}
		oneOf("redis-persecond-mode", ps.Mode, "single", "cluster", "sentinel")
		if ps.Mode == "sentinel" && ps.MasterName == "" {
			bad("redis-persecond-master", "required with --redis-persecond-mode sentinel")
		}
		if ps.Timeout <= 0 {
			bad("redis-persecond-timeout", "%s must be positive", ps.Timeout)
		}
		redisSocket("redis-persecond", ps)
	}
	if o.Store == "memcache" {
		mc := &o.Memcache
		switch {
		case len(mc.Addrs) == 0 && mc.SRV == "":
			bad("memcache-addrs", "--memcache-addrs or --memcache-srv is required with --store memcache")
		case len(mc.Addrs) > 0 && mc.SRV != "":
			bad("memcache-srv", "not with --memcache-addrs: give one of them")
		}
		if mc.SRVRefresh < 0 {
			bad("memcache-srv-refresh", "%s is negative", mc.SRVRefresh)
		}
		if mc.MaxIdleConns < 1 {
			bad("memcache-max-idle-conns", "%d must be at least 1", mc.MaxIdleConns)
		}
		if mc.Timeout < time.Millisecond || mc.Timeout > time.Minute {
			bad("memcache-timeout", "%s is outside [1ms, 1m]", mc.Timeout)
		}
		if mc.Jitter < 0 {
			bad("memcache-expiration-jitter", "%s is negative", mc.Jitter)
		}
	}
	if o.LocalCacheSize < 0 || int64(o.LocalCacheSize) > 1<<40 {
		bad("local-cache-size", "%d is outside [0, 1099511627776] bytes", o.LocalCacheSize)
	}
	if j := o.Redis.ExpirationJitter; j < 0 || j > 24*time.Hour {
		bad("redis-expiration-jitter", "%s is outside [0, 24h]", j)
	}
	o.Stats.validate(bad)
	return errors.Join(errs...)
}

// validHeaderName reports whether s is a non-empty HTTP header name (an
// RFC 9110 token).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// durationFlag is a time.Duration flag whose parse errors say what a
// duration looks like, where the flag package's own says only "parse
// error".
type durationFlag struct{ p *time.Duration }

func (f durationFlag) String() string {
	if f.p == nil {
		return "0s"
	}
	return f.p.String()
}

func (f durationFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration: write a number with a unit, such as 100ms, 2s or 1m30s", s)
	}
	*f.p = d
	return nil
}

// durationVar defines a duration flag as fs.DurationVar does, with
// durationFlag's errors.
func durationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	// The backquoted word names the value in -help, as "duration" for
	// fs.DurationVar's flags.
	fs.Var(durationFlag{p}, name, usage+" (a `duration` such as 250ms or 1m)")
}

// kvAdmin reads the key-value administrator credentials the options name.
func (o *Options) kvAdmin() (server.AdminAuth, error) {
	a := server.AdminAuth{ClientSAN: o.KVAdminClientSAN}
	if o.KVAdminTokenFile == "" {
		return a, nil
	}
	b, err := os.ReadFile(o.KVAdminTokenFile)
	if err != nil {
		return a, fmt.Errorf("read the token: %w", err)
	}
	a.Token = strings.TrimSpace(string(b))
	if a.Token == "" {
		return a, fmt.Errorf("%s holds no token", o.KVAdminTokenFile)
	}
	return a, nil
}
