package app

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"
)

// envoyStatus says what Sluice does with one of envoyproxy/ratelimit's
// environment variables.
type envoyStatus int

const (
	// envoySupported: the variable sets a Sluice option.
	envoySupported envoyStatus = iota
	// envoyNoEffect: accepted and checked; Sluice has no use for the
	// setting (its design makes it moot). Reported at startup when set to
	// something other than envoyproxy/ratelimit's default.
	envoyNoEffect
	// envoyNotYet: accepted and checked; the feature is missing from
	// Sluice. Reported at startup when set to something other than
	// envoyproxy/ratelimit's default.
	envoyNotYet
)

// parsedAs is the Go type envoyproxy/ratelimit parses a variable as;
// every accepted variable is checked against it, used or not.
type parsedAs int

const (
	asString parsedAs = iota
	asBool
	asInt
	asFloat
	asDuration
)

// envoyVar is one of envoyproxy/ratelimit's environment variables.
type envoyVar struct {
	name   string
	def    string // envoyproxy/ratelimit's default
	as     parsedAs
	status envoyStatus
	// set applies the variable's value v (set and non-empty) to the
	// options; nil unless status is envoySupported.
	set func(e *envoyEnv, v string) error
}

// envoyVars is every environment variable envoyproxy/ratelimit reads
// (src/settings/settings.go at f2fb157), in its order. docs/envoy.md's
// table explains each; a test checks the two agree.
var envoyVars = []envoyVar{
	{name: "HOST", def: "0.0.0.0", status: envoySupported, set: hostPort("HOST", "PORT", "http-addr")},
	{name: "PORT", def: "8080", as: asInt, status: envoySupported, set: hostPort("HOST", "PORT", "http-addr")},
	{name: "DEBUG_HOST", def: "0.0.0.0", status: envoySupported, set: hostPort("DEBUG_HOST", "DEBUG_PORT", "debug-addr")},
	{name: "DEBUG_PORT", def: "6070", as: asInt, status: envoySupported, set: hostPort("DEBUG_HOST", "DEBUG_PORT", "debug-addr")},
	{name: "GRPC_HOST", def: "0.0.0.0", status: envoySupported, set: hostPort("GRPC_HOST", "GRPC_PORT", "grpc-addr")},
	{name: "GRPC_PORT", def: "8081", as: asInt, status: envoySupported, set: hostPort("GRPC_HOST", "GRPC_PORT", "grpc-addr")},
	// After GRPC_HOST and GRPC_PORT: a socket wins over them.
	{name: "GRPC_UDS", status: envoySupported, set: grpcUDS},
	{name: "GRPC_MAX_CONNECTION_AGE", def: "24h", as: asDuration, status: envoySupported, set: toFlag("grpc-max-connection-age")},
	{name: "GRPC_MAX_CONNECTION_AGE_GRACE", def: "1h", as: asDuration, status: envoySupported, set: toFlag("grpc-max-connection-age-grace")},
	{name: "GRPC_SERVER_USE_TLS", def: "false", as: asBool, status: envoySupported, set: grpcTLS},
	{name: "GRPC_SERVER_TLS_CERT", status: envoySupported, set: readByGRPCTLS},
	{name: "GRPC_SERVER_TLS_KEY", status: envoySupported, set: readByGRPCTLS},
	{name: "GRPC_CLIENT_TLS_CACERT", status: envoySupported, set: readByGRPCTLS},
	{name: "GRPC_CLIENT_TLS_SAN", status: envoySupported, set: readByGRPCTLS},
	{name: "LOG_LEVEL", def: "WARN", status: envoySupported, set: logLevel},
	{name: "LOG_FORMAT", def: "text", status: envoySupported, set: logFormat},

	{name: "CONFIG_TYPE", def: "FILE", status: envoySupported, set: configType},
	{name: "FORCE_START_WITHOUT_INITIAL_CONFIG", def: "false", as: asBool, status: envoyNoEffect},
	{name: "CONFIG_GRPC_XDS_NODE_ID", def: "default", status: envoySupported, set: toFlag("xds-node-id")},
	{name: "CONFIG_GRPC_XDS_NODE_METADATA", status: envoySupported, set: toFlag("xds-node-metadata")},
	{name: "CONFIG_GRPC_XDS_SERVER_URL", def: "localhost:18000", status: envoySupported, set: toFlag("xds-server-url")},
	{name: "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", def: "3s", as: asDuration, status: envoySupported, set: toFlag("xds-connect-retry-interval")},
	{name: "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", status: envoySupported, set: toFlag("xds-client-headers")},
	{name: "CONFIG_GRPC_XDS_SERVER_USE_TLS", def: "false", as: asBool, status: envoySupported, set: toFlag("xds-server-use-tls")},
	{name: "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", status: envoySupported, set: toFlag("xds-client-tls-cert")},
	{name: "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", status: envoySupported, set: toFlag("xds-client-tls-key")},
	{name: "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", status: envoySupported, set: toFlag("xds-server-tls-cacert")},
	{name: "CONFIG_GRPC_XDS_SERVER_TLS_SAN", status: envoySupported, set: toFlag("xds-server-tls-san")},
	{name: "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", def: "10s", as: asDuration, status: envoySupported, set: toFlag("xds-backoff-initial")},
	{name: "XDS_CLIENT_BACKOFF_MAX_INTERVAL", def: "60s", as: asDuration, status: envoySupported, set: toFlag("xds-backoff-max")},
	{name: "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", def: "0.5", as: asFloat, status: envoyNoEffect},
	{name: "XDS_CLIENT_BACKOFF_JITTER", def: "true", as: asBool, status: envoyNoEffect},
	{name: "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", as: asInt, status: envoySupported, set: toFlag("xds-max-recv-msg-size")},

	// The sink (USE_*, DISABLE_STATS, STATSD_HOST/PORT, PROMETHEUS_ADDR/
	// PATH) is chosen by envoyStats once every variable is read.
	{name: "USE_DOG_STATSD", def: "false", as: asBool, status: envoySupported, set: readByStats},
	{name: "USE_DOG_STATSD_MOGRIFIERS", status: envoySupported, set: toFlag("dogstatsd-mogrifiers")},
	{name: "USE_STATSD", def: "true", as: asBool, status: envoySupported, set: readByStats},
	{name: "STATSD_HOST", def: "localhost", status: envoySupported, set: readByStats},
	{name: "STATSD_PORT", def: "8125", as: asInt, status: envoySupported, set: readByStats},
	// Read by upstream's StatsD client (lyft/gostats), not its settings.
	{name: "STATSD_PROTOCOL", def: "tcp", status: envoySupported, set: readByStats},
	{name: "EXTRA_TAGS", status: envoySupported, set: toFlag("stats-extra-tags")},
	{name: "STATS_FLUSH_INTERVAL", def: "10s", as: asDuration, status: envoySupported, set: toFlag("stats-flush-interval")},
	{name: "DISABLE_STATS", def: "false", as: asBool, status: envoySupported, set: readByStats},
	{name: "USE_PROMETHEUS", def: "false", as: asBool, status: envoySupported, set: readByStats},
	{name: "PROMETHEUS_ADDR", def: ":9090", status: envoySupported, set: readByStats},
	{name: "PROMETHEUS_PATH", def: "/metrics", status: envoySupported, set: readByStats},
	// A custom statsd_exporter mapping needs statsd_exporter: point
	// --statsd-addr at one instead.
	{name: "PROMETHEUS_MAPPER_YAML", status: envoyNotYet},
	{name: "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", def: "false", as: asBool, status: envoySupported, set: toFlag("prometheus-response-time-ms")},

	{name: "RUNTIME_ROOT", def: "/srv/runtime_data/current", status: envoySupported, set: toFlag("runtime-root")},
	{name: "RUNTIME_SUBDIRECTORY", status: envoySupported, set: toFlag("runtime-subdirectory")},
	{name: "RUNTIME_APPDIRECTORY", def: "config", status: envoySupported, set: toFlag("runtime-appdirectory")},
	{name: "RUNTIME_IGNOREDOTFILES", def: "false", as: asBool, status: envoySupported, set: toFlag("runtime-ignore-dotfiles")},
	{name: "RUNTIME_WATCH_ROOT", def: "true", as: asBool, status: envoySupported, set: toFlag("runtime-watch-root")},

	{name: "EXPIRATION_JITTER_MAX_SECONDS", def: "300", as: asInt, status: envoySupported, set: expirationJitter},
	{name: "LOCAL_CACHE_SIZE_IN_BYTES", def: "0", as: asInt, status: envoySupported, set: toFlag("local-cache-size")},
	{name: "NEAR_LIMIT_RATIO", def: "0.8", as: asFloat, status: envoySupported, set: nearLimitRatio},
	{name: "CACHE_KEY_PREFIX", status: envoySupported, set: cacheKeyPrefix},
	{name: "BACKEND_TYPE", def: "redis", status: envoySupported, set: backendType},
	{name: "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", def: "false", as: asBool, status: envoySupported, set: toFlag("stop-cache-key-increment-when-overlimit")},

	{name: "LIMIT_RESPONSE_HEADERS_ENABLED", def: "false", as: asBool, status: envoySupported, set: toFlag("response-headers")},
	{name: "LIMIT_LIMIT_HEADER", def: "RateLimit-Limit", status: envoySupported, set: headerName("response-header-limit")},
	{name: "LIMIT_REMAINING_HEADER", def: "RateLimit-Remaining", status: envoySupported, set: headerName("response-header-remaining")},
	{name: "LIMIT_RESET_HEADER", def: "RateLimit-Reset", status: envoySupported, set: headerName("response-header-reset")},

	// Not envoyproxy/ratelimit's: the variable its users ask for (Envoy
	// #45384), read here beside its own.
	{name: "RETRY_AFTER_HEADER_ENABLED", def: "false", as: asBool, status: envoySupported, set: toFlag("retry-after-header")},

	{name: "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", def: "false", as: asBool, status: envoySupported, set: toFlag("healthy-with-at-least-one-config-loaded")},

	{name: "REDIS_SOCKET_TYPE", def: "unix", status: envoySupported, set: socketType("redis-socket-type")},
	{name: "REDIS_TYPE", def: "SINGLE", status: envoySupported, set: redisType},
	{name: "REDIS_URL", def: "/var/run/nutcracker/ratelimit.sock", status: envoySupported, set: redisURL},
	{name: "REDIS_POOL_SIZE", def: "10", as: asInt, status: envoyNoEffect},
	{name: "REDIS_AUTH", status: envoySupported, set: redisAuth},
	{name: "REDIS_TLS", def: "false", as: asBool, status: envoySupported, set: toFlag("redis-tls")},
	{name: "REDIS_TLS_CLIENT_CERT", status: envoySupported, set: toFlag("redis-tls-cert")},
	{name: "REDIS_TLS_CLIENT_KEY", status: envoySupported, set: toFlag("redis-tls-key")},
	{name: "REDIS_TLS_CACERT", status: envoySupported, set: toFlag("redis-tls-ca")},
	{name: "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", def: "false", as: asBool, status: envoySupported, set: toFlag("redis-tls-skip-hostname-verification")},
	{name: "REDIS_PIPELINE_WINDOW", def: "0", as: asDuration, status: envoySupported, set: toFlag("redis-max-flush-delay")},
	{name: "REDIS_PIPELINE_LIMIT", def: "0", as: asInt, status: envoyNoEffect},
	{name: "REDIS_CLUSTER_PIPELINE_PARALLELISM", def: "1", as: asInt, status: envoyNoEffect},
	{name: "REDIS_PERSECOND", def: "false", as: asBool, status: envoySupported, set: toFlag("redis-persecond")},
	{name: "REDIS_PERSECOND_SOCKET_TYPE", def: "unix", status: envoySupported, set: socketType("redis-persecond-socket-type")},
	{name: "REDIS_PERSECOND_TYPE", def: "SINGLE", status: envoySupported, set: perSecondType},
	{name: "REDIS_PERSECOND_URL", def: "/var/run/nutcracker/ratelimitpersecond.sock", status: envoySupported, set: perSecondURL},
	{name: "REDIS_PERSECOND_POOL_SIZE", def: "10", as: asInt, status: envoyNoEffect},
	{name: "REDIS_PERSECOND_AUTH", status: envoySupported, set: perSecondAuth},
	{name: "REDIS_PERSECOND_TLS", def: "false", as: asBool, status: envoySupported, set: toFlag("redis-persecond-tls")},
	{name: "REDIS_SENTINEL_AUTH", status: envoySupported, set: redisSentinelAuth},
	{name: "REDIS_PERSECOND_SENTINEL_AUTH", status: envoySupported, set: perSecondSentinelAuth},
	{name: "REDIS_PERSECOND_PIPELINE_WINDOW", def: "0", as: asDuration, status: envoySupported, set: perSecondPipelineWindow},
	{name: "REDIS_PERSECOND_PIPELINE_LIMIT", def: "0", as: asInt, status: envoyNoEffect},
	{name: "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", def: "1", as: asInt, status: envoyNoEffect},
	{name: "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", def: "false", as: asBool, status: envoySupported, set: toFlag("redis-health-check-active-connection")},
	{name: "REDIS_TIMEOUT", def: "10s", as: asDuration, status: envoySupported, set: redisTimeout},
	{name: "REDIS_PERSECOND_TIMEOUT", def: "10s", as: asDuration, status: envoySupported, set: perSecondTimeout},
	{name: "REDIS_POOL_ON_EMPTY_BEHAVIOR", def: "WAIT", status: envoySupported, set: poolOnEmpty},
	{name: "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", def: "WAIT", status: envoySupported, set: poolOnEmpty},
	{name: "REDIS_STARTUP_INITIAL_INTERVAL", def: "1s", as: asDuration, status: envoySupported, set: toFlag("redis-startup-initial-interval")},
	{name: "REDIS_STARTUP_MAX_INTERVAL", def: "30s", as: asDuration, status: envoySupported, set: toFlag("redis-startup-max-interval")},
	{name: "REDIS_STARTUP_MAX_ELAPSED_TIME", def: "0", as: asDuration, status: envoySupported, set: toFlag("redis-startup-max-elapsed-time")},

	{name: "MEMCACHE_HOST_PORT", status: envoySupported, set: toFlag("memcache-addrs")},
	{name: "MEMCACHE_MAX_IDLE_CONNS", def: "2", as: asInt, status: envoySupported, set: toFlag("memcache-max-idle-conns")},
	{name: "MEMCACHE_SRV", status: envoySupported, set: toFlag("memcache-srv")},
	{name: "MEMCACHE_SRV_REFRESH", def: "0", as: asDuration, status: envoySupported, set: toFlag("memcache-srv-refresh")},
	{name: "MEMCACHE_TLS", def: "false", as: asBool, status: envoySupported, set: toFlag("memcache-tls")},
	{name: "MEMCACHE_TLS_CLIENT_CERT", status: envoySupported, set: toFlag("memcache-tls-cert")},
	{name: "MEMCACHE_TLS_CLIENT_KEY", status: envoySupported, set: toFlag("memcache-tls-key")},
	{name: "MEMCACHE_TLS_CACERT", status: envoySupported, set: toFlag("memcache-tls-ca")},
	{name: "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", def: "false", as: asBool, status: envoyNotYet},

	{name: "SHADOW_MODE", def: "false", as: asBool, status: envoySupported, set: toFlag("global-shadow-mode")},
	{name: "QUOTA_MODE", def: "false", as: asBool, status: envoySupported, set: toFlag("global-quota-mode")},
	{name: "RESPONSE_DYNAMIC_METADATA", def: "false", as: asBool, status: envoySupported, set: toFlag("response-dynamic-metadata")},
	{name: "MERGE_DOMAIN_CONFIG", def: "false", as: asBool, status: envoySupported, set: toFlag("merge-domain-config")},

	{name: "TRACING_ENABLED", def: "false", as: asBool, status: envoySupported, set: toFlag("tracing")},
	{name: "TRACING_SERVICE_NAME", def: "RateLimit", status: envoySupported, set: toFlag("tracing-service-name")},
	{name: "TRACING_SERVICE_NAMESPACE", status: envoySupported, set: toFlag("tracing-service-namespace")},
	{name: "TRACING_SERVICE_INSTANCE_ID", status: envoySupported, set: toFlag("tracing-service-instance-id")},
	{name: "TRACING_EXPORTER_PROTOCOL", def: "http", status: envoySupported, set: toFlag("tracing-exporter-protocol")},
	{name: "TRACING_SAMPLING_RATE", def: "1", as: asFloat, status: envoySupported, set: toFlag("tracing-sampling-rate")},
}

