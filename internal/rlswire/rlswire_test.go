package rlswire

import (
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// request builds a request of descriptors, each a list of key, value
// pairs.
func request(domain string, descs ...[]string) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: domain}
	for _, kv := range descs {
		d := &ratelimitv3.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

func marshal(t testing.TB, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// field appends a length-delimited field to b.
func field(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

// varintField appends a varint field to b.
func varintField(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// entryBytes is an entry's message.
func entryBytes(k, v string) []byte {
	return field(field(nil, entryKey, []byte(k)), entryValue, []byte(v))
}

type wireCase struct {
	name   string
	b      []byte
	decode bool // whether Unmarshal decodes it, or leaves it to protobuf
}

func wireCases(t testing.TB) []wireCase {
	withHits := request("d", []string{"k", "v"}, []string{"a", "b"})
	withHits.HitsAddend = 7
	withHits.Descriptors[1].HitsAddend = wrapperspb.UInt64(1 << 40)
	withHits.Descriptors[0].IsNegativeHits = true
	withZeroHits := request("d", []string{"k", "v"})
	withZeroHits.Descriptors[0].HitsAddend = wrapperspb.UInt64(0)
	withLimit := request("d", []string{"k", "v"})
	withLimit.Descriptors[0].Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_MINUTE}

	desc := field(nil, descEntries, entryBytes("k", "v"))
	return []wireCase{
		{"one descriptor", marshal(t, request("edge_proxy", []string{"remote_address", "203.0.113.9"})), true},
		{"five descriptors", marshal(t, request("bench", []string{"k0", "1"}, []string{"k1", "2"}, []string{"k2", "3"}, []string{"k3", "4"}, []string{"k4", "5"})), true},
		{"nested entries", marshal(t, request("d", []string{"a", "1", "b", "2", "c", "3"}, []string{"x", "y"})), true},
		{"empty strings", marshal(t, request("", []string{"", ""}, []string{"k", ""})), true},
		{"an empty descriptor", marshal(t, request("d", []string{})), true},
		{"no descriptors", marshal(t, request("d")), true},
		{"empty message", nil, true},
		{"unicode", marshal(t, request("dömäin", []string{"ключ", "値"})), true},
		{"hits_addend", marshal(t, withHits), true},
		{"a zero hits_addend of a descriptor", marshal(t, withZeroHits), true},
		{"the domain twice: the last wins", field(field(field(nil, reqDomain, []byte("a")), reqDescriptors, desc), reqDomain, []byte("b")), true},
		{"an entry's key twice", field(nil, reqDescriptors, field(nil, descEntries, field(entryBytes("k", "v"), entryKey, []byte("k2")))), true},
		{"hits_addend over 32 bits, truncated", varintField(nil, reqHitsAddend, 1<<32+5), true},
		{"a varint of 10 bytes", append(protowire.AppendTag(nil, reqHitsAddend, protowire.VarintType), 0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00), true},
		{"a UInt64Value's value twice", field(nil, reqDescriptors, field(desc, descHitsAddend, varintField(varintField(nil, wrapperValue, 3), wrapperValue, 4))), true},
		{"is_negative_hits of 2", field(nil, reqDescriptors, varintField(desc, descIsNegativeHits, 2)), true},

		{"a limit override", marshal(t, withLimit), false},
		{"a descriptor's hits_addend twice", field(nil, reqDescriptors, field(field(desc, descHitsAddend, nil), descHitsAddend, varintField(nil, wrapperValue, 3))), false},
		{"an unknown request field", varintField(marshal(t, request("d", []string{"k", "v"})), 9, 1), false},
		{"an unknown descriptor field", field(nil, reqDescriptors, varintField(desc, 9, 1)), false},
		{"an unknown entry field", field(nil, reqDescriptors, field(nil, descEntries, varintField(entryBytes("k", "v"), 3, 1))), false},
		{"an unknown UInt64Value field", field(nil, reqDescriptors, field(desc, descHitsAddend, varintField(nil, 2, 1))), false},
		{"the domain as a varint", varintField(nil, reqDomain, 1), false},
		{"hits_addend as bytes", field(nil, reqHitsAddend, []byte("x")), false},
		{"an entry's key as a varint", field(nil, reqDescriptors, field(nil, descEntries, varintField(nil, entryKey, 1))), false},
		{"a domain not in UTF-8", field(nil, reqDomain, []byte{0xff, 'a'}), false},
		{"a value not in UTF-8", field(nil, reqDescriptors, field(nil, descEntries, entryBytes("k", "\xc3"))), false},
		{"truncated", marshal(t, request("edge_proxy", []string{"remote_address", "203.0.113.9"}))[:20], false},
		{"a length past the end", []byte{0x0a, 0x05, 'a'}, false},
		{"field number 0", []byte{0x02, 0x00}, false},
		{"a varint of 11 bytes", append(protowire.AppendTag(nil, reqHitsAddend, protowire.VarintType), 0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00), false},
		{"a group", []byte{0x0b, 0x0c}, false},
		{"longer than MaxBytes", marshal(t, request(strings.Repeat("d", MaxBytes), []string{"k", "v"})), false},
	}
}

// reused are the Arrays agrees decodes every message with again, after
// the message before.
var reused Arrays

// agrees checks that Unmarshal decodes b to what protobuf decodes, when it
// decodes b at all, and the same into reused arrays, and returns whether
// it did.
func agrees(t *testing.T, name string, b []byte) bool {
	t.Helper()
	var fast rlsv3.RateLimitRequest
	decoded := Unmarshal(b, &fast)
	var again rlsv3.RateLimitRequest
	if reused.Unmarshal(b, &again) != decoded || !proto.Equal(&again, &fast) {
		t.Errorf("%s: decoded into reused arrays to %v, want %v", name, &again, &fast)
	}
	if !decoded {
		if !proto.Equal(&fast, &rlsv3.RateLimitRequest{}) {
			t.Errorf("%s: declined, but left %v in the request", name, &fast)
		}
		return false
	}
	var slow rlsv3.RateLimitRequest
	if err := proto.Unmarshal(b, &slow); err != nil {
		t.Errorf("%s: decoded to %v, but protobuf fails: %v", name, &fast, err)
		return true
	}
	if !proto.Equal(&fast, &slow) {
		t.Errorf("%s: decoded to\n%v\nprotobuf decodes\n%v", name, &fast, &slow)
	}
	return true
}

// TestUnmarshalAgreesWithProtobuf checks what Unmarshal decodes and what
// it leaves to protobuf, and that what it decodes is protobuf's answer.
func TestUnmarshalAgreesWithProtobuf(t *testing.T) {
	for _, c := range wireCases(t) {
		if got := agrees(t, c.name, c.b); got != c.decode {
			t.Errorf("%s: decoded %v, want %v", c.name, got, c.decode)
		}
	}
}

// TestUnmarshalResets checks that a request used before is reset first,
// as proto.Unmarshal resets it.
func TestUnmarshalResets(t *testing.T) {
	req := request("old", []string{"a", "b"}, []string{"c", "d"})
	req.HitsAddend = 3
	if !Unmarshal(marshal(t, request("new", []string{"k", "v"})), req) {
		t.Fatal("declined a plain request")
	}
	if want := request("new", []string{"k", "v"}); !proto.Equal(req, want) {
		t.Errorf("got %v, want %v", req, want)
	}
}

// TestUnmarshalStringsOutliveTheBuffer checks that the decoded strings are
// the request's own: the caller may reuse the buffer it decoded from.
func TestUnmarshalStringsOutliveTheBuffer(t *testing.T) {
	b := marshal(t, request("domain", []string{"key", "value"}))
	var req rlsv3.RateLimitRequest
	if !Unmarshal(b, &req) {
		t.Fatal("declined a plain request")
	}
	for i := range b {
		b[i] = 'x'
	}
	if want := request("domain", []string{"key", "value"}); !proto.Equal(&req, want) {
		t.Errorf("after the buffer changed: got %v, want %v", &req, want)
	}
}

// TestUnmarshalAllocations checks that a request of five descriptors is
// decoded in five allocations: the strings, and two arrays each for the
// descriptors and the entries. protobuf's decoder makes 26.
func TestUnmarshalAllocations(t *testing.T) {
	b := marshal(t, request("bench", []string{"k0", "1"}, []string{"k1", "2"}, []string{"k2", "3"}, []string{"k3", "4"}, []string{"k4", "5"}))
	var req rlsv3.RateLimitRequest
	allocs := testing.AllocsPerRun(100, func() {
		if !Unmarshal(b, &req) {
			t.Fatal("declined a plain request")
		}
	})
	if allocs > 5 {
		t.Errorf("%.0f allocations, want at most 5", allocs)
	}
}

// TestArraysAreReused checks that Arrays decode request after request
// into the same arrays, each request as protobuf decodes it, allocating
// only the copy of its bytes; and that Release leaves no string behind.
func TestArraysAreReused(t *testing.T) {
	msgs := [][]byte{
		marshal(t, request("bench", []string{"k0", "1"}, []string{"k1", "2"}, []string{"k2", "3"}, []string{"k3", "4"}, []string{"k4", "5"})),
		marshal(t, request("edge_proxy", []string{"remote_address", "203.0.113.9", "path", "/"})),
		marshal(t, request("d", []string{"a", "b"}, []string{"c", "d", "e", "f"})),
	}
	a := Get()
	var req rlsv3.RateLimitRequest
	for round := range 3 {
		for i, b := range msgs {
			allocs := testing.AllocsPerRun(10, func() {
				if !a.Unmarshal(b, &req) {
					t.Fatalf("message %d declined", i)
				}
			})
			var want rlsv3.RateLimitRequest
			if err := proto.Unmarshal(b, &want); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(&req, &want) {
				t.Errorf("round %d, message %d: got %v, want %v", round, i, &req, &want)
			}
			if allocs > 1 {
				t.Errorf("round %d, message %d: %.0f allocations, want 1 (the strings)", round, i, allocs)
			}
		}
	}
	a.Release()
	for i := range a.descs[:cap(a.descs)] {
		if len(a.descs[:cap(a.descs)][i].Entries) != 0 || a.dptrs[:cap(a.dptrs)][i] != nil {
			t.Errorf("descriptor %d kept after Release", i)
		}
	}
	for i := range a.entries[:cap(a.entries)] {
		if e := &a.entries[:cap(a.entries)][i]; e.Key != "" || e.Value != "" || a.eptrs[:cap(a.eptrs)][i] != nil {
			t.Errorf("entry %d kept after Release: %q=%q", i, e.Key, e.Value)
		}
	}
}

func FuzzUnmarshal(f *testing.F) {
	for _, c := range wireCases(f) {
		f.Add(c.b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		agrees(t, "fuzzed", b)
	})
}

func BenchmarkUnmarshal(b *testing.B) {
	msg := marshal(b, request("bench", []string{"k0", "1"}, []string{"k1", "2"}, []string{"k2", "3"}, []string{"k3", "4"}, []string{"k4", "5"}))
	b.Run("rlswire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req rlsv3.RateLimitRequest
			if !Unmarshal(msg, &req) {
				b.Fatal("declined")
			}
		}
	})
	b.Run("rlswire, arrays reused", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req rlsv3.RateLimitRequest
			a := Get()
			if !a.Unmarshal(msg, &req) {
				b.Fatal("declined")
			}
			a.Release()
		}
	})
	b.Run("protobuf", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req rlsv3.RateLimitRequest
			if err := proto.Unmarshal(msg, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
