package app_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// rawCodec sends and receives bytes as they are, so a test can send what
// a Go protobuf client never would.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// A gRPC request that does not decode is the caller's error:
// InvalidArgument, not Internal; a good one is still answered.
func TestUndecodableGRPCRequestIsInvalidArgument(t *testing.T) {
	ta := start(t, map[string]string{"basic.yaml": basicConfig}, nil)
	conn, err := grpc.NewClient(ta.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, tt := range []struct {
		name, method string
		msg          []byte
		want         codes.Code
	}{
		{"invalid UTF-8 in the domain", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", []byte{0x0a, 0x02, 0xff, 0xfe}, codes.InvalidArgument},
		{"a truncated message", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", []byte{0x0a, 0x09, 'b'}, codes.InvalidArgument},
		{"invalid UTF-8 in a health check's service name", "/grpc.health.v1.Health/Check", []byte{0x0a, 0x01, 0xff}, codes.InvalidArgument},
		{"a valid health check", "/grpc.health.v1.Health/Check", []byte{}, codes.OK},
	} {
		t.Run(tt.name+" answers "+tt.want.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var out []byte
			err := conn.Invoke(ctx, tt.method, &tt.msg, &out, grpc.ForceCodecV2(rawCodec{}))
			if got := status.Code(err); got != tt.want {
				t.Errorf("got %s (%v), want %s", got, err, tt.want)
			}
		})
	}
	// The service still answers good requests afterwards.
	if resp := ta.ask(t, "basic", desc("key", "a")); resp.GetOverallCode() == 0 {
		t.Errorf("a good request after bad ones: got %v, want an answer", resp)
	}
}