// EnvoyVariables returns the names of every environment variable
// envoyproxy/ratelimit reads, which applyEnvoyEnv accepts.
func EnvoyVariables() []string {
	names := make([]string, len(envoyVars))
	for i, v := range envoyVars {
		names[i] = v.name
	}
	return names
}

// envoyEnv is the state of one applyEnvoyEnv call.
type envoyEnv struct {
	fs     *flag.FlagSet
	o      *Options
	getenv func(string) string
	cur    string       // the variable being applied
	from   envoySources // what set each flag
}

// envoySources records, for each flag a variable set, the variable and the
// flag value it set.
type envoySources map[string]struct{ variable, value string }

// flag sets a Sluice flag as if given on the command line.
func (e *envoyEnv) flag(name, value string) error {
	if err := e.fs.Set(name, value); err != nil {
		return fmt.Errorf("--%s %q: %w", name, value, err)
	}
	e.from[name] = struct{ variable, value string }{e.cur, e.fs.Lookup(name).Value.String()}
	return nil
}

// isTrue reports whether the boolean variable name is set and true.
func (e *envoyEnv) isTrue(name string) bool {
	b, err := strconv.ParseBool(e.getenv(name))
	return err == nil && b
}

// applyEnvoyEnv reads envoyproxy/ratelimit's environment variables
// (HOST, PORT, REDIS_URL, LOG_LEVEL, …; see docs/envoy.md) through getenv
// and sets the Sluice options they stand for: flags in fs (registered on
// o), or, for secrets that have no flag, o's fields. Call it before the
// SLUICE_ variables and the command line are applied, so that both win.
// A variable left unset or empty keeps Sluice's default. A value
// envoyproxy/ratelimit would refuse is an error naming the variable.
// Variables that change nothing in Sluice are listed in
// o.EnvoyEnvUnsupported, for one warning at startup. The sources it
// returns tell which variable set which flag, for explainSources.
func applyEnvoyEnv(fs *flag.FlagSet, o *Options, getenv func(string) string) (envoySources, error) {
	e := &envoyEnv{fs: fs, o: o, getenv: getenv, from: envoySources{}}
	var errs []error
	anySet := false
	for _, v := range envoyVars {
		val := getenv(v.name)
		if val == "" {
			continue
		}
		// RETRY_AFTER_HEADER_ENABLED is not envoyproxy/ratelimit's: alone,
		// it does not make an environment of its variables.
		anySet = anySet || v.name != "RETRY_AFTER_HEADER_ENABLED"
		if err := checkParses(v.as, val); err != nil {
			errs = append(errs, fmt.Errorf("environment variable %s=%q: %w", v.name, val, err))
			continue
		}
		switch v.status {
		case envoySupported:
			e.cur = v.name
			if err := v.set(e, val); err != nil {
				errs = append(errs, fmt.Errorf("environment variable %s=%q: %w", v.name, val, err))
			}
		case envoyNoEffect, envoyNotYet:
			if !sameValue(v.as, val, v.def) {
				o.EnvoyEnvUnsupported = append(o.EnvoyEnvUnsupported, v.name)
			}
		}
	}
	// envoyproxy/ratelimit sends StatsD unless told otherwise, so an
	// environment of its variables does too.
	if anySet {
		if err := envoyStats(e); err != nil {
			errs = append(errs, err)
		}
	}
	return e.from, errors.Join(errs...)
}

