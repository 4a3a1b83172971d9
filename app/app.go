package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/descriptors"
	"github.com/sluice-rl/sluice/internal/h2grpc"
	"github.com/sluice-rl/sluice/internal/tracing"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/server"
	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/memory"
)

// App is one running Sluice service. Create it with New, then Start (or
// Run); it is safe for concurrent use.
type App struct {
	opts     Options
	log      *slog.Logger
	clock    clock.Clock
	registry *prometheus.Registry

	store   store.Store
	limiter *limiter.Limiter
	rls     *server.RLS
	health  *health.Server
	// draining is set on a stop signal: the health checks answer
	// unhealthy from then on.
	draining atomic.Bool

	reloads      *prometheus.CounterVec
	lastReload   *prometheus.GaugeVec
	limitsLoaded *prometheus.GaugeVec

	limits atomic.Pointer[limits.Set] // from the files

	overrides      *server.Overrides // runtime overrides, over limits; see overrides.go
	overridesState overridesState    // of the first read, in New
	stopOverrides  func()            // stops the refresh; nil before Start

	configStatus configStatus // the descriptor config's last load, for the dashboard

	reloadMu sync.Mutex    // serialises reloads
	reloaded chan struct{} // signalled after every reload, so the watcher follows moved paths

	grpcServer  grpcServer
	httpServer  *http.Server
	debugServer *http.Server
	adminServer *http.Server  // nil without --admin-addr
	admin       *server.Admin // nil without --admin-addr
	listeners   []net.Listener
	grpcLn      net.Listener
	httpLn      net.Listener
	debugLn     net.Listener
	adminLn     net.Listener

	stopWatch func()
	stopXDS   func() // stops the xDS client; nil without one

	tracing *tracing.Provider // nil when tracing is off
	tracer  *tracing.Tracer   // nil when tracing is off

	metrics    *server.Metrics    // the RLS's statistics, read by every sink
	requestLog *server.RequestLog // nil without --request-log
	sinks      *statsSinks        // StatsD and the Prometheus compatibility series
}

// NewLogger builds the logger the options ask for, writing to w.
func NewLogger(o Options, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(o.LogLevel))
	ho := &slog.HandlerOptions{Level: level}
	switch o.LogFormat {
	case "json":
		return slog.New(slog.NewJSONHandler(w, ho))
	case "json-envoy":
		ho.ReplaceAttr = envoyLogAttrs
		return slog.New(slog.NewJSONHandler(w, ho))
	}
	return slog.New(slog.NewTextHandler(w, ho))
}

// Deps are what a service gets from its embedder rather than from
// options. Every field may be left zero.
type Deps struct {
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Clock defaults to the real clock.
	Clock clock.Clock
	// Store, when set, is used instead of the one the options describe; the
	// service closes it on shutdown.
	Store store.Store
}

