package server

import (
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
)

// maxRuleLabels bounds the distinct rule label values; past it, further
// rules (only possible with detailed_metric or value_to_metric, whose keys
// carry request values) are reported under the label "overflow".
const maxRuleLabels = 10000

// Metrics holds the Envoy service's Prometheus metrics. Create it with
// NewMetrics; it is safe for concurrent use.
type Metrics struct {
	totalHits, overLimit, nearLimit, withinLimit, shadowMode *prometheus.CounterVec

	domainNotFound prometheus.Counter
	globalShadow   prometheus.Counter
	requests       *prometheus.CounterVec
	latency        prometheus.Histogram

	mu    sync.RWMutex // protects rules
	rules map[string]*ruleStats
}

// ruleStats are one rule's counters, looked up once per stats key.
type ruleStats struct {
	totalHits, overLimit, nearLimit, withinLimit, shadowMode prometheus.Counter
}

// NewMetrics creates the metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	rule := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "ratelimit", Name: name,
			Help: help + " Label rule: the rule's stats key as envoyproxy/ratelimit names it (domain.key_value..., with ':', '|' and the dots of IPv4 addresses as '_'), or \"overflow\" past 10000 keys.",
		}, []string{"rule"})
	}
	m := &Metrics{
		totalHits:   rule("total_hits", "Hits counted against the rule."),
		overLimit:   rule("over_limit", "Hits over the rule's limit."),
		nearLimit:   rule("near_limit", "Hits past the near-limit ratio of the rule's limit."),
		withinLimit: rule("within_limit", "Hits within the rule's limit."),
		shadowMode:  rule("shadow_mode", "Hits over the limit of a shadow-mode rule, answered OK."),
		domainNotFound: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "ratelimit", Name: "domain_not_found_total",
			Help: "Requests for a domain that no configuration file defines.",
		}),
		globalShadow: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "ratelimit", Name: "global_shadow_mode_total",
			Help: "Requests over the limit answered OK because of the global shadow mode.",
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "ratelimit", Name: "requests_total",
			Help: "ShouldRateLimit calls by gRPC result code. Label code: OK, InvalidArgument, Unavailable, Canceled, Internal.",
		}, []string{"code"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "sluice", Subsystem: "ratelimit", Name: "request_duration_seconds",
			Help:    "Time to answer a ShouldRateLimit call.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}),
		rules: map[string]*ruleStats{},
	}
	if reg != nil {
		reg.MustRegister(m.totalHits, m.overLimit, m.nearLimit, m.withinLimit, m.shadowMode,
			m.domainNotFound, m.globalShadow, m.requests, m.latency)
	}
	return m
}

// rule returns the counters for a stats key.
func (m *Metrics) rule(key string) *ruleStats {
	m.mu.RLock()
	st, ok := m.rules[key]
	m.mu.RUnlock()
	if ok {
		return st
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if st, ok := m.rules[key]; ok {
		return st
	}
	label := statName(key)
	if len(m.rules) >= maxRuleLabels {
		label = "overflow"
	}
	st = &ruleStats{
		totalHits:   m.totalHits.WithLabelValues(label),
		overLimit:   m.overLimit.WithLabelValues(label),
		nearLimit:   m.nearLimit.WithLabelValues(label),
		withinLimit: m.withinLimit.WithLabelValues(label),
		shadowMode:  m.shadowMode.WithLabelValues(label),
	}
	if label != "overflow" {
		m.rules[key] = st
	}
	return st
}

// ipv4 finds dotted IPv4 addresses in a stats key.
var ipv4 = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)

// statName is the name envoyproxy/ratelimit gives a stats key: ':' and '|'
// become '_', and so do the dots of an IPv4 address, so that
// "edge.remote_address_10.0.0.1" is reported as
// "edge.remote_address_10_0_0_1".
func statName(key string) string {
	if !strings.ContainsAny(key, ":|.") {
		return key
	}
	key = strings.NewReplacer(":", "_", "|", "_").Replace(key)
	return ipv4.ReplaceAllStringFunc(key, func(ip string) string {
		return strings.ReplaceAll(ip, ".", "_")
	})
}

func (m *Metrics) observeRequest(d time.Duration, code codes.Code) {
	m.latency.Observe(d.Seconds())
	m.requests.WithLabelValues(code.String()).Inc()
}