// explainSources adds to each of Validate's errors ("--flag: ...") the
// environment variable that set the flag, when one did and neither the
// flag's SLUICE_ variable nor the command line changed it since.
func explainSources(err error, fs *flag.FlagSet, from envoySources, getenv func(string) string) error {
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
		name, _, ok := strings.Cut(strings.TrimPrefix(e.Error(), "--"), ":")
		src, set := from[name]
		if !ok || !set || getenv(EnvName(name)) != "" || fs.Lookup(name).Value.String() != src.value {
			continue
		}
		out[i] = fmt.Errorf("%w (from environment variable %s=%q)", e, src.variable, getenv(src.variable))
	}
	return errors.Join(out...)
}

// checkParses checks val as envoyproxy/ratelimit would parse it.
func checkParses(as parsedAs, val string) error {
	var err error
	switch as {
	case asBool:
		_, err = strconv.ParseBool(val)
		if err != nil {
			return errors.New("not a boolean (true or false)")
		}
	case asInt:
		_, err = strconv.ParseInt(val, 10, 64)
		if err != nil {
			return errors.New("not an integer")
		}
	case asFloat:
		_, err = strconv.ParseFloat(val, 64)
		if err != nil {
			return errors.New("not a number")
		}
	case asDuration:
		d, err := time.ParseDuration(val)
		if err != nil {
			return errors.New("not a duration (such as 1s, 250ms or 1h)")
		}
		if d < 0 {
			return errors.New("a negative duration")
		}
	}
	return nil
}