// New builds the service from o: it loads every configuration file (a bad
// one is an error here; later reloads keep the running set) and connects
// the store.
func New(o Options, deps Deps) (*App, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	log, clk := deps.Logger, deps.Clock
	if log == nil {
		log = slog.Default()
	}
	if clk == nil {
		clk = clock.New()
	}
	a := &App{opts: o, log: log, clock: clk, registry: prometheus.NewRegistry(), reloaded: make(chan struct{}, 1)}
	if o.ConfigType == ConfigTypeXDS && o.descriptorPath() != "" {
		log.Warn("--config and --runtime-root are ignored: the descriptor config comes from xDS", "config", o.descriptorPath())
		a.opts.ConfigPath, a.opts.RuntimeRoot = "", ""
	}
	if len(o.EnvoyEnvUnsupported) > 0 {
		log.Warn("envoyproxy/ratelimit environment variables accepted but without effect in Sluice; see docs/envoy.md",
			"variables", strings.Join(o.EnvoyEnvUnsupported, ", "))
	}
	a.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sluice", Name: "config_reloads_total",
		Help: "Configuration loads by kind and result. Label kind: descriptors, limits. Label result: success, failure.",
	}, []string{"kind", "result"})
	a.lastReload = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "sluice", Name: "config_last_reload_successful",
		Help: "1 if the last load of the configuration kind succeeded, 0 if it failed and the previous one is still in use. Label kind: descriptors, limits.",
	}, []string{"kind"})
	a.limitsLoaded = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "sluice", Name: "limits_loaded",
		Help: "Key-value limits in force. Label kind: default, override.",
	}, []string{"kind"})
	a.registry.MustRegister(a.reloads, a.lastReload, a.limitsLoaded)

	st := deps.Store
	if st == nil {
		var err error
		if st, err = a.newStore(); err != nil {
			return nil, err
		}
	}
	a.store = st
	a.limiter = limiter.NewWithOptions(st, clk, limiter.Options{
		LocalCacheBytes:            o.LocalCacheSize,
		StopIncrementWhenOverLimit: o.StopCacheKeyIncrementWhenOverLimit,
	})
	var tracer *tracing.Tracer
	if t := o.Tracing; t.Enabled {
		p, err := tracing.NewProvider(context.Background(), tracing.Options{
			Protocol: t.ExporterProtocol, ServiceName: t.ServiceName, ServiceNamespace: t.ServiceNamespace,
			ServiceInstanceID: t.ServiceInstanceID, SamplingRate: t.SamplingRate,
		})
		if err != nil {
			_ = st.Close()
			return nil, err
		}
		a.tracing, a.tracer = p, p.Tracer()
		tracer = a.tracer
		a.limiter.TraceStore(tracer, o.Store)
		log.Info("tracing on", "protocol", t.ExporterProtocol, "service", t.ServiceName, "sampling_rate", t.SamplingRate)
	}
	a.metrics = server.NewMetrics(a.registry)
	a.registerHTTPMetrics()
	sinks, err := newStatsSinks(o.Stats, a.metrics.Stats(), a.registry, a)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	a.sinks = sinks
	var recordRequest func(time.Time, *rlsv3.RateLimitRequest)
	if o.RequestLog != "" {
		l, err := server.OpenRequestLog(server.RequestLogOptions{Path: o.RequestLog, Sample: o.RequestLogSample, Registerer: a.registry, Logger: log})
		if err != nil {
			_ = st.Close()
			return nil, fmt.Errorf("--request-log: %w", err)
		}
		a.requestLog, recordRequest = l, l.Record
	}
	a.rls = server.NewRLS(server.RLSOptions{
		Limiter:             a.limiter,
		Clock:               clk,
		Metrics:             a.metrics,
		NearLimitRatio:      o.NearLimitRatio,
		GlobalShadowMode:    o.GlobalShadowMode,
		GlobalQuotaMode:     o.GlobalQuotaMode,
		ResponseHeaders:     o.ResponseHeaders,
		LimitHeader:         o.ResponseHeaderLimit,
		RemainingHeader:     o.ResponseHeaderRemaining,
		ResetHeader:         o.ResponseHeaderReset,
		DynamicMetadata:     o.ResponseDynamicMetadata,
		Logger:              log,
		Tracer:              tracer,
		MaxDescriptors:      o.MaxDescriptors,
		RetryAfterHeader:    o.RetryAfterHeader,
		IgnoreRequestLimits: !o.RequestLimits,
		IgnoreNegativeHits:  !o.NegativeHits,
		MaxEntries:          o.MaxDescriptorEntries,
		MaxEntryBytes:       o.MaxDescriptorEntryBytes,
		RequestLog:          recordRequest,
	})
	if err := errors.Join(a.loadDescriptors(), a.loadLimits()); err != nil {
		_ = st.Close()
		_ = a.closeRequestLog(context.Background())
		a.stopTracing(context.Background())
		return nil, err
	}
	a.newOverrides()
	return a, nil
}

// Registry returns the service's metrics registry.
func (a *App) Registry() *prometheus.Registry { return a.registry }

// Limiter returns the service's limiter.
func (a *App) Limiter() *limiter.Limiter { return a.limiter }

// RLS returns the Envoy rate limit service.
func (a *App) RLS() *server.RLS { return a.rls }

