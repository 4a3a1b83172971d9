package app

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/internal/h2grpc"
	"github.com/sluice-rl/sluice/server"
)

// registerGRPCMetrics registers the gRPC server's series: its connections
// and open calls, and what its bounds refused, so that an operator sees a
// bound bite before the Envoys' errors say so. stats reads Sluice's own
// server (--grpc-server sluice); with grpc-go's, bounds is read instead,
// which sees less (no pending bytes, no connection errors, no refusals
// by grpc-go's own per-connection cap).
func (a *App) registerGRPCMetrics(sluice *h2grpc.Server, bounds *grpcGoBounds) {
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	counter := func(name, help string, labels prometheus.Labels, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels}, f)
	}
	const (
		refusedHelp = "gRPC calls refused before they ran, by the bound that refused them: max_concurrent_streams (--grpc-max-concurrent-streams), max_streams (--grpc-max-streams), max_pending_bytes (--grpc-max-pending-bytes), closing (the connection was closing)."
		lateHelp    = "gRPC unary calls reset because their request did not come whole within --http-read-timeout."
		callsHelp   = "gRPC calls open, every connection together (what --grpc-max-streams bounds)."
	)
	cs := []prometheus.Collector{
		gauge("sluice_grpc_connections", "Connections open on the gRPC listener.", func() float64 {
			if g, ok := a.grpcLn.(*connGuard); ok {
				return float64(g.open())
			}
			return 0
		}),
	}
	switch {
	case sluice != nil:
		cs = append(cs,
			gauge("sluice_grpc_calls_open", callsHelp, func() float64 { return float64(sluice.Stats().Calls) }),
			gauge("sluice_grpc_pending_bytes", "Bytes the gRPC server holds for requests not whole yet (what --grpc-max-pending-bytes bounds).", func() float64 { return float64(sluice.Stats().PendingBytes) }),
			counter("sluice_grpc_late_requests_total", lateHelp, nil, func() float64 { return float64(sluice.Stats().LateRequests) }),
			counter("sluice_grpc_connection_errors_total", "gRPC connections ended for an HTTP/2 connection error (a GOAWAY with an error code: a protocol error, a flood, a flow-control violation).", nil, func() float64 { return float64(sluice.Stats().ConnectionErrors) }),
		)
		for r := range h2grpc.NumRefusals {
			cs = append(cs, counter("sluice_grpc_calls_refused_total", refusedHelp, prometheus.Labels{"reason": r.String()}, func() float64 { return float64(sluice.Stats().Refused[r]) }))
		}
	case bounds != nil:
		cs = append(cs,
			gauge("sluice_grpc_calls_open", callsHelp, func() float64 { open, _, _ := bounds.stats(); return float64(open) }),
			counter("sluice_grpc_late_requests_total", lateHelp, nil, func() float64 { _, _, late := bounds.stats(); return float64(late) }),
			counter("sluice_grpc_calls_refused_total", refusedHelp, prometheus.Labels{"reason": h2grpc.RefusedMaxStreams.String()}, func() float64 { _, refused, _ := bounds.stats(); return float64(refused) }),
		)
	}
	a.registry.MustRegister(cs...)
}

// registerHTTPMetrics registers the HTTP listeners' series: the room for
// request bodies being read, which all of them share.
func (a *App) registerHTTPMetrics() {
	a.registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_http_body_bytes_pending",
			Help: "Bytes of HTTP request bodies being read past their first 16 KiB, which share 64 MiB for the process."},
			func() float64 { pending, _ := server.BodyRoom(); return float64(pending) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_http_bodies_refused_total",
			Help: "HTTP requests answered 503 because their body found no room in the 64 MiB bodies being read share."},
			func() float64 { _, refused := server.BodyRoom(); return float64(refused) }),
	)
}
