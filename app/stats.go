package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-rl/sluice/stats"
)

// StatsOptions are the --statsd-*, --stats-*, --dogstatsd* and
// --prometheus-* flags: the sinks of envoyproxy/ratelimit's statistics
// besides Sluice's own metrics (see docs/envoy.md, "Statistics").
type StatsOptions struct {
	StatsdAddr     string        // --statsd-addr host:port; empty (default): no StatsD
	StatsdProtocol string        // --statsd-protocol tcp or udp; empty (default): tcp, or udp with --dogstatsd
	FlushInterval  time.Duration // --stats-flush-interval, default (and when 0) 10s, at least 1ms
	ExtraTags      string        // --stats-extra-tags "k1:v1,k2:v2", added to every StatsD stat
	DogStatsD      bool          // --dogstatsd: DogStatsD lines (tags after |#) instead of StatsD
	// Mogrifiers (--dogstatsd-mogrifiers, comma-separated names) turn
	// DogStatsD names into names and tags; each NAME is defined by
	// envoyproxy/ratelimit's DOG_STATSD_MOGRIFIER_<NAME>_PATTERN, _NAME
	// and _TAGS variables, which ParseServe reads into MogrifierDefs.
	Mogrifiers    []string
	MogrifierDefs map[string]MogrifierDef

	PrometheusCompat bool   // --prometheus-compat: also expose envoyproxy/ratelimit's Prometheus series on the debug /metrics
	PrometheusAddr   string // --prometheus-addr: and on this listener too; empty (default): none
	PrometheusPath   string // --prometheus-path of that listener, default (and when empty) /metrics
	// PrometheusResponseTimeMillis (--prometheus-response-time-ms) reports
	// ratelimit_service_response_time_seconds in milliseconds, as
	// upstream's PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS does.
	PrometheusResponseTimeMillis bool
}

// MogrifierDef is one DogStatsD mogrifier as envoyproxy/ratelimit's
// DOG_STATSD_MOGRIFIER_<NAME>_PATTERN, _NAME and _TAGS define it.
type MogrifierDef struct{ Pattern, Name, Tags string }

// mogrifierDefs reads the definitions of the named mogrifiers.
func mogrifierDefs(names []string, getenv func(string) string) map[string]MogrifierDef {
	defs := map[string]MogrifierDef{}
	for _, n := range names {
		p := "DOG_STATSD_MOGRIFIER_" + n + "_"
		defs[n] = MogrifierDef{Pattern: getenv(p + "PATTERN"), Name: getenv(p + "NAME"), Tags: getenv(p + "TAGS")}
	}
	return defs
}

// mogrifiers builds the mogrifiers o names, in order.
func (o *StatsOptions) mogrifiers() ([]stats.Mogrifier, error) {
	var ms []stats.Mogrifier
	var errs []error
	for _, n := range o.Mogrifiers {
		d := o.MogrifierDefs[n]
		m, err := stats.NewMogrifier("DOG_STATSD_MOGRIFIER_"+n, d.Pattern, d.Name, d.Tags)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ms = append(ms, m)
	}
	return ms, errors.Join(errs...)
}

// validate adds o's errors through bad.
func (o *StatsOptions) validate(bad func(flag, format string, args ...any)) {
	if o.StatsdAddr != "" {
		if _, _, err := net.SplitHostPort(o.StatsdAddr); err != nil {
			bad("statsd-addr", "%q is not host:port: %v", o.StatsdAddr, err)
		}
	}
	switch o.StatsdProtocol {
	case "", "tcp", "udp":
	default:
		bad("statsd-protocol", "%q is not one of tcp, udp", o.StatsdProtocol)
	}
	if o.FlushInterval < 0 || o.FlushInterval > 0 && o.FlushInterval < time.Millisecond {
		bad("stats-flush-interval", "%s must be at least 1ms", o.FlushInterval)
	}
	if _, err := stats.ParseTags(o.ExtraTags); err != nil {
		bad("stats-extra-tags", "%v", err)
	}
	if o.DogStatsD && o.StatsdAddr == "" {
		bad("dogstatsd", "needs --statsd-addr")
	}
	if len(o.Mogrifiers) > 0 && !o.DogStatsD {
		bad("dogstatsd-mogrifiers", "needs --dogstatsd")
	}
	if _, err := o.mogrifiers(); err != nil {
		bad("dogstatsd-mogrifiers", "%v", err)
	}
	if o.PrometheusAddr != "" && !o.PrometheusCompat {
		bad("prometheus-addr", "needs --prometheus-compat")
	}
	if o.PrometheusPath != "" && !strings.HasPrefix(o.PrometheusPath, "/") {
		bad("prometheus-path", "%q must start with /", o.PrometheusPath)
	}
}

