package app_test

import (
	"bytes"
	"encoding/binary"
	"net"
	"slices"
	"sort"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/app"
	"github.com/sluice-rl/sluice/store/redis/redistest"
)

// redisCalls is how many store calls the service has made to Redis.
func redisCalls(t *testing.T, ta *testApp) uint64 {
	t.Helper()
	mfs, err := ta.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "sluice_redis_call_duration_seconds" {
			var n uint64
			for _, m := range mf.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
			return n
		}
	}
	t.Fatal("no sluice_redis_call_duration_seconds metric")
	return 0
}

// askTogether sends n ShouldRateLimit calls of the shared domain, the i-th
// for the descriptor ("window", values[i%len(values)]), in one write on a
// connection of its own, and returns their answers.
func askTogether(t *testing.T, addr string, n int, values ...string) []*rlsv3.RateLimitResponse {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var buf, hb bytes.Buffer
	buf.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&buf, nil)
	fr.WriteSettings()
	enc := hpack.NewEncoder(&hb)
	for i := range n {
		msg, err := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "shared", Descriptors: []*rlcommon.RateLimitDescriptor{desc("window", values[i%len(values)])}})
		if err != nil {
			t.Fatal(err)
		}
		body := make([]byte, 5, 5+len(msg))
		binary.BigEndian.PutUint32(body[1:], uint32(len(msg)))
		body = append(body, msg...)
		id := uint32(2*i + 1)
		hb.Reset()
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"},
			{":authority", "sluice"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true})
		fr.WriteData(id, true, body)
	}
	if _, err := nc.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	rd := http2.NewFramer(nil, nc)
	rd.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var out []*rlsv3.RateLimitResponse
	for ended := 0; ended < n; {
		f, err := rd.ReadFrame()
		if err != nil {
			t.Fatalf("after %d answers: %v", len(out), err)
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			d := f.Data()
			resp := new(rlsv3.RateLimitResponse)
			if len(d) < 5 || proto.Unmarshal(d[5:], resp) != nil {
				t.Fatalf("stream %d: an answer that does not decode: %x", f.StreamID, d)
			}
			out = append(out, resp)
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				ended++
				for _, hf := range f.Fields {
					if hf.Name == "grpc-status" && hf.Value != "0" {
						t.Fatalf("stream %d: grpc-status %s", f.StreamID, hf.Value)
					}
				}
			}
		}
	}
	return out
}

// TestCallsSentTogetherShareARedisCall checks that Envoy calls a
// connection sends together are counted in one Redis call, each answered
// with its own count, that calls counting one window together are each
// counted once, and that --grpc-batch=false counts calls one by one.
func TestCallsSentTogetherShareARedisCall(t *testing.T) {
	srv := redistest.StartSingle(t)
	values := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for _, batch := range []bool{true, false} {
		ta := start(t, map[string]string{"shared.yaml": sharedConfig}, func(o *app.Options) {
			o.Store, o.Redis.Addrs, o.Redis.KeyPrefix, o.GRPCBatch = "redis", []string{srv.Addr}, map[bool]string{true: "b:", false: "n:"}[batch], batch
		})
		before := redisCalls(t, ta)
		answers := askTogether(t, ta.GRPCAddr(), 8, values...)
		calls := redisCalls(t, ta) - before
		for _, a := range answers {
			if a.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(a.GetStatuses()) != 1 || a.GetStatuses()[0].GetLimitRemaining() != 99 {
				t.Fatalf("--grpc-batch=%v: answer %v, want OK with 99 remaining (each window counted once)", batch, a)
			}
		}
		switch {
		case batch && calls != 1:
			t.Errorf("--grpc-batch=true: %d Redis calls for 8 calls sent together, want 1", calls)
		case !batch && calls != 8:
			t.Errorf("--grpc-batch=false: %d Redis calls for 8 calls, want 8", calls)
		}
		// Eight calls on one window, sent together: each counted once.
		var remaining []int
		for _, a := range askTogether(t, ta.GRPCAddr(), 8, "busy") {
			remaining = append(remaining, int(a.GetStatuses()[0].GetLimitRemaining()))
		}
		sort.Ints(remaining)
		if want := []int{92, 93, 94, 95, 96, 97, 98, 99}; !slices.Equal(remaining, want) {
			t.Errorf("--grpc-batch=%v: remaining %v, want each of %v once", batch, remaining, want)
		}
	}
}