// loadDescriptors (re)loads the descriptor configuration and swaps it in
// when valid.
func (a *App) loadDescriptors() error {
	path := a.opts.descriptorPath()
	if path == "" {
		// With xDS there is no config, and the service is not ready, until
		// the management server sends one.
		if a.rls.Config() == nil && a.opts.ConfigType != ConfigTypeXDS {
			cfg, _ := descriptors.New()
			a.rls.SetConfig(cfg)
		}
		return nil
	}
	cfg, err := descriptors.LoadWith(path, a.opts.descriptorLoadOptions())
	a.metrics.Stats().ConfigLoad(err == nil)
	a.configStatus.record(a.clock.Now(), err)
	if err != nil {
		a.reloads.WithLabelValues("descriptors", "failure").Inc()
		a.lastReload.WithLabelValues("descriptors").Set(0)
		return fmt.Errorf("load descriptor config %s: %w", path, err)
	}
	a.rls.SetConfig(cfg)
	a.reloads.WithLabelValues("descriptors", "success").Inc()
	a.lastReload.WithLabelValues("descriptors").Set(1)
	a.log.Info("descriptor config loaded", "path", path, "domains", len(cfg.Domains()))
	return nil
}

// Reload re-reads every configuration file. A file that fails to load is
// logged and leaves the running configuration in place; the error is
// returned too.
func (a *App) Reload() error {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	var errs []error
	if err := a.loadDescriptors(); err != nil {
		a.log.Error("config reload failed, keeping the running config", "err", err)
		errs = append(errs, err)
	}
	if err := a.loadLimits(); err != nil {
		a.log.Error("limits reload failed, keeping the running limits", "err", err)
		errs = append(errs, err)
	}
	select {
	case a.reloaded <- struct{}{}:
	default: // the watcher has a signal pending already
	}
	return errors.Join(errs...)
}

