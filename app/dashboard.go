package app

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/adaptive"
	"github.com/sluice-rl/sluice/server"
)

// configStatus is the descriptor configuration's last load. The zero value
// is no load yet; it is safe for concurrent use.
type configStatus struct {
	mu sync.Mutex // protects s
	s  server.ConfigStatus
}

// record notes a load at now that failed with err, or succeeded.
func (c *configStatus) record(now time.Time, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.s.LastReload, c.s.LastOK, c.s.LastError = now, err == nil, ""
	c.s.Loads++
	if err != nil {
		c.s.Failures++
		c.s.LastError = err.Error()
	}
}

// dashboard builds the debug port's dashboard over the service.
func (a *App) dashboard() *server.Dashboard {
	source, location := "files", a.opts.ConfigPath
	switch {
	case a.opts.ConfigType == ConfigTypeXDS:
		source, location = "xds", a.opts.XDS.ServerURL
	case a.opts.RuntimeRoot != "":
		source, location = "runtime", a.opts.descriptorPath()
	case location == "":
		source = "none"
	}
	return server.NewDashboard(server.DashboardOptions{
		RLS: a.rls, Gatherer: a.registry, Clock: a.clock,
		Store: func(ctx context.Context) server.StoreStatus {
			s := server.StoreStatus{Kind: a.opts.Store, OnStoreError: a.opts.OnStoreError, Healthy: true}
			start := a.clock.Now()
			if err := a.store.Ping(ctx); err != nil {
				s.Healthy, s.Error = false, err.Error()
			}
			s.PingMillis = float64(a.clock.Now().Sub(start)) / float64(time.Millisecond)
			return s
		},
		Config: func() server.ConfigStatus {
			a.configStatus.mu.Lock()
			defer a.configStatus.mu.Unlock()
			s := a.configStatus.s
			s.Source, s.Location = source, location
			return s
		},
	})
}

// adaptiveState is the adaptive proxy's part of the dashboard: l's keys,
// its rules' curves, and the 429s per rule counted in g.
func adaptiveState(l *adaptive.Limiter, g prometheus.Gatherer) *server.AdaptiveState {
	cfg := l.Config()
	st := &server.AdaptiveState{WindowSeconds: cfg.Window.Seconds()}
	denied := map[string]uint64{}
	if mfs, err := g.Gather(); err == nil {
		for _, mf := range mfs {
			if mf.GetName() != "sluice_adaptive_denied_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					if lp.GetName() == "rule" {
						denied[lp.GetValue()] += uint64(m.GetCounter().GetValue())
					}
				}
			}
		}
	}
	for _, r := range []struct {
		name string
		rule adaptive.Rule
	}{{adaptive.RuleHTML, cfg.Rules.HTML}, {adaptive.RuleAsset, cfg.Rules.Asset}} {
		p := cfg.Params
		for _, o := range []struct {
			from *float64
			to   *float64
		}{{r.rule.MinValue, &p.MinValue}, {r.rule.MaxValue, &p.MaxValue}, {r.rule.MaxRate, &p.MaxRate}, {r.rule.MinRate, &p.MinRate}} {
			if o.from != nil {
				*o.to = *o.from
			}
		}
		if r.rule.Curve != nil {
			p.Curve = *r.rule.Curve
		}
		c := server.AdaptiveCurve{Rule: r.name, Denied: denied[r.name]}
		const steps = 48
		for i := range steps + 1 {
			ms := p.MaxValue * 1.25 * float64(i) / steps
			c.Points = append(c.Points, [2]float64{ms, p.AllowedRate(ms)})
		}
		st.Curves = append(st.Curves, c)
	}
	for _, k := range l.Stats() {
		st.Keys = append(st.Keys, server.AdaptiveKey{Key: k.Key, Rule: k.Rule, Calls: k.Count, AvgMs: k.AvgMs, Rate: k.Rate, Errors: k.Errors})
	}
	slices.SortFunc(st.Keys, func(a, b server.AdaptiveKey) int {
		if a.Calls != b.Calls {
			return cmp.Compare(b.Calls, a.Calls)
		}
		return strings.Compare(a.Key, b.Key)
	})
	if len(st.Keys) > server.MaxDashboardRules {
		st.Keys = st.Keys[:server.MaxDashboardRules]
	}
	return st
}
