package server

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/descriptors"
	"github.com/sluice-rl/sluice/stats"
)

//go:embed dashboard
var dashboardFiles embed.FS

// MaxDashboardRules bounds the rules one state.json lists, the most
// pressed first; the count of the rest is reported as rules_omitted.
const MaxDashboardRules = 200

// dashboardSamples bounds the totals the dashboard keeps to compute rates:
// at most this many reads, at least dashboardSpacing apart and none older
// than dashboardMaxAge, so rates cover the last few seconds.
const (
	dashboardSamples = 5
	dashboardSpacing = time.Second
	dashboardMaxAge  = 10 * time.Second
)

// StoreStatus is the store as the dashboard shows it.
type StoreStatus struct {
	Kind         string  `json:"kind"`           // memory, redis, memcache, ...
	OnStoreError string  `json:"on_store_error"` // the --on-store-error policy in force
	Healthy      bool    `json:"healthy"`        // the last ping answered
	Error        string  `json:"error,omitempty"`
	PingMillis   float64 `json:"ping_ms"` // round trip of the last ping, in milliseconds
}

// ConfigStatus is the descriptor configuration's origin and last load, as
// the dashboard shows it.
type ConfigStatus struct {
	Source     string    `json:"source"` // files, runtime, xds, or none (no --config)
	Location   string    `json:"location"`
	LastReload time.Time `json:"last_reload"` // zero before the first load
	LastOK     bool      `json:"last_reload_ok"`
	LastError  string    `json:"last_error,omitempty"`
	Loads      uint64    `json:"loads"`
	Failures   uint64    `json:"failures"`
}

// DashboardOptions are where the dashboard reads from. Every field may be
// left zero; the page then leaves out what it cannot know.
type DashboardOptions struct {
	RLS      *RLS                                  // the Envoy service: its config and per-rule statistics
	Gatherer prometheus.Gatherer                   // for the key-value decisions (sluice_kv_decisions_total) and the listeners' series
	Clock    clock.Clock                           // defaults to the real clock
	Store    func(ctx context.Context) StoreStatus // pings the store
	Config   func() ConfigStatus
	Adaptive func() *AdaptiveState // the adaptive proxy's state; nil when not running
}

// AdaptiveState is the adaptive proxy's part of state.json: per key (URL
// or route) the window's calls, mean latency and allowed rate, and per
// rule the configured curve of allowed rate against latency.
type AdaptiveState struct {
	WindowSeconds float64         `json:"window_seconds"` // what counts and rates cover
	Curves        []AdaptiveCurve `json:"curves"`
	Keys          []AdaptiveKey   `json:"keys"`
}

// AdaptiveCurve is one rule's allowed rate (per window) at latencies from
// 0 to past its MaxValue, in milliseconds.
type AdaptiveCurve struct {
	Rule   string       `json:"rule"`
	Points [][2]float64 `json:"points"` // [latency ms, allowed rate]
	Denied uint64       `json:"denied"` // 429s answered under the rule
}

// AdaptiveKey is one tracked key's window.
type AdaptiveKey struct {
	Key    string  `json:"key"`
	Rule   string  `json:"rule"`
	Calls  int64   `json:"calls"`
	AvgMs  float64 `json:"avg_ms"`
	Rate   float64 `json:"allowed_rate"`
	Errors int64   `json:"errors"`
}

// Dashboard serves the debug port's live page and its data, state.json,
// which scripts may read too. Create it with NewDashboard; it is safe for
// concurrent use.
type Dashboard struct {
	o DashboardOptions

	mu      sync.Mutex // protects samples
	samples []dashSample
}

// dashSample is one read of the cumulative counters.
type dashSample struct {
	at          time.Time
	requests    uint64
	storeErrors uint64
	rules       map[string]ruleCounts
}

// ruleCounts are one rule's cumulative hits.
type ruleCounts struct{ total, over, near, shadow uint64 }

// NewDashboard returns a dashboard reading from o.
func NewDashboard(o DashboardOptions) *Dashboard {
	if o.Clock == nil {
		o.Clock = clock.New()
	}
	return &Dashboard{o: o}
}