// Ready reports whether the service is healthy, as envoyproxy/ratelimit
// judges it: not shutting down; a configuration loaded, with at least one
// domain under --healthy-with-at-least-one-config-loaded; and the store
// answering, unless the --on-store-error policy answers for it (allow or
// local) and --redis-health-check-active-connection is off.
func (a *App) Ready(ctx context.Context) error {
	if a.draining.Load() {
		return errors.New("shutting down")
	}
	cfg := a.rls.Config()
	if cfg == nil {
		return errors.New("no configuration loaded")
	}
	if a.opts.HealthyWithConfig && len(cfg.Domains()) == 0 {
		return errors.New("no domain loaded (--healthy-with-at-least-one-config-loaded)")
	}
	failsOpen := a.opts.OnStoreError == "allow" || a.opts.OnStoreError == "local"
	if a.opts.Store != "memory" && failsOpen && !a.opts.Redis.HealthCheckActiveConnection {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := a.store.Ping(ctx); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// Start listens on the configured addresses and serves in the background.
// An address of ":0" picks a free port; the Addr methods tell which.
func (a *App) Start() error {
	listen := func(addr string) (net.Listener, error) {
		if addr == "" || addr == "off" {
			return nil, nil
		}
		network := "tcp"
		if path, ok := strings.CutPrefix(addr, "unix:"); ok {
			network, addr = "unix", path
			// A socket left by a process that died is in the way; a file
			// that is not a socket is not ours to remove.
			if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
				_ = os.Remove(path)
			}
		}
		raw, err := net.Listen(network, addr)
		if err != nil {
			return nil, err
		}
		ln := guardListener(raw, a.opts.MaxConnections)
		a.listeners = append(a.listeners, ln)
		return ln, nil
	}
	var err error
	if a.grpcLn, err = listen(a.opts.GRPCAddr); err != nil {
		a.closeListeners()
		return fmt.Errorf("--grpc-addr: %w", err)
	}
	if a.httpLn, err = listen(a.opts.HTTPAddr); err != nil {
		a.closeListeners()
		return fmt.Errorf("--http-addr: %w", err)
	}
	if a.debugLn, err = listen(a.opts.DebugAddr); err != nil {
		a.closeListeners()
		return fmt.Errorf("--debug-addr: %w", err)
	}
	if a.opts.adminOn() {
		bind, _, err := adminListenAddr(a.opts.AdminAddr)
		if err == nil {
			a.adminLn, err = listen(bind)
		}
		if err != nil {
			a.closeListeners()
			return fmt.Errorf("--admin-addr: %w", err)
		}
	}

	var grpcOpts []grpc.ServerOption
	var tlsConfig *tls.Config
	if a.opts.TLSCert != "" {
		r, err := newCertReloader(a.opts.TLSCert, a.opts.TLSKey, a.opts.TLSClientCA, a.clock, func(err error) {
			a.log.Error("TLS files changed but failed to load; keeping the previous ones", "err", err)
		})
		if err != nil {
			a.closeListeners()
			return err
		}
		tlsConfig = r.config()
		if san := a.opts.TLSClientSAN; san != "" {
			requireClientSAN(tlsConfig, san)
		}
	}
	a.health = health.NewServer()
	// A request that does not decode answers InvalidArgument, not Internal.
	codec := newRequestCodec()
	if a.opts.GRPCServer == "grpc-go" {
		if tlsConfig != nil {
			grpcOpts = append(grpcOpts, grpc.Creds(credentials.NewTLS(tlsConfig)))
		}
		// Zero is no limit in keepalive.ServerParameters too.
		grpcOpts = append(grpcOpts,
			grpc.KeepaliveParams(keepalive.ServerParameters{
				MaxConnectionAge:      a.opts.GRPCMaxConnectionAge,
				MaxConnectionAgeGrace: a.opts.GRPCMaxConnectionAgeGrace,
				MaxConnectionIdle:     a.opts.GRPCMaxConnectionIdle,
			}),
			grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: a.opts.GRPCKeepaliveMinTime, PermitWithoutStream: true}),
			grpc.MaxConcurrentStreams(uint32(a.opts.GRPCMaxConcurrentStreams)),
			grpc.ConnectionTimeout(a.opts.HTTPReadTimeout),
		)
		// Rate limit messages are small: fixed flow-control windows larger
		// than any call needs, which also turns off grpc-go's
		// bandwidth-estimating pings.
		grpcOpts = append(grpcOpts, grpc.InitialWindowSize(grpcWindow), grpc.InitialConnWindowSize(grpcConnWindow))
		bounds := &grpcGoBounds{maxStreams: int64(a.opts.GRPCMaxStreams), requestTimeout: a.opts.HTTPReadTimeout, conns: map[any]int64{}}
		grpcOpts = append(grpcOpts, bounds.options()...)
		a.registerGRPCMetrics(nil, bounds)
		grpcOpts = append(grpcOpts, codec.interceptors()...)
		if a.opts.GRPCWorkers > 0 {
			grpcOpts = append(grpcOpts, grpc.NumStreamWorkers(uint32(a.opts.GRPCWorkers)))
		}
		a.grpcServer = grpc.NewServer(grpcOpts...)
	} else {
		// The same settings, for Sluice's own transport.
		a.grpcServer = h2grpc.NewServer(h2grpc.Options{
			TLS:                   tlsConfig,
			MaxConcurrentStreams:  uint32(a.opts.GRPCMaxConcurrentStreams),
			MaxStreams:            a.opts.GRPCMaxStreams,
			MaxPendingBytes:       a.opts.GRPCMaxPendingBytes,
			InitialWindowSize:     grpcWindow,
			InitialConnWindowSize: grpcConnWindow,
			MaxConnectionAge:      a.opts.GRPCMaxConnectionAge,
			MaxConnectionAgeGrace: a.opts.GRPCMaxConnectionAgeGrace,
			MaxConnectionIdle:     a.opts.GRPCMaxConnectionIdle,
			KeepaliveMinTime:      a.opts.GRPCKeepaliveMinTime,
			HandshakeTimeout:      a.opts.HTTPReadTimeout,
			RequestTimeout:        a.opts.HTTPReadTimeout,
			WriteTimeout:          a.opts.HTTPWriteTimeout,
			Codec:                 codec,
			// No unary interceptor: the codec answers a unary request that
			// does not decode itself (UnmarshalReleasing).
			Stream:  []grpc.StreamServerInterceptor{codec.stream},
			Workers: a.opts.GRPCWorkers,
			// The memory store never blocks: its calls run where they are read.
			Inline: isMemoryStore(a.store),
			Logger: a.log,
		})
		a.registerGRPCMetrics(a.grpcServer.(*h2grpc.Server), nil)
	}
	rlsv3.RegisterRateLimitServiceServer(a.grpcServer, a.rls)
	if hs, ok := a.grpcServer.(*h2grpc.Server); ok && a.opts.GRPCBatch && !isMemoryStore(a.store) && a.tracer == nil {
		hs.HandleBatch(rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, a.rlsBatch())
	}
	admin, err := a.opts.kvAdmin()
	if err != nil {
		return err
	}
	kv := server.NewKV(server.KVOptions{Limiter: a.limiter, Clock: a.clock, Limits: a.Limits, Registerer: a.registry, Logger: a.log, Tracer: a.tracer, Admin: admin, RetryJitter: a.opts.KVRetryAfterJitter,
		Overrides: a.overrides})
	sluicev1.RegisterLimitsServer(a.grpcServer, kv)
	sluicev1.RegisterOverridesServer(a.grpcServer, kv.OverridesGRPC())
	healthpb.RegisterHealthServer(a.grpcServer, healthService{Server: a.health, a: a})
	a.setHealth(a.Ready(context.Background()) == nil)

	// The admin listener has TLS whenever --tls-cert is set, on a copy of
	// the config: each http.Server adjusts its own.
	var adminTLS *tls.Config
	if tlsConfig != nil {
		adminTLS = tlsConfig.Clone()
	}
	mux := http.NewServeMux()
	mux.Handle("/json", server.JSONHandler(a.rls))
	mux.Handle("/v1/", server.KVHTTPHandler(kv))
	mux.Handle("GET /healthcheck", server.HealthHandler(a.checkHealth))
	if !a.opts.HTTPTLS {
		tlsConfig = nil // TLS on gRPC only
	}
	// net/http's own complaints (TLS handshakes, bad requests) go through
	// the service's logger, so --log-format json stays JSON.
	httpLog := slog.NewLogLogger(a.log.Handler(), slog.LevelWarn)
	// Slow clients are cut off (docs/operations.md): the whole request
	// must arrive within the read timeout, the answer leave within the
	// write timeout. The debug listener has no write timeout: its CPU
	// profiles and traces take as long as asked.
	a.httpServer = &http.Server{Handler: mux, TLSConfig: tlsConfig, ErrorLog: httpLog,
		ReadHeaderTimeout: a.opts.HTTPReadTimeout, ReadTimeout: a.opts.HTTPReadTimeout,
		WriteTimeout: a.opts.HTTPWriteTimeout, IdleTimeout: a.opts.HTTPIdleTimeout, MaxHeaderBytes: a.opts.HTTPMaxHeaderBytes}
	a.debugServer = &http.Server{
		Handler:           server.DebugHandler(a.registry, func() string { return a.rls.Config().String() }, a.dashboard()),
		MaxHeaderBytes:    a.opts.HTTPMaxHeaderBytes,
		ReadHeaderTimeout: a.opts.HTTPReadTimeout,
		ReadTimeout:       a.opts.HTTPReadTimeout,
		IdleTimeout:       a.opts.HTTPIdleTimeout,
		ErrorLog:          httpLog,
	}

	if a.adminLn != nil {
		if a.admin, a.adminServer, err = a.newAdmin(adminTLS, httpLog); err != nil {
			a.closeListeners()
			return err
		}
	}

	if err := a.startXDS(); err != nil {
		a.closeListeners()
		return err
	}
	if err := a.sinks.start(a.opts.Stats, a); err != nil {
		a.closeListeners()
		return err
	}
	if a.grpcLn != nil {
		go func() { _ = a.grpcServer.Serve(a.grpcLn) }()
	}
	if a.httpLn != nil {
		if tlsConfig != nil {
			go func() { _ = a.httpServer.ServeTLS(a.httpLn, "", "") }()
		} else {
			go func() { _ = a.httpServer.Serve(a.httpLn) }()
		}
	}
	if a.debugLn != nil {
		go func() { _ = a.debugServer.Serve(a.debugLn) }()
	}
	if a.adminLn != nil {
		if adminTLS != nil {
			go func() { _ = a.adminServer.ServeTLS(a.adminLn, "", "") }()
		} else {
			go func() { _ = a.adminServer.Serve(a.adminLn) }()
		}
	}
	a.stopOverrides = a.startOverrides()
	stop, err := a.watch()
	if err != nil {
		a.log.Warn("config files will not be watched; reload with SIGHUP", "err", err)
	}
	a.stopWatch = stop
	a.log.Info("sluice serving", "grpc", a.GRPCAddr(), "http", a.HTTPAddr(), "debug", a.DebugAddr(), "admin", a.AdminAddr(), "store", a.opts.Store,
		"request_limits", a.opts.RequestLimits, "negative_hits", a.opts.NegativeHits)
	return nil
}

