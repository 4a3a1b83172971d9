package h2grpc

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// events is a log of what a test's codec and handlers did, in order.
type events struct {
	mu  sync.Mutex // protects log
	log []string
}

func (e *events) add(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.log = append(e.log, fmt.Sprintf(format, args...))
}

// take returns the log so far and empties it.
func (e *events) take() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := strings.Join(e.log, ", ")
	e.log = nil
	return s
}

// released logs its release under its name.
type released struct {
	ev   *events
	name string
}

func (r *released) Release() { r.ev.add("release %s", r.name) }

// releasingCodec is the proto codec, whose unary requests are released
// once their call is over; it logs each request released and each answer
// encoded.
type releasingCodec struct {
	encoding.CodecV2
	ev *events
}

func (c releasingCodec) UnmarshalReleasing(data []byte, v any) (Releaser, error) {
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, v); err != nil {
		return nil, err
	}
	return &released{c.ev, "request " + string(v.(*wrapperspb.BytesValue).GetValue())}, nil
}

func (c releasingCodec) Marshal(v any) (mem.BufferSlice, error) {
	c.ev.add("encode %s", v.(*wrapperspb.BytesValue).GetValue())
	return c.CodecV2.Marshal(v)
}

// releasingDesc is test.Echo whose unary handler registers its answer
// for release (failing the request "fail"), and whose stream checks that
// OnDone refuses a streaming call.
func releasingDesc(ev *events) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: "test.Echo",
		HandlerType: (*echoServer)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Unary", Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.BytesValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			return releasingAnswer(ctx, ev, in)
		}}},
		Streams: []grpc.StreamDesc{{StreamName: "Bidi", ServerStreams: true, ClientStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error {
				ev.add("stream OnDone %v", OnDone(ss.Context(), &released{ev, "stream"}))
				return nil
			}}},
	}
}

// releasingAnswer echoes in, its answer registered for release, or fails "fail".
func releasingAnswer(ctx context.Context, ev *events, in *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error) {
	v := string(in.GetValue())
	if !OnDone(ctx, &released{ev, "answer " + v}) {
		ev.add("OnDone refused")
	}
	if v == "fail" {
		return nil, fmt.Errorf("failed")
	}
	return wrapperspb.Bytes([]byte(v)), nil
}

// TestOnDoneReleasesOnceTheAnswerIsEncoded checks that what a unary call
// registers, its codec's request and its handler's answer, is released
// once, after the answer is encoded, and also when the call fails; in
// each way of running calls, batches included. OnDone refuses a
// streaming call and a context that is no call.
func TestOnDoneReleasesOnceTheAnswerIsEncoded(t *testing.T) {
	if OnDone(context.Background(), &released{}) {
		t.Error("OnDone accepted a context that is no call")
	}
	ways := []struct {
		name  string
		opts  Options
		batch bool
	}{
		{"goroutine-per-call", Options{}, false},
		{"workers", Options{Workers: 2}, false},
		{"inline", Options{Inline: true}, false},
		{"batch", Options{Workers: 2}, true},
	}
	for _, w := range ways {
		t.Run(w.name, func(t *testing.T) {
			ev := &events{}
			w.opts.Codec = releasingCodec{CodecV2: encoding.GetCodecV2("proto"), ev: ev}
			s := NewServer(w.opts)
			s.RegisterService(releasingDesc(ev), nil)
			if w.batch {
				s.HandleBatch("/test.Echo/Unary", func(calls []Call) {
					for i := range calls {
						c := &calls[i]
						in := new(wrapperspb.BytesValue)
						if c.Err = c.Decode(in); c.Err == nil {
							c.Reply, c.Err = releasingAnswer(c.Context(), ev, in)
						}
					}
				})
			}
			cc := dial(t, listenAndServe(t, s))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			if got, err := call(ctx, cc, "Unary", []byte("a")); err != nil || string(got) != "a" {
				t.Fatalf("got %q, %v", got, err)
			}
			if got, want := ev.take(), "encode a, release request a, release answer a"; got != want {
				t.Errorf("a call: %s, want %s", got, want)
			}
			if _, err := call(ctx, cc, "Unary", []byte("fail")); err == nil {
				t.Fatal("the call did not fail")
			}
			if got, want := ev.take(), "release request fail, release answer fail"; got != want {
				t.Errorf("a failed call: %s, want %s", got, want)
			}
			// More than the two the stream holds without allocating.
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					v := fmt.Sprint("c", i)
					if got, err := call(ctx, cc, "Unary", []byte(v)); err != nil || string(got) != v {
						t.Errorf("got %q, %v", got, err)
					}
				}()
			}
			wg.Wait()
			log := ev.take()
			for i := range 8 {
				for _, e := range []string{"encode", "release request", "release answer"} {
					if n := strings.Count(log+", ", fmt.Sprintf("%s c%d, ", e, i)); n != 1 {
						t.Errorf("%q %d times in %s", fmt.Sprintf("%s c%d", e, i), n, log)
					}
				}
				if a, b := strings.Index(log, fmt.Sprintf("encode c%d,", i)), strings.Index(log, fmt.Sprintf("release answer c%d", i)); a > b {
					t.Errorf("c%d's answer released before it was encoded: %s", i, log)
				}
			}

			st, err := cc.NewStream(metadata.NewOutgoingContext(ctx, nil), bidiDesc, "/test.Echo/Bidi")
			if err != nil {
				t.Fatal(err)
			}
			if err := st.CloseSend(); err != nil {
				t.Fatal(err)
			}
			if err := st.RecvMsg(new(wrapperspb.BytesValue)); err == nil {
				t.Fatal("the stream sent a message")
			}
			if got, want := ev.take(), "stream OnDone false"; got != want {
				t.Errorf("a stream: %s, want %s", got, want)
			}
		})
	}
}