// DashboardRule is one rule's row in state.json: cumulative hits and their
// rates, per second, over the window.
type DashboardRule struct {
	Domain     string  `json:"domain"`
	Key        string  `json:"key"`
	Limit      string  `json:"limit"`
	Shadow     bool    `json:"shadow_mode"`
	Total      uint64  `json:"total_hits"`
	Over       uint64  `json:"over_limit"`
	Near       uint64  `json:"near_limit"`
	ShadowHits uint64  `json:"shadow_mode_hits"`
	CallsRate  float64 `json:"calls_per_second"`
	OverRate   float64 `json:"over_limit_per_second"`
	NearRate   float64 `json:"near_limit_per_second"`
	ShadowRate float64 `json:"shadow_mode_per_second"`
	Pressure   float64 `json:"pressure"` // over-limit share of the calls in the window, 0 to 1
}

// DashboardState is state.json.
type DashboardState struct {
	Now            time.Time          `json:"now"`
	WindowSeconds  float64            `json:"window_seconds"` // what the rates cover; 0 on the first read
	Requests       uint64             `json:"requests"`
	RequestsRate   float64            `json:"requests_per_second"`
	StoreErrors    uint64             `json:"store_errors"` // calls failed because the store was unavailable
	StoreErrorRate float64            `json:"store_errors_per_second"`
	Domains        []string           `json:"domains"`
	Rules          []DashboardRule    `json:"rules"`
	RulesOmitted   int                `json:"rules_omitted"`
	Adaptive       *AdaptiveState     `json:"adaptive,omitempty"`
	HotKeys        []HotKey           `json:"hot_keys"` // the busiest request keys of the last 30 to 60 seconds, estimated from a sample
	UnknownDomains map[string]uint64  `json:"unknown_domains"`
	Store          *StoreStatus       `json:"store,omitempty"`
	Config         *DashboardConfig   `json:"config,omitempty"`
	KV             []DashboardKVLimit `json:"kv"`
	// Listeners is what the listeners' bounds refused, read from their
	// metrics; nil where there are none (sluice proxy).
	Listeners *DashboardListeners `json:"listeners,omitempty"`
}

// DashboardListeners is the listeners' part of state.json: the gRPC port's
// connections and calls, and what the bounds of it and of the HTTP
// listeners refused (docs/operations.md lists the series).
type DashboardListeners struct {
	GRPCConnections  uint64            `json:"grpc_connections"`
	GRPCCalls        uint64            `json:"grpc_calls_open"`
	GRPCPendingBytes uint64            `json:"grpc_pending_bytes"`
	GRPCRefused      map[string]uint64 `json:"grpc_calls_refused"` // by reason
	GRPCLate         uint64            `json:"grpc_late_requests"`
	GRPCConnErrors   uint64            `json:"grpc_connection_errors"`
	BodiesRefused    uint64            `json:"http_bodies_refused"`
}

// listeners reads the listeners' series from mfs; nil when there are
// none.
func listeners(mfs []*dto.MetricFamily) *DashboardListeners {
	var l *DashboardListeners
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, "sluice_grpc_") && !strings.HasPrefix(name, "sluice_http_") {
			continue
		}
		if l == nil {
			l = &DashboardListeners{GRPCRefused: map[string]uint64{}}
		}
		field := map[string]*uint64{
			"sluice_grpc_connections":             &l.GRPCConnections,
			"sluice_grpc_calls_open":              &l.GRPCCalls,
			"sluice_grpc_pending_bytes":           &l.GRPCPendingBytes,
			"sluice_grpc_late_requests_total":     &l.GRPCLate,
			"sluice_grpc_connection_errors_total": &l.GRPCConnErrors,
			"sluice_http_bodies_refused_total":    &l.BodiesRefused,
		}[name]
		for _, m := range mf.GetMetric() {
			v := uint64(m.GetGauge().GetValue() + m.GetCounter().GetValue())
			if field != nil {
				*field = v
				continue
			}
			if name == "sluice_grpc_calls_refused_total" {
				for _, lp := range m.GetLabel() {
					if lp.GetName() == "reason" {
						l.GRPCRefused[lp.GetValue()] = v
					}
				}
			}
		}
	}
	return l
}