// sameValue reports whether val means the same as envoyproxy/ratelimit's
// default def; both parse as as.
func sameValue(as parsedAs, val, def string) bool {
	switch as {
	case asBool:
		a, _ := strconv.ParseBool(val)
		b, _ := strconv.ParseBool(def)
		return a == b
	case asInt:
		a, _ := strconv.ParseInt(val, 10, 64)
		b, _ := strconv.ParseInt(def, 10, 64)
		return a == b
	case asFloat:
		a, _ := strconv.ParseFloat(val, 64)
		b, _ := strconv.ParseFloat(def, 64)
		return a == b
	case asDuration:
		a, _ := time.ParseDuration(val)
		b, _ := time.ParseDuration(def)
		return a == b
	}
	return val == def
}

// toFlag sets the Sluice flag name to the variable's value as it is.
func toFlag(name string) func(e *envoyEnv, v string) error {
	return func(e *envoyEnv, v string) error { return e.flag(name, v) }
}

// nearLimitRatio sets --near-limit-ratio, a share in (0, 1].
func nearLimitRatio(e *envoyEnv, v string) error {
	r, _ := strconv.ParseFloat(v, 64)
	if r <= 0 || r > 1 {
		return errors.New("outside (0, 1]")
	}
	return e.flag("near-limit-ratio", v)
}

