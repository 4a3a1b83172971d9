package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/sluice-rl/sluice/stats"
)

// Metrics holds the Envoy service's statistics (package stats, the one
// model every sink reads) and exposes Sluice's own Prometheus metrics from
// them. Create it with NewMetrics; it is safe for concurrent use.
type Metrics struct {
	stats *stats.Stats

	requests *prometheus.CounterVec
	latency  prometheus.Histogram
}

// ruleCollector exposes stats' per-rule counters and service counters as
// Sluice's sluice_ratelimit_* metrics.
type ruleCollector struct {
	st                                                       *stats.Stats
	totalHits, overLimit, nearLimit, withinLimit, shadowMode *prometheus.Desc
	domainNotFound, globalShadow                             *prometheus.Desc
}

// NewMetrics creates the metrics over new statistics and registers them on
// reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	st := stats.New()
	rule := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName("sluice", "ratelimit", name),
			help+" Label rule: the rule's stats key as envoyproxy/ratelimit names it (domain.key_value..., with ':', '|' and the dots of IPv4 addresses as '_'), or \"overflow\" past 10000 keys.",
			[]string{"rule"}, nil)
	}
	rc := &ruleCollector{
		st:          st,
		totalHits:   rule("total_hits", "Hits counted against the rule."),
		overLimit:   rule("over_limit", "Hits over the rule's limit."),
		nearLimit:   rule("near_limit", "Hits past the near-limit ratio of the rule's limit."),
		withinLimit: rule("within_limit", "Hits within the rule's limit."),
		shadowMode:  rule("shadow_mode", "Hits over the limit of a shadow-mode rule, answered OK."),
		domainNotFound: prometheus.NewDesc("sluice_ratelimit_domain_not_found_total",
			"Descriptors asked for in a domain that no configuration defines (each descriptor of such a request, as envoyproxy/ratelimit counts them).", nil, nil),
		globalShadow: prometheus.NewDesc("sluice_ratelimit_global_shadow_mode_total",
			"Requests over the limit answered OK because of the global shadow mode.", nil, nil),
	}
	m := &Metrics{
		stats: st,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "ratelimit", Name: "requests_total",
			Help: "ShouldRateLimit calls by gRPC result code. Label code: OK, InvalidArgument, Unavailable, Canceled, Internal.",
		}, []string{"code"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "sluice", Subsystem: "ratelimit", Name: "request_duration_seconds",
			Help:    "Time to answer a ShouldRateLimit call.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}),
	}
	if reg != nil {
		reg.MustRegister(rc, m.requests, m.latency)
	}
	return m
}

// Stats returns the statistics the metrics read, for other sinks.
func (m *Metrics) Stats() *stats.Stats { return m.stats }

// Describe implements prometheus.Collector.
func (c *ruleCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.totalHits, c.overLimit, c.nearLimit, c.withinLimit, c.shadowMode, c.domainNotFound, c.globalShadow} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *ruleCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		// A label value that is not valid UTF-8 (which neither gRPC nor
		// /json lets through) drops the series rather than the scrape.
		if m, err := prometheus.NewConstMetric(d, prometheus.CounterValue, float64(v), labels...); err == nil {
			ch <- m
		}
	}
	// Keys that differ only in characters Name replaces share a label,
	// and so a series.
	sums := map[string]*[5]uint64{}
	var labels []string
	for _, r := range c.st.Rules() {
		label := stats.Name(r.Key)
		sum, ok := sums[label]
		if !ok {
			sum = new([5]uint64)
			sums[label] = sum
			labels = append(labels, label)
		}
		sum[0] += r.TotalHits.Load()
		sum[1] += r.OverLimit.Load()
		sum[2] += r.NearLimit.Load()
		sum[3] += r.WithinLimit.Load()
		sum[4] += r.ShadowMode.Load()
	}
	for _, label := range labels {
		sum := sums[label]
		for i, d := range []*prometheus.Desc{c.totalHits, c.overLimit, c.nearLimit, c.withinLimit, c.shadowMode} {
			counter(d, sum[i], label)
		}
	}
	counter(c.domainNotFound, c.st.DomainNotFoundTotal())
	counter(c.globalShadow, c.st.GlobalShadowMode.Load())
}

// observeRequest counts a ShouldRateLimit call that took d and ended with
// code: Unavailable (the store) as upstream's redis_error, other failures
// as its service_error.
func (m *Metrics) observeRequest(d time.Duration, code codes.Code) {
	m.latency.Observe(d.Seconds())
	m.requests.WithLabelValues(code.String()).Inc()
	m.stats.ObserveResponseTime(d)
	switch code {
	case codes.OK:
	case codes.Unavailable:
		m.stats.RedisError.Add(1)
	default:
		m.stats.ServiceError.Add(1)
	}
}
