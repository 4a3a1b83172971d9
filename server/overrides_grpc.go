package server

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/tracing"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/limits"
)

// overridesGRPC serves sluice.v1.Overrides for a KV, with the same rules,
// credentials, messages, metrics and logs as over HTTP (overridesHTTP).
type overridesGRPC struct {
	sluicev1.UnimplementedOverridesServer
	kv *KV
}

var _ sluicev1.OverridesServer = (*overridesGRPC)(nil)

// OverridesGRPC returns the gRPC service of kv's runtime overrides,
// sluice.v1.Overrides, to register beside sluice.v1.Limits; nil when kv
// has no KVOptions.Overrides.
func (kv *KV) OverridesGRPC() sluicev1.OverridesServer {
	if kv.overrides == nil {
		return nil
	}
	return &overridesGRPC{kv: kv}
}

// overrideSpans name the span of each gRPC method, by its metric label.
var overrideSpans = map[string]string{
	methodOverrideList:   "sluice.v1.Overrides/ListOverrides",
	methodOverrideGet:    "sluice.v1.Overrides/GetOverride",
	methodOverridePut:    "sluice.v1.Overrides/PutOverride",
	methodOverrideDelete: "sluice.v1.Overrides/DeleteOverride",
}

// call runs serve for a gRPC call of method after checking the caller's
// credentials, and records its metrics, and its span when tracing.
func (g *overridesGRPC) call(ctx context.Context, method string, serve func(who string) error) (err error) {
	if t := g.kv.tracer; t != nil {
		var span trace.Span
		ctx, span = t.StartGRPC(ctx, overrideSpans[method])
		defer func() { tracing.End(span, err, tracing.KeyGRPCStatus.Int(int(status.Code(err)))) }()
	}
	start := g.kv.clock.Now()
	who, err := g.caller(ctx)
	if err == nil {
		err = serve(who)
		g.kv.metrics.observe(method, start, g.kv.clock.Now())
		g.kv.logInternal(method, err)
	} else {
		g.kv.log.Warn("key-value runtime override call refused", "method", method, "transport", "grpc")
	}
	if err != nil {
		return grpcError(err)
	}
	return nil
}

// caller checks the credentials of a gRPC call, as overrideCaller does for
// HTTP, and returns who made it.
func (g *overridesGRPC) caller(ctx context.Context) (string, error) {
	return overrideCaller(g.kv.guard, func(one AdminAuth) error { return one.allowGRPC(ctx) })
}

// ListOverrides implements sluicev1.OverridesServer.
func (g *overridesGRPC) ListOverrides(ctx context.Context, _ *sluicev1.ListOverridesRequest) (*sluicev1.ListOverridesResponse, error) {
	resp := &sluicev1.ListOverridesResponse{}
	err := g.call(ctx, methodOverrideList, func(string) error {
		list, err := g.kv.overrides.List()
		for _, o := range list {
			resp.Overrides = append(resp.Overrides, overrideProto(o))
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// GetOverride implements sluicev1.OverridesServer.
func (g *overridesGRPC) GetOverride(ctx context.Context, req *sluicev1.OverrideRef) (*sluicev1.Override, error) {
	var o limits.Override
	err := g.call(ctx, methodOverrideGet, func(string) (err error) {
		o, err = g.kv.overrides.Get(req.GetName(), req.GetId())
		return err
	})
	if err != nil {
		return nil, err
	}
	return overrideProto(o), nil
}

// PutOverride implements sluicev1.OverridesServer.
func (g *overridesGRPC) PutOverride(ctx context.Context, req *sluicev1.PutOverrideRequest) (*sluicev1.Override, error) {
	var o limits.Override
	err := g.call(ctx, methodOverridePut, func(who string) (err error) {
		spec := limits.RuntimeSpec{Name: req.GetName(), ID: req.GetId(), Burst: req.Burst, Count: req.Count, Comment: req.GetComment()}
		if p := req.GetPeriod(); p != nil {
			if err := p.CheckValid(); err != nil {
				return limiter.Invalidf("period", "runtime override: invalid period for %s: %v", req.GetName(), err)
			}
			spec.Period = p.AsDuration().String()
		}
		o, err = g.kv.overrides.Put(ctx, spec, who)
		return err
	})
	if err != nil {
		return nil, err
	}
	return overrideProto(o), nil
}

// DeleteOverride implements sluicev1.OverridesServer.
func (g *overridesGRPC) DeleteOverride(ctx context.Context, req *sluicev1.OverrideRef) (*sluicev1.Override, error) {
	var o limits.Override
	err := g.call(ctx, methodOverrideDelete, func(who string) (err error) {
		o, err = g.kv.overrides.Delete(ctx, req.GetName(), req.GetId(), who)
		return err
	})
	if err != nil {
		return nil, err
	}
	return overrideProto(o), nil
}

// overrideProto translates a runtime override into the gRPC API's.
func overrideProto(o limits.Override) *sluicev1.Override {
	p := &sluicev1.Override{Name: o.Name.Text, Id: o.ID, Key: o.Key, Burst: o.Limit.Burst, Count: o.Limit.Count,
		Period: durationpb.New(o.Limit.Period), Comment: o.Comment}
	if !o.Updated.IsZero() {
		p.Updated = timestamppb.New(o.Updated.In(time.UTC))
	}
	return p
}
