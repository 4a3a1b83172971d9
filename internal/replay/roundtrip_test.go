package replay

import (
	"bytes"
	"testing"
	"time"
	"unicode/utf8"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/server"
)

// FuzzRequestLineRoundTrip holds the request log's writer and replay's
// reader to each other: whatever request the service logs, replay reads
// back the same request at the same instant.
func FuzzRequestLineRoundTrip(f *testing.F) {
	f.Add("edge", "client", "10.0.0.1", uint32(0), uint64(0), false, int64(1_800_000_000_123_456_789), uint32(0))
	f.Add("e\"d\\ge", "pa\nth", "/é\t\x01😀", uint32(3), uint64(2), true, int64(-1), uint32(60))
	f.Fuzz(func(t *testing.T, domain, key, value string, hits uint32, descHits uint64, negative bool, nanos int64, perUnit uint32) {
		for _, s := range []string{domain, key, value} {
			if !utf8.ValidString(s) {
				return // gRPC and /json refuse such strings before any log
			}
		}
		d := &rlcommon.RateLimitDescriptor{
			Entries:        []*rlcommon.RateLimitDescriptor_Entry{{Key: key, Value: value}, {Key: value, Value: key}},
			IsNegativeHits: negative,
		}
		if descHits > 0 {
			d.HitsAddend = wrapperspb.UInt64(descHits - 1)
		}
		if perUnit > 0 {
			d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: perUnit, Unit: typev3.RateLimitUnit(perUnit % 8), UnitMultiplier: wrapperspb.UInt32(perUnit % 3)}
		}
		req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits, Descriptors: []*rlcommon.RateLimitDescriptor{d, {}}}
		at := time.Unix(0, nanos).UTC()
		line := server.AppendRequestLine(nil, at, req)
		gotAt, got, err := newDecoder().decode(bytes.TrimSuffix(line, []byte{'\n'}))
		if err != nil {
			t.Fatalf("replay cannot read the logged line %s: %v", line, err)
		}
		if !gotAt.Equal(at) {
			t.Errorf("got time %s, want %s", gotAt, at)
		}
		if !proto.Equal(got, req) {
			t.Errorf("got %v, want %v", got, req)
		}
	})
}