// headerName sets the flag to a valid HTTP header name.
func headerName(flagName string) func(e *envoyEnv, v string) error {
	return func(e *envoyEnv, v string) error {
		if !validHeaderName(v) {
			return errors.New("not an HTTP header name")
		}
		return e.flag(flagName, v)
	}
}

// hostPort sets flag to host:port from the two variables, either of which
// may be unset: an unset host keeps the host of the flag's current value
// (Sluice's default, all interfaces for gRPC and HTTP, loopback for
// debug), an unset port keeps its port. "0.0.0.0" is all interfaces.
func hostPort(hostVar, portVar, flagName string) func(e *envoyEnv, v string) error {
	return func(e *envoyEnv, _ string) error {
		curHost, curPort, err := net.SplitHostPort(e.fs.Lookup(flagName).Value.String())
		if err != nil {
			curHost, curPort = "", ""
		}
		host, port := e.getenv(hostVar), e.getenv(portVar)
		if host == "" {
			host = curHost
		}
		if port == "" {
			port = curPort
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			return fmt.Errorf("%s=%q is not a port number (0 to 65535)", portVar, port)
		}
		if host == "0.0.0.0" {
			host = ""
		}
		return e.flag(flagName, net.JoinHostPort(host, port))
	}
}

// grpcUDS serves gRPC on a unix socket instead of GRPC_HOST:GRPC_PORT, as
// envoyproxy/ratelimit does.
func grpcUDS(e *envoyEnv, v string) error {
	return e.flag("grpc-addr", "unix:"+v)
}