func (a *App) closeListeners() {
	for _, ln := range a.listeners {
		_ = ln.Close()
	}
}

func addrOf(ln net.Listener) string {
	if ln == nil {
		return ""
	}
	return ln.Addr().String()
}

// GRPCAddr is the gRPC listener's address once started.
func (a *App) GRPCAddr() string { return addrOf(a.grpcLn) }

// HTTPAddr is the HTTP listener's address once started.
func (a *App) HTTPAddr() string { return addrOf(a.httpLn) }

// DebugAddr is the debug listener's address once started.
func (a *App) DebugAddr() string { return addrOf(a.debugLn) }

// AdminAddr is the admin listener's address once started; "" when
// --admin-addr is off.
func (a *App) AdminAddr() string { return addrOf(a.adminLn) }

// Admin is the admin listener's front door once started; nil when
// --admin-addr is off. Features of the service mount their handlers and
// gRPC services on it in Start (see newAdmin), before it serves.
func (a *App) Admin() *server.Admin { return a.admin }

// Shutdown stops accepting calls, lets in-flight ones finish until ctx
// ends, then closes the store.
func (a *App) Shutdown(ctx context.Context) error {
	a.draining.Store(true)
	if a.stopWatch != nil {
		a.stopWatch()
	}
	if a.stopXDS != nil {
		a.stopXDS()
	}
	if a.stopOverrides != nil {
		a.stopOverrides()
	}
	if a.health != nil {
		a.health.Shutdown()
	}
	var wg sync.WaitGroup
	var errs []error
	var mu sync.Mutex
	addErr := func(err error) {
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}
	if a.grpcServer != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := make(chan struct{})
			go func() { a.grpcServer.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-ctx.Done():
				a.grpcServer.Stop()
				addErr(fmt.Errorf("grpc: in-flight calls cut off: %w", ctx.Err()))
			}
		}()
	}
	for _, s := range []*http.Server{a.httpServer, a.debugServer, a.adminServer} {
		if s == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Shutdown(ctx); err != nil {
				_ = s.Close()
				addErr(err)
			}
		}()
	}
	// Connections that have sent nothing hold no call, but would keep the
	// servers waiting (net/http 5 s, grpc-go until the handshake times
	// out): close them so that an idle service stops at once.
	for _, ln := range a.listeners {
		if g, ok := ln.(*connGuard); ok {
			g.closeSilent()
		}
	}
	wg.Wait()
	addErr(a.closeRequestLog(ctx))
	addErr(a.sinks.stop(ctx))
	addErr(a.store.Close())
	a.stopTracing(ctx)
	return errors.Join(errs...)
}

