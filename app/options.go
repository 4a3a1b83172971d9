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
	"path/filepath"
	"strconv"
	"strings"
	"time"
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
	// Store is the backend: "memory" (default) or "redis".
	Store string
	// MemoryMaxEntries bounds the memory store's buckets; default 4194304.
	MemoryMaxEntries int
	// LogLevel is debug, info (default), warn or error; LogFormat is text
	// (default) or json.
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

	// GRPCWorkers is how many long-lived goroutines serve gRPC calls
	// (grpc.NumStreamWorkers); a call finding none free gets a goroutine
	// of its own. Reused goroutines keep their grown stacks, which saves
	// the stack copying a new goroutine pays on every call. 0: a new
	// goroutine per call, grpc-go's default. Default 64.
	GRPCWorkers int

	// TLS for the gRPC and HTTP listeners: certificate and key files, and an
	// optional client CA file that turns on mutual TLS. Certificates are
	// reloaded when the files change.
	TLSCert, TLSKey, TLSClientCA string

	// Redis settings, used with Store "redis".
	Redis RedisOptions
	// OnStoreError says what to answer while the store fails: error
	// (default), allow, deny, or local (fall back to an in-memory store).
	OnStoreError string

	// ConfigType is where the Envoy descriptor configuration comes from:
	// FILE (the default: ConfigPath) or GRPC_XDS_SOTW (an xDS management
	// server, see XDS; ConfigPath is then ignored).
	ConfigType string
	// XDS configures the xDS client used with ConfigType GRPC_XDS_SOTW.
	XDS XDSOptions
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
}

// Defaults returns the options with every default set.
func Defaults() Options {
	return Options{
		GRPCAddr:        ":8081",
		HTTPAddr:        ":8080",
		DebugAddr:       "127.0.0.1:6070",
		Store:           "memory",
		LogLevel:        "info",
		LogFormat:       "text",
		NearLimitRatio:  0.8,
		ReloadDelay:     250 * time.Millisecond,
		ShutdownTimeout: 10 * time.Second,
		GRPCWorkers:     64,
		OnStoreError:    "error",
		Redis:           RedisOptions{Mode: "single", Timeout: 100 * time.Millisecond, Clock: "local", EnvoyKeys: true},
		ConfigType:      ConfigTypeFile,
		XDS:             xdsDefaults(),

		RuntimeAppDirectory: "config",
		RuntimeWatchRoot:    true,
	}
}

// ErrHelp is returned by ParseServe when -h or --help was given.
var ErrHelp = flag.ErrHelp

// ParseServe reads the serve command's flags from args, falling back to the
// environment (getenv) for flags not given, on top of Defaults. Usage
// goes to out.
func ParseServe(args []string, getenv func(string) string, out io.Writer) (Options, error) {
	o := Defaults()
	fs := flag.NewFlagSet("sluice serve", flag.ContinueOnError)
	fs.SetOutput(out)
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
	fs.StringVar(&o.LogFormat, "log-format", o.LogFormat, "log format: text or json")
	fs.BoolVar(&o.GlobalShadowMode, "global-shadow-mode", o.GlobalShadowMode, "answer OK to every request while still counting")
	fs.BoolVar(&o.GlobalQuotaMode, "global-quota-mode", o.GlobalQuotaMode, "treat every descriptor as quota_mode: the request is over only when every descriptor is")
	fs.BoolVar(&o.ResponseDynamicMetadata, "response-dynamic-metadata", o.ResponseDynamicMetadata, "add dynamic_metadata (domain, descriptors, configured metadata) to RLS responses")
	fs.BoolVar(&o.ResponseHeaders, "response-headers", o.ResponseHeaders, "add RateLimit-Limit/Remaining/Reset headers to RLS responses")
	fs.Float64Var(&o.NearLimitRatio, "near-limit-ratio", o.NearLimitRatio, "share of a limit past which hits count as near the limit")
	fs.DurationVar(&o.ReloadDelay, "reload-delay", o.ReloadDelay, "quiet time that coalesces config file changes into one reload")
	fs.StringVar(&o.LimitsPath, "limits", o.LimitsPath, "key-value limits defaults file")
	fs.StringVar(&o.OverridesPath, "overrides", o.OverridesPath, "key-value limits overrides file")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", o.ShutdownTimeout, "how long in-flight calls may finish after SIGINT/SIGTERM")
	fs.IntVar(&o.GRPCWorkers, "grpc-workers", o.GRPCWorkers, "goroutines kept to serve gRPC calls (0: one new goroutine per call)")
	fs.StringVar(&o.TLSCert, "tls-cert", o.TLSCert, "TLS certificate file for the gRPC and HTTP listeners")
	fs.StringVar(&o.TLSKey, "tls-key", o.TLSKey, "TLS key file")
	fs.StringVar(&o.TLSClientCA, "tls-client-ca", o.TLSClientCA, "CA file for client certificates (turns on mutual TLS)")
	addrs := o.addStoreFlags(fs)
	fs.StringVar(&o.ConfigType, "config-type", o.ConfigType, "where the descriptor config comes from: FILE (--config) or GRPC_XDS_SOTW (an xDS management server)")
	fs.StringVar(&o.XDS.ServerURL, "xds-server-url", o.XDS.ServerURL, "xDS management server address, host:port")
	fs.StringVar(&o.XDS.NodeID, "xds-node-id", o.XDS.NodeID, "node id sent to the xDS server, which keys its snapshots by it")
	fs.StringVar(&o.XDS.NodeMetadata, "xds-node-metadata", o.XDS.NodeMetadata, "node metadata sent to the xDS server, \"k1=v1,k2=v2\"")
	fs.StringVar(&o.XDS.Headers, "xds-client-headers", o.XDS.Headers, "gRPC headers added to the xDS stream, \"k1:v1,k2:v2\"")
	fs.DurationVar(&o.XDS.ConnectRetryInterval, "xds-connect-retry-interval", o.XDS.ConnectRetryInterval, "how often to dial the xDS server again while it cannot be reached")
	fs.DurationVar(&o.XDS.BackoffInitial, "xds-backoff-initial", o.XDS.BackoffInitial, "wait before reopening a broken xDS stream; doubles after each stream that broke without a response")
	fs.DurationVar(&o.XDS.BackoffMax, "xds-backoff-max", o.XDS.BackoffMax, "longest wait before reopening a broken xDS stream")
	fs.IntVar(&o.XDS.MaxRecvMsgSize, "xds-max-recv-msg-size", o.XDS.MaxRecvMsgSize, "largest xDS response accepted, in bytes (0: 4 MiB)")
	fs.BoolVar(&o.XDS.UseTLS, "xds-server-use-tls", o.XDS.UseTLS, "connect to the xDS server over TLS")
	fs.StringVar(&o.XDS.ClientTLSCert, "xds-client-tls-cert", o.XDS.ClientTLSCert, "client certificate file for the xDS server (mutual TLS)")
	fs.StringVar(&o.XDS.ClientTLSKey, "xds-client-tls-key", o.XDS.ClientTLSKey, "client key file for the xDS server")
	fs.StringVar(&o.XDS.ServerTLSCACert, "xds-server-tls-cacert", o.XDS.ServerTLSCACert, "CA file for the xDS server certificate (default: the system's)")
	fs.StringVar(&o.XDS.ServerTLSSAN, "xds-server-tls-san", o.XDS.ServerTLSSAN, "name to verify in the xDS server certificate (default: the host of --xds-server-url)")

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
	return o, o.Validate()
}

