package server

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/store/memory"
)

func TestKVMetricsCountDecisionsByBoundedLimitNameAndResult(t *testing.T) {
	t.Parallel()
	defaults, err := limits.ParseDefaults("defaults.yaml", []byte(
		"NewRegistrationsPerIPAddress: {burst: 1, count: 1, period: 1s}\nNewFoosPerIPAddress: {burst: 5, count: 5, period: 1s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	set, err := limits.New(defaults, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	kv := NewKV(KVOptions{
		Limiter:    limiter.New(memory.New(memory.Options{}), clock.NewFake(time.Unix(1e9, 0))),
		Limits:     func() *limits.Set { return set },
		Registerer: reg,
	})
	ctx := context.Background()
	for _, r := range []struct{ name, id string }{
		{"NewRegistrationsPerIPAddress", "10.0.0.1"}, // allowed
		{"NewRegistrationsPerIPAddress", "10.0.0.1"}, // denied
		{"NewRegistrationsPerIPAddress", "10.0.0"},   // error, built-in name
		{"NewFoosPerIPAddress", "10.0.0.1"},          // allowed, name from the file
		{"NewBarsPerIPAddress", "10.0.0.1"},          // allowed, a valid name in no file
		{"NewBazPerIPAddress", "10.0.0.1"},           // allowed, another
		{"Garbage", "x"},                             // error, unknown name
	} {
		_, _ = kv.Spend(ctx, &sluicev1.Request{Name: r.name, Id: r.id})
	}
	_, _ = kv.Batch(ctx, &sluicev1.BatchRequest{Transactions: []*sluicev1.Transaction{
		{Name: "NewFoosPerIPAddress", Id: "10.0.0.2"},
		{Name: "NewOrdersPerAccount", Id: "7"},
	}})
	want := map[string]float64{
		"NewFoosPerIPAddress/allowed":          2,
		"NewOrdersPerAccount/allowed":          1,
		"NewRegistrationsPerIPAddress/allowed": 1,
		"NewRegistrationsPerIPAddress/denied":  1,
		"NewRegistrationsPerIPAddress/error":   1,
		"other/allowed":                        2,
		"other/error":                          1,
	}
	got := map[string]float64{}
	latency := map[string]uint64{}
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch f.GetName() {
			case "sluice_kv_decisions_total":
				got[labels["limit"]+"/"+labels["result"]] = m.GetCounter().GetValue()
			case "sluice_kv_decision_duration_seconds":
				latency[labels["method"]] = m.GetHistogram().GetSampleCount()
			}
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("sluice_kv_decisions_total by limit/result:\ngot  %v\nwant %v", got, want)
	}
	if wantLatency := map[string]uint64{"spend": 7, "batch": 1}; !maps.Equal(latency, wantLatency) {
		t.Errorf("sluice_kv_decision_duration_seconds samples by method: got %v, want %v", latency, wantLatency)
	}
}

func TestKVMetricsCapTheLimitLabels(t *testing.T) {
	t.Parallel()
	m := newKVMetrics(nil)
	for i := range maxLimitLabels {
		m.labels[strings.Repeat("x", i+1)] = new(resultCounters)
	}
	b := limits.Bucket{Name: limits.Name{Text: "NewOrdersPerAccount", BuiltIn: true}}
	if got := m.label(nil, "NewOrdersPerAccount", b); got != "other" {
		t.Errorf("past %d labels: got label %q, want other", maxLimitLabels, got)
	}
	if got := m.label(nil, "x", b); got != "x" {
		t.Errorf("a label already in use: got %q, want x", got)
	}
}
