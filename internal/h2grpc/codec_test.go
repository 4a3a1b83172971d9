package h2grpc

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// appendingCodec is the proto codec, writing answers with AppendMarshal,
// whose calls it counts.
type appendingCodec struct {
	encoding.CodecV2
	appended *atomic.Int64
}

func (c appendingCodec) AppendMarshal(dst []byte, v any) ([]byte, error) {
	c.appended.Add(1)
	return proto.MarshalOptions{}.MarshalAppend(dst, v.(proto.Message))
}

// TestAppendingCodecAnswersAsMarshal checks that answers written with an
// AppendingCodec's AppendMarshal are the answers: unary and streamed,
// empty, small, larger than a pooled buffer and than the largest one
// kept, compressed or not, in each way of running calls.
func TestAppendingCodecAnswersAsMarshal(t *testing.T) {
	modes(t, func(t *testing.T, opts Options) {
		var appended atomic.Int64
		opts.Codec = appendingCodec{CodecV2: encoding.GetCodecV2("proto"), appended: &appended}
		_, _, _, addr := serve(t, opts)
		cc := dial(t, addr)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var want int64
		for _, n := range []int{0, 1, 100, 600, 70 << 10} {
			in := bytes.Repeat([]byte{'a' + byte(n%26)}, n)
			for _, zip := range []bool{false, true} {
				var copts []grpc.CallOption
				if zip {
					copts = append(copts, grpc.UseCompressor(gzip.Name))
				}
				got, err := call(ctx, cc, "Unary", in, copts...)
				if err != nil || !bytes.Equal(got, in) {
					t.Fatalf("%d bytes, compressed %v: got %d bytes, %v", n, zip, len(got), err)
				}
				want++
			}
		}
		cs, err := cc.NewStream(ctx, bidiDesc, "/test.Echo/Bidi")
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{0, 7, 600} {
			in := wrapperspb.Bytes(bytes.Repeat([]byte{'s'}, n))
			if err := cs.SendMsg(in); err != nil {
				t.Fatal(err)
			}
			var out wrapperspb.BytesValue
			if err := cs.RecvMsg(&out); err != nil || !proto.Equal(&out, in) {
				t.Fatalf("streamed %d bytes: got %d bytes, %v", n, len(out.GetValue()), err)
			}
			want++
		}
		if err := cs.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if got := appended.Load(); got != want {
			t.Errorf("AppendMarshal wrote %d answers, want %d", got, want)
		}
	})
}

// failingCodec fails every request: with its status when it has one,
// else with a plain error.
type failingCodec struct {
	encoding.CodecV2
	stat *status.Status
}

func (c failingCodec) Unmarshal(mem.BufferSlice, any) error {
	if c.stat != nil {
		return c.stat.Err()
	}
	return errors.New("no")
}

// TestCodecErrorsStatus checks that a request the codec fails to decode
// answers the status the codec's error carries, and Internal, as grpc-go
// answers, when it carries none.
func TestCodecErrorsStatus(t *testing.T) {
	for _, c := range []struct {
		stat *status.Status
		want codes.Code
	}{
		{status.New(codes.InvalidArgument, "bad request"), codes.InvalidArgument},
		{nil, codes.Internal},
	} {
		_, _, _, addr := serve(t, Options{Codec: failingCodec{CodecV2: encoding.GetCodecV2("proto"), stat: c.stat}})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := call(ctx, dial(t, addr), "Unary", []byte("x"))
		cancel()
		if got := status.Code(err); got != c.want {
			t.Errorf("codec status %v: got %v (%v), want %v", c.stat, got, err, c.want)
		}
	}
}