// DashboardConfig is the configuration part of state.json.
type DashboardConfig struct {
	ConfigStatus
	Hash  string `json:"hash"` // of the loaded rules as /rlconfig lists them
	Rules int    `json:"rules"`
}

// DashboardKVLimit counts key-value decisions for one limit name.
type DashboardKVLimit struct {
	Limit   string `json:"limit"`
	Allowed uint64 `json:"allowed"`
	Denied  uint64 `json:"denied"`
	Error   uint64 `json:"error"`
}

// Handler serves the page at / and /dashboard, its assets under
// /dashboard/, and the data at /dashboard/state.json.
func (d *Dashboard) Handler() http.Handler {
	mux := http.NewServeMux()
	assets, _ := fs.Sub(dashboardFiles, "dashboard") // a compile-time path; cannot fail
	files := http.FileServerFS(assets)
	page := func(w http.ResponseWriter, r *http.Request) {
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/"
		files.ServeHTTP(w, r2)
	}
	mux.HandleFunc("GET /{$}", page)
	mux.HandleFunc("GET /dashboard", page)
	mux.HandleFunc("GET /dashboard/{$}", page)
	mux.Handle("GET /dashboard/", http.StripPrefix("/dashboard", files))
	mux.HandleFunc("GET /dashboard/state.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", " ")
		_ = enc.Encode(d.State(r.Context()))
	})
	return mux
}

// State reads everything the dashboard shows.
func (d *Dashboard) State(ctx context.Context) DashboardState {
	now := d.o.Clock.Now()
	st := DashboardState{Now: now, UnknownDomains: map[string]uint64{}, Domains: []string{}, Rules: []DashboardRule{}, KV: []DashboardKVLimit{}, HotKeys: []HotKey{}}
	var cfg *descriptors.Config
	var sts *stats.Stats
	if d.o.RLS != nil {
		cfg = d.o.RLS.Config()
		st.HotKeys = d.o.RLS.hot.top(now)
		if m := d.o.RLS.opts.Metrics; m != nil {
			sts = m.Stats()
		}
	}
	cur := dashSample{at: now, rules: map[string]ruleCounts{}}
	if sts != nil {
		cur.requests, cur.storeErrors = sts.TotalRequests.Load(), sts.RedisError.Load()
		for _, r := range sts.Rules() {
			cur.rules[r.Key] = ruleCounts{r.TotalHits.Load(), r.OverLimit.Load(), r.NearLimit.Load(), r.ShadowMode.Load()}
		}
		for _, dm := range sts.Domains() {
			st.UnknownDomains[dm.Name] = dm.NotFound.Load()
		}
	}
	base, ok := d.remember(cur)
	var secs float64
	if ok {
		secs = now.Sub(base.at).Seconds()
		st.WindowSeconds = secs
	}
	rate := func(now, then uint64) float64 {
		if secs <= 0 || now < then {
			return 0
		}
		return float64(now-then) / secs
	}
	st.Requests = cur.requests
	st.RequestsRate = rate(cur.requests, base.requests)
	st.StoreErrors, st.StoreErrorRate = cur.storeErrors, rate(cur.storeErrors, base.storeErrors)

	rows := map[string]*DashboardRule{}
	if cfg != nil {
		st.Domains = cfg.Domains()
		for _, r := range cfg.Rules() {
			if _, dup := rows[r.StatsKey]; !dup {
				rows[r.StatsKey] = &DashboardRule{Domain: r.Domain, Key: r.StatsKey, Limit: limitText(r), Shadow: r.ShadowMode}
			}
		}
	}
	for key, c := range cur.rules {
		row := rows[key]
		if row == nil {
			dom, _, _ := strings.Cut(key, ".")
			row = &DashboardRule{Domain: dom, Key: key}
			rows[key] = row
		}
		b := base.rules[key]
		row.Total, row.Over, row.Near, row.ShadowHits = c.total, c.over, c.near, c.shadow
		row.CallsRate, row.OverRate = rate(c.total, b.total), rate(c.over, b.over)
		row.NearRate, row.ShadowRate = rate(c.near, b.near), rate(c.shadow, b.shadow)
		if row.CallsRate > 0 {
			row.Pressure = min(row.OverRate/row.CallsRate, 1)
		}
	}
	for _, row := range rows {
		st.Rules = append(st.Rules, *row)
	}
	sort.Slice(st.Rules, func(i, j int) bool {
		a, b := st.Rules[i], st.Rules[j]
		if a.Pressure != b.Pressure {
			return a.Pressure > b.Pressure
		}
		if a.CallsRate != b.CallsRate {
			return a.CallsRate > b.CallsRate
		}
		if a.Over != b.Over {
			return a.Over > b.Over
		}
		if a.Total != b.Total {
			return a.Total > b.Total
		}
		return a.Key < b.Key
	})
	if len(st.Rules) > MaxDashboardRules {
		st.RulesOmitted = len(st.Rules) - MaxDashboardRules
		st.Rules = st.Rules[:MaxDashboardRules]
	}

	if d.o.Store != nil {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		s := d.o.Store(ctx)
		cancel()
		st.Store = &s
	}
	if d.o.Config != nil || cfg != nil {
		c := &DashboardConfig{}
		if d.o.Config != nil {
			c.ConfigStatus = d.o.Config()
		}
		if cfg != nil {
			sum := sha256.Sum256([]byte(cfg.String()))
			c.Hash = hex.EncodeToString(sum[:6])
			c.Rules = len(cfg.Rules())
		}
		st.Config = c
	}
	var mfs []*dto.MetricFamily
	if d.o.Gatherer != nil {
		mfs, _ = d.o.Gatherer.Gather() // what it gathered, despite an error
	}
	st.KV = kvDecisions(mfs)
	st.Listeners = listeners(mfs)
	if d.o.Adaptive != nil {
		st.Adaptive = d.o.Adaptive()
	}
	return st
}