// grpcTLS maps GRPC_SERVER_USE_TLS and its files onto Sluice's TLS
// options, for the gRPC listener only, as envoyproxy/ratelimit.
func grpcTLS(e *envoyEnv, v string) error {
	on, _ := strconv.ParseBool(v)
	if !on {
		return nil
	}
	cert, key, ca := e.getenv("GRPC_SERVER_TLS_CERT"), e.getenv("GRPC_SERVER_TLS_KEY"), e.getenv("GRPC_CLIENT_TLS_CACERT")
	// envoyproxy/ratelimit checks GRPC_CLIENT_TLS_SAN only with a client CA.
	if cert == "" || key == "" {
		return errors.New("needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY")
	}
	if err := errors.Join(e.flag("tls-cert", cert), e.flag("tls-key", key), e.flag("http-tls", "false")); err != nil {
		return err
	}
	if ca == "" {
		return nil
	}
	if err := e.flag("tls-client-ca", ca); err != nil {
		return err
	}
	if san := e.getenv("GRPC_CLIENT_TLS_SAN"); san != "" {
		return e.flag("tls-client-san", san)
	}
	return nil
}

// readByGRPCTLS accepts a variable that grpcTLS reads when
// GRPC_SERVER_USE_TLS is true, and that is ignored otherwise.
func readByGRPCTLS(*envoyEnv, string) error { return nil }

// readByStats marks the variables envoyStats reads.
func readByStats(*envoyEnv, string) error { return nil }

// envoyStats picks the statistics sink as envoyproxy/ratelimit does: none
// with DISABLE_STATS; else DogStatsD (USE_DOG_STATSD, over UDP as
// upstream's DogStatsD client), StatsD (USE_STATSD, true unless set false)
// to STATSD_HOST:STATSD_PORT over STATSD_PROTOCOL, or Prometheus
// (USE_PROMETHEUS) on PROMETHEUS_ADDR and PROMETHEUS_PATH; upstream
// refuses to start with more than one. Sluice's own metrics stay in every
// case.
func envoyStats(e *envoyEnv) error {
	if e.isTrue("DISABLE_STATS") {
		return nil
	}
	statsd := e.getenv("USE_STATSD") == "" || e.isTrue("USE_STATSD")
	dog, prom := e.isTrue("USE_DOG_STATSD"), e.isTrue("USE_PROMETHEUS")
	if n := btoi(statsd) + btoi(dog) + btoi(prom); n > 1 {
		return fmt.Errorf("environment variables USE_DOG_STATSD=%q, USE_STATSD=%q (true when unset) and USE_PROMETHEUS=%q: envoyproxy/ratelimit uses one stats sink; set USE_STATSD=false with the others",
			e.getenv("USE_DOG_STATSD"), e.getenv("USE_STATSD"), e.getenv("USE_PROMETHEUS"))
	}
	host, port := e.getenv("STATSD_HOST"), e.getenv("STATSD_PORT")
	if host == "" {
		host = "localhost"
	}
	if port == "" {
		port = "8125"
	} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("environment variable STATSD_PORT=%q: not a port (1 to 65535)", port)
	}
	switch {
	case dog:
		e.cur = "USE_DOG_STATSD"
		return errors.Join(e.flag("statsd-addr", net.JoinHostPort(host, port)), e.flag("dogstatsd", "true"))
	case statsd:
		e.cur = "USE_STATSD"
		var err error
		switch p := e.getenv("STATSD_PROTOCOL"); p {
		case "":
		case "tcp", "udp":
			err = e.flag("statsd-protocol", p)
		default:
			return fmt.Errorf("environment variable STATSD_PROTOCOL=%q: not tcp or udp", p)
		}
		return errors.Join(err, e.flag("statsd-addr", net.JoinHostPort(host, port)))
	case prom:
		e.cur = "USE_PROMETHEUS"
		addr, path := e.getenv("PROMETHEUS_ADDR"), e.getenv("PROMETHEUS_PATH")
		if addr == "" {
			addr = ":9090"
		}
		if path == "" {
			path = "/metrics"
		}
		return errors.Join(e.flag("prometheus-compat", "true"), e.flag("prometheus-addr", addr), e.flag("prometheus-path", path))
	}
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// logLevel maps logrus's levels onto Sluice's: trace is debug, fatal and
// panic are error. Case does not matter.
func logLevel(e *envoyEnv, v string) error {
	level, ok := map[string]string{
		"trace": "debug", "debug": "debug", "info": "info", "warn": "warn", "warning": "warn",
		"error": "error", "fatal": "error", "panic": "error",
	}[strings.ToLower(v)]
	if !ok {
		return errors.New("not a log level (trace, debug, info, warn, error, fatal or panic)")
	}
	return e.flag("log-level", level)
}

