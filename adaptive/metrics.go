package adaptive

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the limiter's Prometheus metrics. The per-route gauges are
// computed when scraped, from the windows themselves, so the hot path only
// touches the counters, and a route's series disappear with its key.
type metrics struct {
	l *Limiter

	count, avg, rate, errs, keys *prometheus.Desc

	deniedVec      *prometheus.CounterVec
	dryRunVec      *prometheus.CounterVec
	deniedHTML     prometheus.Counter
	deniedAsset    prometheus.Counter
	dryRunHTML     prometheus.Counter
	dryRunAsset    prometheus.Counter
	upstreamErrors prometheus.Counter
	storeErrors    prometheus.Counter
}

func newMetrics(l *Limiter, reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	route := []string{"route"}
	m := &metrics{
		l: l,
		count: prometheus.NewDesc(metricize(l.cfg.CountMetricName),
			"Requests admitted per route in the sliding window (the seed's request.count.by.url). Label route: a route template, a path, or (overflow); bounded by maxKeys.", route, nil),
		avg: prometheus.NewDesc(metricize(l.cfg.ValueMetricName),
			"Average response time in ms per route over the sliding window, forwarded requests only (the seed's request.resp.avg.by.url). Label route as for the count.", route, nil),
		rate: prometheus.NewDesc("sluice_adaptive_allowed_rate",
			"Requests per window each route may have admitted now, from its average response time. Label route as for the count.", route, nil),
		errs: prometheus.NewDesc("sluice_adaptive_upstream_errors_in_window",
			"Upstream errors (proxy 502s) per route in the sliding window; never part of the average. Label route as for the count.", route, nil),
		keys: prometheus.NewDesc("sluice_adaptive_keys",
			"Routes tracked, the overflow key not included.", nil, nil),
		deniedVec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_adaptive_denied_total",
			Help: "Requests answered 429, per rule. Label rule: html or asset.",
		}, []string{"rule"}),
		dryRunVec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_adaptive_dry_run_denials_total",
			Help: "Requests dry-run mode let through that would have been denied, per rule. Label rule: html or asset.",
		}, []string{"rule"}),
		upstreamErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_adaptive_upstream_errors_total",
			Help: "Forwarded requests the upstream failed (answered 502 by the proxy); not part of the average.",
		}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_adaptive_store_errors_total",
			Help: "Failed store calls; the limiter then decides from its local view.",
		}),
	}
	m.deniedHTML = m.deniedVec.WithLabelValues(RuleHTML)
	m.deniedAsset = m.deniedVec.WithLabelValues(RuleAsset)
	m.dryRunHTML = m.dryRunVec.WithLabelValues(RuleHTML)
	m.dryRunAsset = m.dryRunVec.WithLabelValues(RuleAsset)
	for _, c := range []prometheus.Collector{m, m.deniedVec, m.dryRunVec, m.upstreamErrors, m.storeErrors} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("adaptive: register metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) denied(rule string) prometheus.Counter {
	if rule == RuleAsset {
		return m.deniedAsset
	}
	return m.deniedHTML
}

func (m *metrics) dryRun(rule string) prometheus.Counter {
	if rule == RuleAsset {
		return m.dryRunAsset
	}
	return m.dryRunHTML
}

// Describe implements prometheus.Collector for the per-route gauges.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.count
	ch <- m.avg
	ch <- m.rate
	ch <- m.errs
	ch <- m.keys
}

// Collect implements prometheus.Collector: one sample per route and gauge.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	for _, s := range m.l.Stats() {
		ch <- prometheus.MustNewConstMetric(m.count, prometheus.GaugeValue, float64(s.Count), s.Key)
		ch <- prometheus.MustNewConstMetric(m.avg, prometheus.GaugeValue, s.AvgMs, s.Key)
		ch <- prometheus.MustNewConstMetric(m.rate, prometheus.GaugeValue, s.Rate, s.Key)
		ch <- prometheus.MustNewConstMetric(m.errs, prometheus.GaugeValue, float64(s.Errors), s.Key)
	}
	ch <- prometheus.MustNewConstMetric(m.keys, prometheus.GaugeValue, float64(m.l.Keys()))
}
