package h2grpc

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// batchEcho is a batch handler for /test.Echo/Unary that answers each
// request's value with "!" added (the method's own handler answers it
// unchanged), fails the value "fail" with FailedPrecondition, waits for
// release on the value "wait", and reports each batch's size.
type batchEcho struct {
	sizes   chan int
	waiting chan struct{}
	release chan struct{}
}

func newBatchEcho() *batchEcho {
	return &batchEcho{sizes: make(chan int, 1024), waiting: make(chan struct{}, 16), release: make(chan struct{})}
}

func (b *batchEcho) handle(calls []Call) {
	select {
	case b.sizes <- len(calls):
	default:
	}
	for i := range calls {
		c := &calls[i]
		in := new(wrapperspb.BytesValue)
		if err := c.Decode(in); err != nil {
			c.Err = err
			continue
		}
		switch string(in.GetValue()) {
		case "fail":
			c.Err = status.Error(codes.FailedPrecondition, "batch says no")
			continue
		case "wait":
			b.waiting <- struct{}{}
			<-b.release
		}
		if c.Context() == nil {
			c.Err = status.Error(codes.Internal, "no context")
			continue
		}
		c.Reply = wrapperspb.Bytes(append(in.GetValue(), '!'))
	}
}

// serveBatch serves the echo service with b answering Unary's batches.
func serveBatch(t *testing.T, opts Options, b *batchEcho) (*Server, string) {
	t.Helper()
	s := NewServer(opts)
	s.RegisterService(&echoDesc, newEcho())
	s.HandleBatch("/test.Echo/Unary", b.handle)
	return s, listenAndServe(t, s)
}

// grpcFrame is msg with its gRPC message prefix.
func grpcFrame(t *testing.T, msg proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 5, 5+len(b))
	binary.BigEndian.PutUint32(out[1:], uint32(len(b)))
	return append(out, b...)
}

// answer is what a raw client read of one call.
type answer struct {
	value  string
	status string
}

// sendTogether writes one unary call per value to /test.Echo/Unary, on
// streams 1, 3, 5, …, in one write, and reads their answers.
func sendTogether(t *testing.T, addr string, values ...string) map[uint32]*answer {
	t.Helper()
	r := dialRaw(t, addr)
	var buf bytes.Buffer
	fr := http2.NewFramer(&buf, nil)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for i, v := range values {
		id := uint32(2*i + 1)
		hb.Reset()
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/test.Echo/Unary"}, {":authority", "test"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		if err := fr.WriteData(id, true, grpcFrame(t, wrapperspb.Bytes([]byte(v)))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.nc.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	r.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	answers := map[uint32]*answer{}
	ended := 0
	r.until(func(f http2.Frame) bool {
		id := f.Header().StreamID
		if id == 0 {
			return false
		}
		a := answers[id]
		if a == nil {
			a = &answer{}
			answers[id] = a
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			var v wrapperspb.BytesValue
			if d := f.Data(); len(d) >= 5 && proto.Unmarshal(d[5:], &v) == nil {
				a.value = string(v.GetValue())
			}
		case *http2.MetaHeadersFrame:
			if s := f.PseudoValue("status"); s != "" && !f.StreamEnded() {
				return false // the answer's headers
			}
			for _, hf := range f.Fields {
				if hf.Name == "grpc-status" {
					a.status = hf.Value
				}
			}
		}
		if f.Header().Flags.Has(http2.FlagDataEndStream) {
			ended++
		}
		return ended == len(values)
	})
	return answers
}

func TestCallsReadTogetherAreAnsweredAsOneBatch(t *testing.T) {
	for _, opts := range []Options{{}, {Workers: 2}} {
		t.Run(fmt.Sprintf("workers=%d", opts.Workers), func(t *testing.T) {
			b := newBatchEcho()
			_, addr := serveBatch(t, opts, b)
			got := sendTogether(t, addr, "a", "fail", "b")
			want := map[uint32]answer{1: {"a!", "0"}, 3: {"", strconv.Itoa(int(codes.FailedPrecondition))}, 5: {"b!", "0"}}
			for id, w := range want {
				if a := got[id]; a == nil || *a != w {
					t.Errorf("stream %d: got %+v, want %+v", id, a, w)
				}
			}
			select {
			case n := <-b.sizes:
				if n != 3 {
					t.Errorf("the first batch held %d calls, want the 3 sent together", n)
				}
			default:
				t.Error("the batch handler was never called")
			}
		})
	}
}

func TestBatchedCallsUnderConcurrency(t *testing.T) {
	b := newBatchEcho()
	_, addr := serveBatch(t, Options{Workers: 4}, b)
	cc := dial(t, addr)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				v := fmt.Sprintf("%d-%d", g, i)
				out, err := call(context.Background(), cc, "Unary", []byte(v))
				if err != nil || string(out) != v+"!" {
					errs <- fmt.Errorf("call %s: got %q, %v; want %q", v, out, err, v+"!")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	total := 0
	for len(b.sizes) > 0 {
		total += <-b.sizes
	}
	if total != 16*50 {
		t.Errorf("the batches held %d calls in all, want %d", total, 16*50)
	}
	// Calls of other methods are not batched.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := call(ctx, cc, "Block", nil); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("Block: got %v, want DeadlineExceeded from its own handler", err)
	}
}

func TestInlineCallsAreNotBatched(t *testing.T) {
	b := newBatchEcho()
	_, addr := serveBatch(t, Options{Inline: true}, b)
	out, err := call(context.Background(), dial(t, addr), "Unary", []byte("x"))
	if err != nil || string(out) != "x" {
		t.Errorf("got %q, %v; want the method's own answer %q", out, err, "x")
	}
	if len(b.sizes) != 0 {
		t.Error("the batch handler ran under Inline")
	}
}

func TestGracefulStopWaitsForABatch(t *testing.T) {
	b := newBatchEcho()
	s, addr := serveBatch(t, Options{}, b)
	cc := dial(t, addr)
	result := make(chan error, 1)
	go func() {
		out, err := call(context.Background(), cc, "Unary", []byte("wait"))
		if err == nil && string(out) != "wait!" {
			err = fmt.Errorf("answer %q", out)
		}
		result <- err
	}()
	<-b.waiting
	stopped := make(chan struct{})
	go func() { s.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("GracefulStop returned with a batch running")
	case <-time.After(100 * time.Millisecond):
	}
	close(b.release)
	if err := <-result; err != nil {
		t.Errorf("the batched call during GracefulStop: %v", err)
	}
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("GracefulStop did not return after the batch ended")
	}
}

func TestHandleBatchRefusesWhatIsNotAUnaryMethod(t *testing.T) {
	s := NewServer(Options{})
	s.RegisterService(&echoDesc, newEcho())
	for _, m := range []string{"/test.Echo/Nope", "/test.Echo/Bidi"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("HandleBatch(%q) did not panic", m)
				}
			}()
			s.HandleBatch(m, func([]Call) {})
		}()
	}
}