// logFormat maps text to text and json to json-envoy, JSON with
// envoyproxy/ratelimit's field names.
func logFormat(e *envoyEnv, v string) error {
	switch strings.ToLower(v) {
	case "text":
		return e.flag("log-format", "text")
	case "json":
		return e.flag("log-format", "json-envoy")
	}
	return errors.New("not a log format (text or json)")
}

// backendType selects the store: redis needs REDIS_URL.
func backendType(e *envoyEnv, v string) error {
	switch strings.ToLower(v) {
	case "redis":
		if e.getenv("REDIS_URL") == "" {
			return errors.New("needs REDIS_URL (Sluice has no default Redis address)")
		}
		return e.flag("store", "redis")
	case "memcache":
		return e.flag("store", "memcache")
	}
	return errors.New("not a backend (redis or memcache)")
}

// configType selects where the descriptor config comes from.
func configType(e *envoyEnv, v string) error {
	switch t := strings.ToUpper(v); t {
	case ConfigTypeFile, ConfigTypeXDS:
		return e.flag("config-type", t)
	}
	return fmt.Errorf("not a config type (%s or %s)", ConfigTypeFile, ConfigTypeXDS)
}

// cacheKeyPrefix starts every counter key, on Redis and on memcached.
func cacheKeyPrefix(e *envoyEnv, v string) error {
	return errors.Join(e.flag("redis-key-prefix", v), e.flag("memcache-key-prefix", v))
}

// expirationJitter sets the expiry jitter of the windows, in seconds, on
// memcached and Redis.
func expirationJitter(e *envoyEnv, v string) error {
	n, _ := strconv.ParseInt(v, 10, 64)
	if n < 0 {
		return errors.New("must be >= 0")
	}
	d := strconv.FormatInt(n, 10) + "s"
	return errors.Join(e.flag("memcache-expiration-jitter", d), e.flag("redis-expiration-jitter", d))
}

// socketType sets the socket type of a Redis, tcp or unix. Unset, the
// address decides (redisURL, perSecondURL): a path is a unix socket,
// host:port is TCP (envoyproxy/ratelimit's default is unix, with which a
// host:port address could never work).
func socketType(flagName string) func(e *envoyEnv, v string) error {
	return func(e *envoyEnv, v string) error {
		switch t := strings.ToLower(v); t {
		case "tcp", "unix":
			return e.flag(flagName, t)
		}
		return errors.New("not a socket type (tcp or unix)")
	}
}

// perSecondType sets the per-second Redis's topology.
func perSecondType(e *envoyEnv, v string) error {
	switch m := strings.ToLower(v); m {
	case "single", "cluster", "sentinel":
		return e.flag("redis-persecond-mode", m)
	}
	return errors.New("not a Redis type (SINGLE, CLUSTER or SENTINEL)")
}

// perSecondURL sets the per-second Redis's addresses: with
// REDIS_PERSECOND_TYPE=sentinel the master's name, then the sentinels.
func perSecondURL(e *envoyEnv, v string) error {
	items := splitList(v)
	if strings.EqualFold(e.getenv("REDIS_PERSECOND_TYPE"), "sentinel") {
		if len(items) < 2 {
			return errors.New("with REDIS_PERSECOND_TYPE=SENTINEL, want the master name then one or more sentinels: name,host:port,...")
		}
		if err := e.flag("redis-persecond-master", items[0]); err != nil {
			return err
		}
		items = items[1:]
	}
	if len(items) == 0 {
		return errors.New("no address")
	}
	if e.getenv("REDIS_PERSECOND_SOCKET_TYPE") == "" && strings.HasPrefix(items[0], "/") {
		if err := e.flag("redis-persecond-socket-type", "unix"); err != nil {
			return err
		}
	}
	return e.flag("redis-persecond-addr", strings.Join(items, ","))
}

// perSecondAuth sets the per-second Redis's password, and its ACL user
// when given as user:password.
func perSecondAuth(e *envoyEnv, v string) error {
	user, pw := splitAuth(v)
	e.o.PerSecondRedis.Password = pw
	if user != "" {
		return e.flag("redis-persecond-username", user)
	}
	return nil
}

// perSecondSentinelAuth sets the credentials for the per-second Redis's
// sentinels.
func perSecondSentinelAuth(e *envoyEnv, v string) error {
	e.o.PerSecondRedis.SentinelUsername, e.o.PerSecondRedis.SentinelPassword = splitAuth(v)
	return nil
}

