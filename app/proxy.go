package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluice-rl/sluice/adaptive"
	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/server"
)

// ProxyOptions configure `sluice proxy`, the adaptive reverse proxy. Flags
// read SLUICE_* environment variables as the serve flags do.
type ProxyOptions struct {
	// Listen is the proxy's address; default :8000.
	Listen string
	// Upstream is the URL requests are forwarded to. Required.
	Upstream string
	// ConfigPath is the adaptive config file; empty: the seed's defaults.
	ConfigPath string
	// DebugAddr serves /metrics and /debug/pprof/; default 127.0.0.1:6071.
	DebugAddr string
	// UpstreamTimeout bounds the wait for the upstream's response headers
	// (504 past it); 0: no bound. Default 60s.
	UpstreamTimeout time.Duration
	// Store options: with a shared store (redis), several proxies share
	// their windows. Default memory: in-process state. Redis's server clock
	// (--redis-clock server) is refused: see checkProxyStore. The flags the
	// proxy shares with serve are read into it too: --log-level,
	// --log-format, and --shutdown-timeout (Store.ShutdownTimeout, how long
	// in-flight requests may finish after SIGINT/SIGTERM; default 10s,
	// must be > 0).
	Store Options
}

// checkProxyStore refuses store options the adaptive limiter cannot use.
// Its shared windows (adaptive/shared.go) pass every store operation on a
// slot the same, chosen now, and need a store that decides with it; Redis
// with --redis-clock server decides with its own TIME instead, so proxies
// would neither find their buckets nor keep them long enough.
func checkProxyStore(o Options) error {
	if o.Store == "redis" && o.Redis.Clock == "server" {
		return fmt.Errorf("--redis-clock server (%s) cannot be used with sluice proxy --store redis (%s): "+
			"the adaptive limiter's shared windows need the caller's clock; use --redis-clock local",
			EnvName("redis-clock"), EnvName("store"))
	}
	return nil
}

