package app

import (
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// TestRequestCodecAllocations checks that the gRPC codec decodes the usual
// Envoy request through rlswire, in the few allocations of its arrays
// (protobuf makes 26 for five descriptors), or in one with arrays h2grpc
// releases, to what protobuf decodes; and a request rlswire leaves alone
// (a limit override) through protobuf.
func TestRequestCodecAllocations(t *testing.T) {
	c := newRequestCodec()
	want := &rlsv3.RateLimitRequest{Domain: "bench", HitsAddend: 2}
	for _, k := range []string{"k0", "k1", "k2", "k3", "k4"} {
		want.Descriptors = append(want.Descriptors, &ratelimitv3.RateLimitDescriptor{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: k, Value: "v-" + k}}})
	}
	b, err := proto.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	data := mem.BufferSlice{mem.SliceBuffer(b)}
	var got rlsv3.RateLimitRequest
	allocs := testing.AllocsPerRun(100, func() {
		if err := c.Unmarshal(data, &got); err != nil {
			t.Fatal(err)
		}
	})
	if err := c.check(&got); err != nil || !proto.Equal(&got, want) {
		t.Fatalf("got %v (%v), want %v", &got, err, want)
	}
	if allocs > 5 {
		t.Errorf("%.0f allocations, want at most 5", allocs)
	}

	// Through h2grpc, which releases the arrays once the call is over:
	// only the copy of the message's bytes is allocated.
	allocs = testing.AllocsPerRun(100, func() {
		r, err := c.UnmarshalReleasing(b, &got)
		if err != nil || r == nil {
			t.Fatalf("got %v, %v, want arrays to release", r, err)
		}
		r.Release()
	})
	r, err := c.UnmarshalReleasing(b, &got)
	if err != nil || r == nil || !proto.Equal(&got, want) {
		t.Fatalf("got %v, %v, %v, want %v and arrays to release", &got, r, err, want)
	}
	r.Release()
	// The race detector's sync.Pool drops items on purpose (make allocs
	// runs this without it).
	if allocs > 1 && !raceEnabled {
		t.Errorf("released: %.0f allocations, want at most 1", allocs)
	}

	want.Descriptors[0].Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 7}
	if b, err = proto.Marshal(want); err != nil {
		t.Fatal(err)
	}
	var override rlsv3.RateLimitRequest
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &override); err != nil {
		t.Fatal(err)
	}
	if err := c.check(&override); err != nil || !proto.Equal(&override, want) {
		t.Fatalf("with a limit override: got %v (%v), want %v", &override, err, want)
	}
	var released rlsv3.RateLimitRequest
	if r, err := c.UnmarshalReleasing(b, &released); r != nil || err != nil {
		t.Fatalf("with a limit override: got %v, %v, want nothing to release", r, err)
	}
	if err := c.check(&released); err != nil || !proto.Equal(&released, want) {
		t.Fatalf("with a limit override, released: got %v (%v), want %v", &released, err, want)
	}
}

// TestRequestCodecAppendMarshal checks that the codec appends what the
// proto codec marshals, after what dst holds, and refuses what is not a
// message as it does.
func TestRequestCodecAppendMarshal(t *testing.T) {
	c := newRequestCodec()
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT,
		Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: rlsv3.RateLimitResponse_OVER_LIMIT, LimitRemaining: 3}}}
	want, err := c.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.AppendMarshal([]byte("prefix"), resp)
	if err != nil || string(got) != "prefix"+string(want.Materialize()) {
		t.Errorf("got %q, %v, want the prefix and %q", got, err, want.Materialize())
	}
	if _, err := c.AppendMarshal(nil, "not a message"); err == nil {
		t.Error("a string was marshaled")
	}
}
