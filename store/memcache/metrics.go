package memcache

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Error kinds, the label values of sluice_memcache_errors_total.
const (
	kindUnavailable = "unavailable" // a server unreachable, timed out or failing
	kindContended   = "contended"   // a bucket still contended after MaxAttempts
	kindBadValue    = "bad_value"   // a bucket holding something not a number
)

// metrics are the store's Prometheus metrics. A nil Registerer gives
// metrics that are kept but exported nowhere.
type metrics struct {
	latency       prometheus.Histogram
	errors        *prometheus.CounterVec
	conflicts     prometheus.Counter
	compensations prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_memcache_call_duration_seconds",
			Help:    "Time taken by one memcache store call (a batch: every round trip it needed), errors included.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_memcache_errors_total",
			Help: "memcache store calls that failed, by kind: unavailable (a server unreachable, timed out or failing), contended (a bucket still written by others after the last attempt), bad_value (a bucket holding something not a number).",
		}, []string{"kind"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_memcache_conflicts_total",
			Help: "Writes (cas, or add of a missing key) that lost to another caller's write and were decided again.",
		}),
		compensations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_memcache_compensations_total",
			Help: "Denied all-or-nothing batches whose spends were given back.",
		}),
	}
	for _, k := range []string{kindUnavailable, kindContended, kindBadValue} {
		m.errors.WithLabelValues(k)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.latency, m.errors, m.conflicts, m.compensations} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("memcache: register metrics (one memcache store per registerer): %w", err)
		}
	}
	return m, nil
}

func (m *metrics) observe(d time.Duration) { m.latency.Observe(d.Seconds()) }