// perSecondPipelineWindow is REDIS_PIPELINE_WINDOW for the per-second
// Redis (it has no flag).
func perSecondPipelineWindow(e *envoyEnv, v string) error {
	d, _ := time.ParseDuration(v)
	e.o.PerSecondRedis.MaxFlushDelay = d
	return nil
}

// perSecondTimeout sets --redis-persecond-timeout within the Redis store's
// range.
func perSecondTimeout(e *envoyEnv, v string) error {
	d, _ := time.ParseDuration(v)
	if d < time.Millisecond || d > time.Minute {
		return errors.New("outside Sluice's range for a Redis call, 1ms to 1m")
	}
	return e.flag("redis-persecond-timeout", v)
}

// redisType sets the Redis topology.
func redisType(e *envoyEnv, v string) error {
	switch m := strings.ToLower(v); m {
	case "single", "cluster", "sentinel":
		return e.flag("redis-mode", m)
	}
	return errors.New("not a Redis type (SINGLE, CLUSTER or SENTINEL)")
}

// redisURL sets the Redis addresses and selects the Redis store, unless
// BACKEND_TYPE names another. With REDIS_TYPE=sentinel the first item is
// the master's name and the others are sentinels.
func redisURL(e *envoyEnv, v string) error {
	items := splitList(v)
	if strings.EqualFold(e.getenv("REDIS_TYPE"), "sentinel") {
		if len(items) < 2 {
			return errors.New("with REDIS_TYPE=SENTINEL, want the master name then one or more sentinels: name,host:port,...")
		}
		if err := e.flag("redis-master", items[0]); err != nil {
			return err
		}
		items = items[1:]
	}
	if len(items) == 0 {
		return errors.New("no address")
	}
	if e.getenv("REDIS_SOCKET_TYPE") == "" && strings.HasPrefix(items[0], "/") {
		if err := e.flag("redis-socket-type", "unix"); err != nil {
			return err
		}
	}
	if bt := e.getenv("BACKEND_TYPE"); bt != "" && !strings.EqualFold(bt, "redis") {
		return e.flag("redis-addr", strings.Join(items, ","))
	}
	return errors.Join(e.flag("redis-addr", strings.Join(items, ",")), e.flag("store", "redis"))
}

// splitAuth splits "user:password" or "password".
func splitAuth(v string) (user, password string) {
	if u, p, ok := strings.Cut(v, ":"); ok {
		return u, p
	}
	return "", v
}

// redisAuth sets the Redis password, and the ACL user when given as
// user:password.
func redisAuth(e *envoyEnv, v string) error {
	user, pw := splitAuth(v)
	e.o.Redis.Password = pw
	if user != "" {
		return e.flag("redis-username", user)
	}
	return nil
}

// redisSentinelAuth sets the credentials for the sentinels themselves.
func redisSentinelAuth(e *envoyEnv, v string) error {
	e.o.Redis.SentinelUsername, e.o.Redis.SentinelPassword = splitAuth(v)
	return nil
}

// redisTimeout sets --redis-timeout within the Redis store's range.
func redisTimeout(e *envoyEnv, v string) error {
	d, _ := time.ParseDuration(v)
	if d < time.Millisecond || d > time.Minute {
		return errors.New("outside Sluice's range for a Redis call, 1ms to 1m")
	}
	return e.flag("redis-timeout", v)
}

// poolOnEmpty accepts WAIT, the only behaviour envoyproxy/ratelimit still
// supports (and Sluice's: a call waits for its pipelined connection).
func poolOnEmpty(_ *envoyEnv, v string) error {
	if strings.EqualFold(v, "WAIT") {
		return nil
	}
	return errors.New("only WAIT is supported (as in envoyproxy/ratelimit since radix v4)")
}

// envoyLogAttrs renames slog's JSON fields to the names
// envoyproxy/ratelimit's logrus JSON formatter writes: @timestamp
// (RFC 3339 with nanoseconds), level (debug, info, warning, error) and
// @message.
func envoyLogAttrs(groups []string, a slog.Attr) slog.Attr {
	if len(groups) > 0 {
		return a
	}
	switch a.Key {
	case slog.TimeKey:
		return slog.String("@timestamp", a.Value.Time().Format(time.RFC3339Nano))
	case slog.MessageKey:
		return slog.Attr{Key: "@message", Value: a.Value}
	case slog.LevelKey:
		level, _ := a.Value.Any().(slog.Level)
		name := "error"
		switch {
		case level < slog.LevelInfo:
			name = "debug"
		case level < slog.LevelWarn:
			name = "info"
		case level < slog.LevelError:
			name = "warning"
		}
		return slog.String("level", name)
	}
	return a
}
