package redis

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the store's Prometheus metrics. A nil Registerer gives
// metrics that are kept but exported nowhere.
type metrics struct {
	latency       prometheus.Histogram
	errors        *prometheus.CounterVec
	compensations prometheus.Counter
	scriptLoads   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_redis_call_duration_seconds",
			Help:    "Time taken by one Redis store call (a batch: every round trip it needed), errors included.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_redis_errors_total",
			Help: "Redis store calls that failed, by kind: timeout (deadline passed), unavailable (connection failed or closed, or the node not ready: CLUSTERDOWN, LOADING, MASTERDOWN, READONLY, TRYAGAIN), canceled (by the caller), reply (another error reply), protocol (an unexpected reply).",
		}, []string{"kind"}),
		compensations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_redis_compensations_total",
			Help: "Multi-slot all-or-nothing batches denied by one slot whose spends in other slots were given back (Cluster mode).",
		}),
		scriptLoads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_redis_script_loads_total",
			Help: "Script calls sent again with EVAL because a node did not have the script cached (NOSCRIPT).",
		}),
	}
	for _, k := range []string{kindTimeout, kindUnavailable, kindCanceled, kindReply, kindProtocol} {
		m.errors.WithLabelValues(k)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.latency, m.errors, m.compensations, m.scriptLoads} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("redis: metrics already registered (one Redis store per registerer): %w", err)
			}
			return nil, fmt.Errorf("redis: register metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) observe(d time.Duration) { m.latency.Observe(d.Seconds()) }

func (m *metrics) error(kind string) { m.errors.WithLabelValues(kind).Inc() }