// addStoreFlags registers the store flags shared by serve and proxy. The
// returned string receives --redis-addr's comma-separated list.
func (o *Options) addStoreFlags(fs *flag.FlagSet) *string {
	fs.StringVar(&o.Store, "store", o.Store, "store backend: memory or redis")
	fs.IntVar(&o.MemoryMaxEntries, "memory-max-entries", o.MemoryMaxEntries, "bound on buckets kept by the memory store (0: 4194304)")
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
	fs.DurationVar(&o.Redis.Timeout, "redis-timeout", o.Redis.Timeout, "bound on each Redis call")
	fs.StringVar(&o.Redis.KeyPrefix, "redis-key-prefix", o.Redis.KeyPrefix, "prefix of every Redis key")
	fs.StringVar(&o.Redis.Clock, "redis-clock", o.Redis.Clock, "time source for Redis decisions: local or server")
	fs.BoolVar(&o.Redis.EnvoyKeys, "redis-envoy-keys", o.Redis.EnvoyKeys, "count fixed windows with envoyproxy/ratelimit's pipelined INCRBY+EXPIRE on its keys (false: with the Lua script)")

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
	oneOf("store", o.Store, "memory", "redis")
	oneOf("log-level", o.LogLevel, "debug", "info", "warn", "error")
	oneOf("log-format", o.LogFormat, "text", "json")
	oneOf("on-store-error", o.OnStoreError, "error", "allow", "deny", "local")
	oneOf("redis-mode", o.Redis.Mode, "single", "cluster", "sentinel")
	oneOf("redis-clock", o.Redis.Clock, "local", "server")
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
	if o.ReloadDelay < 0 {
		bad("reload-delay", "%s is negative", o.ReloadDelay)
	}
	if o.ShutdownTimeout <= 0 {
		bad("shutdown-timeout", "%s must be positive", o.ShutdownTimeout)
	}
	if o.GRPCWorkers < 0 || o.GRPCWorkers > 1<<16 {
		bad("grpc-workers", "%d is outside [0, 65536]", o.GRPCWorkers)
	}
	if o.MemoryMaxEntries < 0 {
		bad("memory-max-entries", "%d is negative", o.MemoryMaxEntries)
	}
	if (o.TLSCert == "") != (o.TLSKey == "") {
		bad("tls-cert", "--tls-cert and --tls-key go together")
	}
	if o.TLSClientCA != "" && o.TLSCert == "" {
		bad("tls-client-ca", "needs --tls-cert and --tls-key")
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
	}
	return errors.Join(errs...)
}