// ParseProxy reads the proxy command's flags, with environment fallbacks.
func ParseProxy(args []string, getenv func(string) string, out io.Writer) (ProxyOptions, error) {
	p := ProxyOptions{Listen: ":8000", DebugAddr: "127.0.0.1:6071", UpstreamTimeout: time.Minute, Store: Defaults()}
	fs := flag.NewFlagSet("sluice proxy", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&p.Listen, "listen", p.Listen, "proxy listen address")
	fs.StringVar(&p.Upstream, "upstream", p.Upstream, "upstream URL, e.g. http://127.0.0.1:9000")
	fs.StringVar(&p.ConfigPath, "config", p.ConfigPath, "adaptive limiter config file (default: the seed's parameters)")
	fs.StringVar(&p.DebugAddr, "debug-addr", p.DebugAddr, "debug listen address (/metrics, /debug/pprof/)")
	durationVar(fs, &p.UpstreamTimeout, "upstream-timeout", p.UpstreamTimeout, "longest wait for the upstream's response headers, 504 past it (0: no limit)")
	durationVar(fs, &p.Store.ShutdownTimeout, "shutdown-timeout", p.Store.ShutdownTimeout, "how long in-flight requests may finish after SIGINT/SIGTERM")
	fs.StringVar(&p.Store.LogLevel, "log-level", p.Store.LogLevel, "log level: debug, info, warn, error")
	fs.StringVar(&p.Store.LogFormat, "log-format", p.Store.LogFormat, "log format: text or json")
	addrs := p.Store.addStoreFlags(fs)
	if err := applyEnv(fs, func(name string) string {
		// --config means the adaptive file here; never pick up serve's.
		if name == EnvName("config") {
			return getenv("SLUICE_ADAPTIVE_CONFIG")
		}
		return getenv(name)
	}); err != nil {
		return p, err
	}
	if err := fs.Parse(args); err != nil {
		return p, err
	}
	if fs.NArg() > 0 {
		return p, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	p.Store.Redis.Addrs = splitList(*addrs)
	var errs []error
	if p.Upstream == "" {
		errs = append(errs, errors.New("--upstream: required"))
	} else if u, err := url.Parse(p.Upstream); err != nil || u.Scheme == "" || u.Host == "" {
		errs = append(errs, fmt.Errorf("--upstream: %q is not an absolute URL like http://host:port", p.Upstream))
	}
	if p.UpstreamTimeout < 0 {
		errs = append(errs, fmt.Errorf("--upstream-timeout: %s is negative", p.UpstreamTimeout))
	}
	errs = append(errs, p.Store.Validate(), checkProxyStore(p.Store))
	return p, errors.Join(errs...)
}

// Proxy is a running adaptive reverse proxy.
type Proxy struct {
	log       *slog.Logger
	limiter   *adaptive.Limiter
	server    *http.Server
	debug     *http.Server
	ln, dbgLn net.Listener
	maxConns  int
	closeFn   func() error
}

// NewProxy builds the proxy: loads its config, connects the store. Unless
// deps.Store is set, options ParseProxy would refuse (Redis's server
// clock) are an error here too.
func NewProxy(p ProxyOptions, deps Deps) (*Proxy, error) {
	log := deps.Logger
	if log == nil {
		log = slog.Default()
	}
	if deps.Clock == nil {
		deps.Clock = clock.New()
	}
	cfg := adaptive.DefaultConfig()
	if p.ConfigPath != "" {
		var err error
		if cfg, err = adaptive.LoadConfig(p.ConfigPath); err != nil {
			return nil, err
		}
	}
	upstream, err := url.Parse(p.Upstream)
	if err != nil {
		return nil, fmt.Errorf("--upstream: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	opts := adaptive.Options{Clock: deps.Clock, Registerer: reg, Logger: log}
	closeFn := func() error { return nil }
	st := deps.Store
	if st == nil && p.Store.Store != "memory" {
		if err := checkProxyStore(p.Store); err != nil {
			return nil, err
		}
		a := &App{opts: p.Store, log: log, clock: deps.Clock, registry: reg}
		if st, err = a.newStore(); err != nil {
			return nil, err
		}
	}
	if st != nil {
		clk := deps.Clock
		if clk == nil {
			clk = clock.New()
		}
		opts.Shared = limiter.New(st, clk)
		closeFn = st.Close
	}
	l, err := adaptive.New(cfg, opts)
	if err != nil {
		_ = closeFn()
		return nil, err
	}
	return &Proxy{
		log:     log,
		limiter: l,
		// Proxied bodies and answers may be long or streamed: no whole
		// request read or write timeout, but the headers, idle keep-alive
		// connections and open connections are bounded as serve's.
		server: &http.Server{Handler: adaptive.NewProxy(upstream, l, adaptive.ProxyOptions{Timeout: p.UpstreamTimeout}), ReadHeaderTimeout: p.Store.HTTPReadTimeout,
			IdleTimeout: p.Store.HTTPIdleTimeout, MaxHeaderBytes: p.Store.HTTPMaxHeaderBytes, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)},
		debug: &http.Server{Handler: server.DebugHandler(reg, func() string { return "" },
			server.NewDashboard(server.DashboardOptions{Gatherer: reg, Clock: deps.Clock, Adaptive: func() *server.AdaptiveState { return adaptiveState(l, reg) }})),
			ReadHeaderTimeout: p.Store.HTTPReadTimeout, ReadTimeout: p.Store.HTTPReadTimeout, IdleTimeout: p.Store.HTTPIdleTimeout,
			MaxHeaderBytes: p.Store.HTTPMaxHeaderBytes, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)},
		maxConns: p.Store.MaxConnections,
		closeFn:  closeFn,
	}, nil
}

// Start listens on addr and debugAddr (either may be ":0").
func (x *Proxy) Start(addr, debugAddr string) error {
	var err error
	if x.ln, err = net.Listen("tcp", addr); err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	x.ln = guardListener(x.ln, x.maxConns)
	if debugAddr != "" && debugAddr != "off" {
		if x.dbgLn, err = net.Listen("tcp", debugAddr); err != nil {
			_ = x.ln.Close()
			return fmt.Errorf("--debug-addr: %w", err)
		}
		x.dbgLn = guardListener(x.dbgLn, x.maxConns)
		go func() { _ = x.debug.Serve(x.dbgLn) }()
	}
	go func() { _ = x.server.Serve(x.ln) }()
	x.log.Info("sluice proxy serving", "listen", x.Addr(), "debug", addrOf(x.dbgLn))
	return nil
}

// Addr is the proxy's listening address once started.
func (x *Proxy) Addr() string { return addrOf(x.ln) }

// DebugAddr is the debug listener's address once started, or "".
func (x *Proxy) DebugAddr() string { return addrOf(x.dbgLn) }

// Limiter returns the proxy's adaptive limiter.
func (x *Proxy) Limiter() *adaptive.Limiter { return x.limiter }

// Shutdown stops accepting, lets in-flight requests finish until ctx ends,
// and closes the store. Connections that have sent nothing are closed at
// once, as serve's are: they hold no request to wait for.
func (x *Proxy) Shutdown(ctx context.Context) error {
	done := make(chan error, 2)
	go func() { done <- x.server.Shutdown(ctx) }()
	go func() { done <- x.debug.Shutdown(ctx) }()
	for _, ln := range []net.Listener{x.ln, x.dbgLn} {
		if g, ok := ln.(*connGuard); ok {
			g.closeSilent()
		}
	}
	err := errors.Join(<-done, <-done)
	return errors.Join(err, x.closeFn())
}

// RunProxy runs the proxy until SIGINT or SIGTERM, then lets in-flight
// requests finish for up to p.Store.ShutdownTimeout (--shutdown-timeout).
func RunProxy(p ProxyOptions, log *slog.Logger) error {
	x, err := NewProxy(p, Deps{Logger: log})
	if err != nil {
		return err
	}
	// Catch signals before Start says the proxy is serving, so a SIGTERM
	// right after that still drains in-flight requests.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := x.Start(p.Listen, p.DebugAddr); err != nil {
		_ = x.closeFn()
		return err
	}
	sig := <-sigs
	log.Info("shutting down", "signal", sig.String())
	ctx, cancel := context.WithTimeout(context.Background(), p.Store.ShutdownTimeout)
	defer cancel()
	return x.Shutdown(ctx)
}
