package server_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/descriptors"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/server"
	"github.com/sluice-rl/sluice/store/memory"
)

// FuzzShouldRateLimit sends ShouldRateLimit whatever request the bytes
// decode to, against the example configurations (nested rules, wildcards,
// unlimited, shadow mode, replaces, GCRA bursts, every unit), with dynamic
// metadata on and small caps. Whatever the request, the service answers a
// status per descriptor with the overall code the statuses imply, or
// refuses it as InvalidArgument: the memory store cannot fail, so any
// other error, or a panic, is a bug.
func FuzzShouldRateLimit(f *testing.F) {
	var domains []*descriptors.Domain
	files, err := filepath.Glob(filepath.Join("..", "examples", "config", "*.yaml"))
	if err != nil || len(files) == 0 {
		f.Fatalf("example configurations: %v (%d files)", err, len(files))
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		d, err := descriptors.Parse(name, data)
		if err != nil {
			f.Fatal(err)
		}
		domains = append(domains, d)
	}
	cfg, err := descriptors.New(domains...)
	if err != nil {
		f.Fatal(err)
	}
	rls := server.NewRLS(server.RLSOptions{
		// A bounded store: a long run's million keys evict each other.
		Limiter:         limiter.New(memory.New(memory.Options{MaxBytes: 32 << 20}), clock.NewFake(clock.New().Now())),
		DynamicMetadata: true,
		MaxDescriptors:  8,
		MaxEntries:      4,
		MaxEntryBytes:   64,
	})
	rls.SetConfig(cfg)

	entry := func(kv ...string) []*rlcommon.RateLimitDescriptor_Entry {
		var es []*rlcommon.RateLimitDescriptor_Entry
		for i := 0; i+1 < len(kv); i += 2 {
			es = append(es, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		return es
	}
	seeds := []*rlsv3.RateLimitRequest{
		{Domain: "edge_proxy", Descriptors: []*rlcommon.RateLimitDescriptor{
			{Entries: entry("remote_address", "10.0.0.1")},
			{Entries: entry("remote_address", "10.0.0.1", "path", "/login")},
			{Entries: entry("remote_address", "10.0.0.1", "path", "/export/a.csv")},
		}},
		{Domain: "messaging", HitsAddend: 3, Descriptors: []*rlcommon.RateLimitDescriptor{
			{Entries: entry("message_type", "marketing", "to_number", "2061111111")},
			{Entries: entry("to_number", "2061111111"), HitsAddend: wrapperspb.UInt64(0)},
			{Entries: entry("to_number", "2061111111"), HitsAddend: wrapperspb.UInt64(2), IsNegativeHits: true},
		}},
		{Domain: "mongo_cps", Descriptors: []*rlcommon.RateLimitDescriptor{
			{Entries: entry("database", "users"), Limit: &rlcommon.RateLimitDescriptor_RateLimitOverride{
				RequestsPerUnit: 7, Unit: typev3.RateLimitUnit_MINUTE}},
		}},
		{Domain: "bench", Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: entry("k0", "v1")}, {Entries: entry("k1", "v1")}}},
		{Domain: "unknown", Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: entry("a", "b")}}},
		{Domain: "edge_proxy"},
	}
	for _, req := range seeds {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		req := new(rlsv3.RateLimitRequest)
		if proto.Unmarshal(data, req) != nil {
			return // gRPC refuses what does not decode before the service sees it
		}
		resp, err := rls.ShouldRateLimit(context.Background(), req)
		if err != nil {
			if code := status.Code(err); code != codes.InvalidArgument {
				t.Fatalf("request %v: error %v (code %v), want InvalidArgument or an answer", req, err, code)
			}
			if resp != nil {
				t.Fatalf("request %v: both an answer and the error %v", req, err)
			}
			return
		}
		if len(resp.GetStatuses()) != len(req.GetDescriptors()) {
			t.Fatalf("request %v: %d statuses for %d descriptors", req, len(resp.GetStatuses()), len(req.GetDescriptors()))
		}
		over := false
		for i, st := range resp.GetStatuses() {
			switch st.GetCode() {
			case rlsv3.RateLimitResponse_OK:
			case rlsv3.RateLimitResponse_OVER_LIMIT:
				over = true
			default:
				t.Fatalf("request %v: status %d has code %v", req, i, st.GetCode())
			}
		}
		switch resp.GetOverallCode() {
		case rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT:
		default:
			t.Fatalf("request %v: overall code %v", req, resp.GetOverallCode())
		}
		if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT && !over {
			t.Fatalf("request %v: OVER_LIMIT overall with no descriptor over: %v", req, resp)
		}
		for _, h := range append(resp.GetResponseHeadersToAdd(), resp.GetRequestHeadersToAdd()...) {
			if !validHeader(h) {
				t.Fatalf("request %v: header %q: %q is not a valid HTTP header", req, h.GetKey(), h.GetValue())
			}
		}
	})
}

// validHeader reports whether h could go out as an HTTP header: a token
// name, and a value without control characters.
func validHeader(h *corev3.HeaderValue) bool {
	if h.GetKey() == "" {
		return false
	}
	for _, c := range []byte(h.GetKey()) {
		if c <= ' ' || c >= 0x7f || c == ':' {
			return false
		}
	}
	for _, c := range []byte(h.GetValue()) {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