// closeRequestLog writes the request log's waiting lines and closes it,
// once no call can add one.
func (a *App) closeRequestLog(ctx context.Context) error {
	if a.requestLog == nil {
		return nil
	}
	return a.requestLog.Close(ctx)
}

// stopTracing exports the spans still buffered, within ctx, and stops the
// exporter; a collector that cannot take them is logged, not an error of
// the service.
func (a *App) stopTracing(ctx context.Context) {
	if a.tracing == nil {
		return
	}
	if err := a.tracing.Shutdown(ctx); err != nil {
		a.log.Warn("spans not exported at shutdown", "err", err)
	}
}

// Run starts the service and serves until ctx is done or the process gets
// SIGINT or SIGTERM, then drains (see --shutdown-drain-delay) and shuts
// down within the shutdown timeout. SIGHUP reloads the configuration.
func (a *App) Run(ctx context.Context) error {
	// Catch signals before Start logs "sluice serving": a SIGHUP sent as
	// soon as the service says it is up must reload it, not kill it.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if err := a.Start(); err != nil {
		_ = a.store.Close()
		_ = a.closeRequestLog(context.Background())
		a.stopTracing(context.Background())
		return err
	}
	for {
		select {
		case <-ctx.Done():
			a.drain(sigs)
			return a.shutdownWithTimeout()
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				a.log.Info("SIGHUP: reloading configuration")
				_ = a.Reload()
				continue
			}
			a.log.Info("shutting down", "signal", sig.String())
			a.drain(sigs)
			return a.shutdownWithTimeout()
		}
	}
}