// remember keeps cur among the samples when the newest is at least
// dashboardSpacing old, and returns the oldest sample to compute rates
// from, if any.
func (d *Dashboard) remember(cur dashSample) (dashSample, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	// After a pause in reading, old totals would average over the pause.
	for len(d.samples) > 0 && cur.at.Sub(d.samples[0].at) > dashboardMaxAge {
		d.samples = d.samples[1:]
	}
	var base dashSample
	ok := len(d.samples) > 0
	if ok {
		base = d.samples[0]
	}
	if !ok || cur.at.Sub(d.samples[len(d.samples)-1].at) >= dashboardSpacing {
		d.samples = append(d.samples, cur)
		if len(d.samples) > dashboardSamples {
			d.samples = append(d.samples[:0], d.samples[len(d.samples)-dashboardSamples:]...)
		}
	}
	return base, ok
}

// limitText writes a rule's limit for people: "50/second",
// "20 per 15 minutes", "unlimited".
func limitText(r *descriptors.Rule) string {
	if r.Unlimited {
		return "unlimited"
	}
	unit := strings.ToLower(r.Unit.String())
	s := fmt.Sprintf("%d/%s", r.RequestsPerUnit, unit)
	if r.UnitMultiplier > 1 {
		s = fmt.Sprintf("%d per %d %ss", r.RequestsPerUnit, r.UnitMultiplier, unit)
	}
	if r.Burst > 0 {
		s += fmt.Sprintf(" burst %d", r.Burst)
	}
	return s
}

// kvDecisions reads sluice_kv_decisions_total from mfs, by limit name.
func kvDecisions(mfs []*dto.MetricFamily) []DashboardKVLimit {
	out := []DashboardKVLimit{}
	byName := map[string]*DashboardKVLimit{}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_kv_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var limit, result string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "limit":
					limit = l.GetValue()
				case "result":
					result = l.GetValue()
				}
			}
			row := byName[limit]
			if row == nil {
				row = &DashboardKVLimit{Limit: limit}
				byName[limit] = row
			}
			n := uint64(m.GetCounter().GetValue())
			switch result {
			case "allowed":
				row.Allowed += n
			case "denied":
				row.Denied += n
			default:
				row.Error += n
			}
		}
	}
	for _, row := range byName {
		out = append(out, *row)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Limit < out[j].Limit })
	return out
}
