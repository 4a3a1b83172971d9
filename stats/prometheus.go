package stats

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// compat exposes the statistics under the names envoyproxy/ratelimit's
// default statsd_exporter mapping (its USE_PROMETHEUS sink) gives them.
type compat struct {
	st     *Stats
	millis bool
}

// NewPrometheusCompat returns a collector of the series envoyproxy/ratelimit
// exposes with USE_PROMETHEUS=true and its default mapping:
//
//   - ratelimit_service_rate_limit_{total_hits,over_limit,near_limit,
//     within_limit,shadow_mode}{domain,key1} for a stats key of two
//     levels, {domain,key1,key2} for deeper keys (further levels dropped,
//     summed into the series of their first two); and
//     ratelimit_service_rate_limit_over_limit_with_local_cache likewise
//     (upstream's mapping has no rule for it; see docs/envoy.md);
//   - ratelimit_service_rate_limit_<domain>_domain_not_found per unknown
//     domain (unmapped upstream, so named from the stat);
//   - ratelimit_service_config_load_success, _config_load_error,
//     ratelimit_service_should_rate_limit_error{err_type},
//     ratelimit_service_total_requests{grpc_method} and the histogram
//     ratelimit_service_response_time_seconds{grpc_method} (in
//     milliseconds when millis, as PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS),
//     and ratelimit_service_global_shadow_mode.
//
// As upstream's, a series appears with its first count. Cardinality is bounded as Stats bounds keys and domains. The collector
// is unchecked: one name carries two label sets, as upstream's does.
func NewPrometheusCompat(st *Stats, millis bool) prometheus.Collector {
	return &compat{st: st, millis: millis}
}

// Describe sends nothing: the collector is unchecked.
func (c *compat) Describe(chan<- *prometheus.Desc) {}

const compatHelp = "envoyproxy/ratelimit's statistic, named as its default statsd_exporter mapping names it."

var (
	ruleDescs2, ruleDescs3 [6]*prometheus.Desc
	errDesc                = desc("ratelimit_service_should_rate_limit_error", "err_type")
	totalReqDesc           = desc("ratelimit_service_total_requests", "grpc_method")
	respTimeDesc           = desc("ratelimit_service_response_time_seconds", "grpc_method")
	loadOKDesc             = desc("ratelimit_service_config_load_success")
	loadErrDesc            = desc("ratelimit_service_config_load_error")
	shadowDesc             = desc("ratelimit_service_global_shadow_mode")
)

func init() {
	for i, stat := range ruleStats {
		ruleDescs2[i] = desc("ratelimit_service_rate_limit_"+stat, "domain", "key1")
		ruleDescs3[i] = desc("ratelimit_service_rate_limit_"+stat, "domain", "key1", "key2")
	}
}

func desc(name string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, compatHelp, labels, nil)
}

// Collect implements prometheus.Collector.
func (c *compat) Collect(ch chan<- prometheus.Metric) {
	type series struct {
		labels [3]string
		deep   bool
	}
	sums := map[series]*[6]uint64{}
	var order []series
	for _, r := range c.st.Rules() {
		parts := strings.SplitN(Name(r.Key), ".", 4)
		var s series
		switch len(parts) {
		case 1:
			s.labels = [3]string{parts[0], parts[0]} // the overflow rule
		case 2:
			s.labels = [3]string{parts[0], parts[1]}
		default:
			s.labels, s.deep = [3]string{parts[0], parts[1], parts[2]}, true
		}
		sum, ok := sums[s]
		if !ok {
			sum = new([6]uint64)
			sums[s] = sum
			order = append(order, s)
		}
		for i, v := range [6]uint64{r.TotalHits.Load(), r.OverLimit.Load(), r.NearLimit.Load(),
			r.WithinLimit.Load(), r.ShadowMode.Load(), r.OverLimitWithLocalCache.Load()} {
			sum[i] += v
		}
	}
	for _, s := range order {
		for i, v := range sums[s] {
			if v == 0 {
				continue // upstream's series appear with their first count
			}
			if s.deep {
				send(ch, ruleDescs3[i], v, s.labels[:]...)
			} else {
				send(ch, ruleDescs2[i], v, s.labels[:2]...)
			}
		}
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		if v != 0 {
			send(ch, d, v, labels...)
		}
	}
	// Domains whose names escape alike share a series.
	notFound := map[string]uint64{}
	var names []string
	for _, d := range c.st.Domains() {
		name := "ratelimit_service_rate_limit_" + escape(Name(d.Name)) + "_domain_not_found"
		if _, ok := notFound[name]; !ok {
			names = append(names, name)
		}
		notFound[name] += d.NotFound.Load()
	}
	for _, name := range names {
		counter(desc(name), notFound[name])
	}
	counter(loadOKDesc, c.st.ConfigLoadSuccess.Load())
	counter(loadErrDesc, c.st.ConfigLoadError.Load())
	counter(errDesc, c.st.RedisError.Load(), "redis_error")
	counter(errDesc, c.st.ServiceError.Load(), "service_error")
	counter(totalReqDesc, c.st.TotalRequests.Load(), "ShouldRateLimit")
	if buckets, n, sum := c.st.ResponseTimes(c.millis); n > 0 {
		ch <- prometheus.MustNewConstHistogram(respTimeDesc, n, sum, buckets, "ShouldRateLimit")
	}
	counter(shadowDesc, c.st.GlobalShadowMode.Load())
}

// escape makes s a Prometheus metric name part as statsd_exporter does:
// every character but ASCII letters, digits and '_' becomes '_'.
func escape(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, s)
}

// send sends a counter; a label value that is not valid UTF-8 (which
// neither gRPC nor /json lets through) drops the series rather than the
// scrape.
func send(ch chan<- prometheus.Metric, d *prometheus.Desc, v uint64, labels ...string) {
	if m, err := prometheus.NewConstMetric(d, prometheus.CounterValue, float64(v), labels...); err == nil {
		ch <- m
	}
}