// drain answers unhealthy from now on and keeps serving for the
// --shutdown-drain-delay, so that load balancers see the health checks
// fail and stop sending calls before the listeners close. Another signal
// ends the wait.
func (a *App) drain(sigs <-chan os.Signal) {
	a.draining.Store(true)
	a.setHealth(false)
	if d := a.opts.ShutdownDrainDelay; d > 0 {
		a.log.Info("draining: health checks fail, calls are still served", "for", d.String())
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-sigs:
		}
	}
}

// requireClientSAN makes cfg's connections also require the client's
// certificate, verified against the client CA already, to name san.
func requireClientSAN(cfg *tls.Config, san string) {
	perClient := cfg.GetConfigForClient
	cfg.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		c, err := perClient(hello)
		if err != nil {
			return nil, err
		}
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("tls: no client certificate")
			}
			if err := cs.PeerCertificates[0].VerifyHostname(san); err != nil {
				return fmt.Errorf("tls: client certificate: %w", err)
			}
			return nil
		}
		return c, nil
	}
}

// healthNames are the gRPC health service names the service answers for:
// the server as a whole, its two APIs, and "ratelimit", the name
// envoyproxy/ratelimit reports under.
var healthNames = []string{"", rlsv3.RateLimitService_ServiceDesc.ServiceName, sluicev1.Limits_ServiceDesc.ServiceName, "ratelimit"}

// setHealth sets every gRPC health name's status.
func (a *App) setHealth(ok bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, n := range healthNames {
		a.health.SetServingStatus(n, st)
	}
}

// checkHealth is Ready, also passing the verdict on to gRPC health
// watchers.
func (a *App) checkHealth(ctx context.Context) error {
	err := a.Ready(ctx)
	a.setHealth(err == nil)
	return err
}

// healthService answers gRPC health checks from a fresh Ready verdict;
// Watch and List come from the embedded server, whose statuses every
// check, HTTP or gRPC, and every drain update.
type healthService struct {
	*health.Server
	a *App
}

// Check answers the status of a known service name, NotFound otherwise.
func (h healthService) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if !slices.Contains(healthNames, req.GetService()) {
		return h.Server.Check(ctx, req)
	}
	if err := h.a.checkHealth(ctx); err != nil {
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (a *App) shutdownWithTimeout() error {
	ctx, cancel := context.WithTimeout(context.Background(), a.opts.ShutdownTimeout)
	defer cancel()
	return a.Shutdown(ctx)
}

// grpcServer is the gRPC listener's server: grpc-go's *grpc.Server or
// h2grpc's *Server (--grpc-server).
type grpcServer interface {
	grpc.ServiceRegistrar
	Serve(net.Listener) error
	GracefulStop()
	Stop()
}

// The gRPC flow-control windows, per stream and per connection: rate
// limit messages are small, so larger than any call needs.
const (
	grpcWindow     = 1 << 20
	grpcConnWindow = 1 << 24
)

// rlsBatch answers the ShouldRateLimit calls h2grpc read together with
// one server.RLS.ShouldRateLimits: a request that does not decode fails
// alone, with the codec's InvalidArgument, as the unary path answers it.
func (a *App) rlsBatch() h2grpc.BatchHandler {
	return func(calls []h2grpc.Call) {
		batch := make([]server.RLSCall, 0, len(calls))
		from := make([]int, 0, len(calls)) // the h2grpc call of each batch entry
		for i := range calls {
			req := new(rlsv3.RateLimitRequest)
			if err := calls[i].Decode(req); err != nil {
				calls[i].Err = err
				continue
			}
			batch = append(batch, server.RLSCall{Ctx: calls[i].Context(), Req: req})
			from = append(from, i)
		}
		if len(batch) > 0 {
			a.rls.ShouldRateLimits(batch)
		}
		for j := range batch {
			c := &calls[from[j]]
			if batch[j].Err != nil {
				c.Err = batch[j].Err
			} else {
				c.Reply = batch[j].Resp
			}
		}
	}
}

// isMemoryStore reports whether st is the memory store itself (not a
// wrapper around it), whose calls never block.
func isMemoryStore(st store.Store) bool {
	_, ok := st.(*memory.Store)
	return ok
}