// statsSinks are the running sinks of the statistics besides Sluice's own
// metrics.
type statsSinks struct {
	statsd     *stats.StatsD // nil without --statsd-addr
	stopStatsd context.CancelFunc
	statsdDone chan struct{}

	promReg    *prometheus.Registry // nil without --prometheus-addr
	promServer *http.Server
	promLn     net.Listener
}

// newStatsSinks builds the sinks o asks for over st, registering the
// compatibility series on reg (the debug /metrics).
func newStatsSinks(o StatsOptions, st *stats.Stats, reg prometheus.Registerer, a *App) (*statsSinks, error) {
	s := &statsSinks{}
	if o.PrometheusCompat {
		compat := stats.NewPrometheusCompat(st, o.PrometheusResponseTimeMillis)
		if err := reg.Register(compat); err != nil {
			return nil, fmt.Errorf("--prometheus-compat: %w", err)
		}
		if o.PrometheusAddr != "" {
			s.promReg = prometheus.NewRegistry()
			s.promReg.MustRegister(compat)
		}
	}
	if o.StatsdAddr != "" {
		tags, _ := stats.ParseTags(o.ExtraTags) // checked by Validate
		ms, _ := o.mogrifiers()
		sd, err := stats.NewStatsD(st, stats.StatsDOptions{
			Addr: o.StatsdAddr, Protocol: o.StatsdProtocol, Interval: o.FlushInterval,
			Tags: tags, DogStatsD: o.DogStatsD, Mogrifiers: ms, Logger: a.log,
		})
		if err != nil {
			return nil, fmt.Errorf("--statsd-addr: %w", err)
		}
		if err := reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_statsd_lines_too_long_total",
			Help: "StatsD stat lines not sent because no UDP datagram can carry them (65,507 bytes): a stat key built from a long request value."},
			func() float64 { return float64(sd.TooLong()) })); err != nil {
			return nil, err
		}
		s.statsd = sd
	}
	return s, nil
}

// start starts the StatsD flusher and the Prometheus listener.
func (s *statsSinks) start(o StatsOptions, a *App) error {
	if s.promReg != nil {
		ln, err := net.Listen("tcp", o.PrometheusAddr)
		if err != nil {
			return fmt.Errorf("--prometheus-addr: %w", err)
		}
		a.listeners = append(a.listeners, ln)
		s.promLn = ln
		path := o.PrometheusPath
		if path == "" {
			path = "/metrics"
		}
		mux := http.NewServeMux()
		mux.Handle(path, promhttp.HandlerFor(s.promReg, promhttp.HandlerOpts{}))
		s.promServer = &http.Server{Handler: mux, ReadHeaderTimeout: a.opts.HTTPReadTimeout, MaxHeaderBytes: a.opts.HTTPMaxHeaderBytes}
		go func() { _ = s.promServer.Serve(ln) }()
		a.log.Info("envoyproxy/ratelimit Prometheus series served", "addr", ln.Addr().String(), "path", path)
	}
	if s.statsd != nil {
		ctx, cancel := context.WithCancel(context.Background())
		s.stopStatsd, s.statsdDone = cancel, make(chan struct{})
		go func() { defer close(s.statsdDone); s.statsd.Run(ctx) }()
	}
	return nil
}

// stop flushes StatsD a last time and closes the Prometheus listener.
func (s *statsSinks) stop(ctx context.Context) error {
	var err error
	if s.promServer != nil {
		if err = s.promServer.Shutdown(ctx); err != nil {
			_ = s.promServer.Close()
		}
	}
	if s.stopStatsd != nil {
		s.stopStatsd()
		select {
		case <-s.statsdDone:
		case <-ctx.Done():
		}
	}
	return err
}

// StatsD returns the StatsD flusher, or nil without --statsd-addr; tests
// flush it.
func (a *App) StatsD() *stats.StatsD { return a.sinks.statsd }

// PrometheusAddr is the --prometheus-addr listener's address once started,
// or "".
func (a *App) PrometheusAddr() string { return addrOf(a.sinks.promLn) }
