package stats_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/stats"
)

func TestPrometheusCompatMergesWhatUpstreamMergesAndKeepsTheScrapeValid(t *testing.T) {
	st := stats.New()
	for _, key := range []string{"d.a:b", "d.a_b", "d.k1.k2.k3", "d.k1.k2.k4", "d.k1.k2"} {
		st.Rule(key).TotalHits.Add(1)
	}
	st.DomainNotFound("a-b", 1)
	st.DomainNotFound("a.b", 1)
	st.DomainNotFound("a-b", 1)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(stats.NewPrometheusCompat(st, false))
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			got[f.GetName()+"{"+strings.Join(labels, ",")+"}"] = m.GetCounter().GetValue()
		}
	}
	// "d.a:b" and "d.a_b" are one stat name upstream; so are every key
	// below d.k1.k2 for the regular-expression mapping, which keeps two
	// levels; "a-b" and "a.b" escape alike.
	want := map[string]float64{
		"ratelimit_service_rate_limit_total_hits{domain=d,key1=a_b}":        2,
		"ratelimit_service_rate_limit_total_hits{domain=d,key1=k1,key2=k2}": 3,
		"ratelimit_service_rate_limit_a_b_domain_not_found{}":               3,
	}
	if len(got) != len(want) {
		t.Errorf("got %d series %v, want %d", len(got), got, len(want))
	}
	for name, v := range want {
		if got[name] != v {
			t.Errorf("%s: got %v, want %v", name, got[name], v)
		}
	}
}
