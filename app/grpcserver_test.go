package app_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/app"
)

// Both gRPC servers (--grpc-server) give the same answers to the same
// calls: Envoy requests up to and past their limits, a health check, a
// request that does not decode, an unknown method.
func TestBothGRPCServersAnswerAlike(t *testing.T) {
	answers := map[string][]string{}
	for _, server := range []string{"sluice", "grpc-go"} {
		ta := start(t, map[string]string{"basic.yaml": basicConfig}, func(o *app.Options) { o.GRPCServer = server })
		conn, err := grpc.NewClient(ta.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var got []string
		note := func(resp proto.Message, err error) {
			s := status.Convert(err)
			got = append(got, fmt.Sprintf("%v %q %v", s.Code(), s.Message(), resp))
		}
		for range 7 {
			resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx,
				&rlsv3.RateLimitRequest{Domain: "basic", Descriptors: []*rlcommon.RateLimitDescriptor{desc("database", "users"), desc("database", "other")}})
			note(resp, err)
		}
		hr, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		note(hr, err)
		var out []byte
		bad := []byte{0x0a, 0x02, 0xff, 0xfe}
		err = conn.Invoke(ctx, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", &bad, &out, grpc.ForceCodecV2(rawCodec{}))
		note(nil, err)
		err = conn.Invoke(ctx, "/envoy.service.ratelimit.v3.RateLimitService/Nope", &bad, &out, grpc.ForceCodecV2(rawCodec{}))
		note(nil, err)
		answers[server] = got
	}
	a, b := answers["sluice"], answers["grpc-go"]
	if len(a) != len(b) {
		t.Fatalf("%d answers against %d", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("call %d:\n sluice:  %s\n grpc-go: %s", i, a[i], b[i])
		}
	}
	// The exchanges did test something: the sixth call is over the limit
	// of 5 a minute, the bad request is InvalidArgument.
	if len(a) == 10 {
		if want := "OVER_LIMIT"; !strings.Contains(a[5], want) {
			t.Errorf("the sixth call: %s, want %s", a[5], want)
		}
		if want := codes.InvalidArgument.String(); !strings.Contains(a[8], want) {
			t.Errorf("the undecodable call: %s, want %s", a[8], want)
		}
	}
}

func TestAnUnknownGRPCServerIsRefused(t *testing.T) {
	_, err := app.ParseServe([]string{"--grpc-server", "netty"}, func(string) string { return "" }, io.Discard)
	if want := `--grpc-server: "netty" is not one of sluice, grpc-go`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want an error containing %q", err, want)
	}
}
