package server

import (
	"context"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// Decide answers req as ShouldRateLimit does, per-rule statistics
// included, but without the call's own metrics (its count and latency),
// tracing or error logging: for sluice replay, which replays a request log
// (see RequestLog) on a simulated clock, where a call takes no time. Its
// error is the one ShouldRateLimit would map to a gRPC status; see
// ErrorMessage.
func (s *RLS) Decide(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return s.shouldRateLimit(ctx, req)
}
