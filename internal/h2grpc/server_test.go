package h2grpc

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// echo is the test service: Unary answers its request's value, with the
// call's metadata and facts about its context in the answer's headers and
// trailers; Block waits for release or its context; Hold waits for
// release alone, as a store call that does not see its context's end;
// Bidi echoes each message.
type echo struct {
	release chan struct{}
	started chan struct{}
	ended   chan error // Block's context error
}

func newEcho() *echo {
	return &echo{release: make(chan struct{}), started: make(chan struct{}, 16), ended: make(chan error, 16)}
}

type echoServer interface{}

// failMessage is the message of the status Unary fails with: percent
// encoding and non-ASCII bytes on the wire.
const failMessage = "précondition 100% failed\nsecond line"

func (e *echo) unary(ctx context.Context, in *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if len(md.Get("fail")) > 0 {
		st, _ := status.New(codes.FailedPrecondition, failMessage).WithDetails(wrapperspb.String("detail"))
		return nil, st.Err()
	}
	out := metadata.Pairs("echo-x", strings.Join(md.Get("x"), ","), "echo-authority", strings.Join(md.Get(":authority"), ","),
		"echo-bin", strings.Join(md.Get("x-bin"), ","), "method", mustMethod(ctx))
	if p, ok := peer.FromContext(ctx); ok {
		out.Set("peer", p.Addr.String())
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			out.Set("tls", ti.State.NegotiatedProtocol)
		}
	}
	if dl, ok := ctx.Deadline(); ok {
		out.Set("deadline", time.Until(dl).Round(time.Second).String())
	}
	if err := grpc.SetHeader(ctx, out); err != nil {
		return nil, err
	}
	if err := grpc.SetTrailer(ctx, metadata.Pairs("trailer", "t")); err != nil {
		return nil, err
	}
	return in, nil
}

func mustMethod(ctx context.Context) string {
	m, _ := grpc.Method(ctx)
	return m
}

func (e *echo) block(ctx context.Context, _ *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error) {
	select {
	case e.started <- struct{}{}:
	default: // nobody counts (the fuzz target)
	}
	select {
	case <-e.release:
		return wrapperspb.Bytes([]byte("released")), nil
	case <-ctx.Done():
		select {
		case e.ended <- ctx.Err():
		default:
		}
		return nil, ctx.Err()
	}
}

func (e *echo) hold(context.Context, *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error) {
	select {
	case e.started <- struct{}{}:
	default: // nobody counts (the fuzz target)
	}
	<-e.release
	return wrapperspb.Bytes([]byte("released")), nil
}

func (e *echo) bidi(ss grpc.ServerStream) error {
	for {
		var m wrapperspb.BytesValue
		if err := ss.RecvMsg(&m); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if err := ss.SendMsg(&m); err != nil {
			return err
		}
	}
}

func unaryHandler(f func(*echo, context.Context, *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error), name string) grpc.MethodDesc {
	return grpc.MethodDesc{MethodName: name, Handler: func(srv any, ctx context.Context, dec func(any) error, icp grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.BytesValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, req any) (any, error) {
			return f(srv.(*echo), ctx, req.(*wrapperspb.BytesValue))
		}
		if icp == nil {
			return h(ctx, in)
		}
		return icp(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/test.Echo/" + name}, h)
	}}
}

var echoDesc = grpc.ServiceDesc{
	ServiceName: "test.Echo",
	HandlerType: (*echoServer)(nil),
	Methods: []grpc.MethodDesc{
		unaryHandler((*echo).unary, "Unary"),
		unaryHandler((*echo).block, "Block"),
		unaryHandler((*echo).hold, "Hold"),
	},
	Streams: []grpc.StreamDesc{{StreamName: "Bidi", ServerStreams: true, ClientStreams: true,
		Handler: func(srv any, ss grpc.ServerStream) error { return srv.(*echo).bidi(ss) }}},
}

var bidiDesc = &grpc.StreamDesc{StreamName: "Bidi", ServerStreams: true, ClientStreams: true}

// serve starts a server with opts and the echo and health services on a
// loopback port; it stops when the test ends.
func serve(t *testing.T, opts Options) (*Server, *echo, *health.Server, string) {
	t.Helper()
	s := NewServer(opts)
	e := newEcho()
	s.RegisterService(&echoDesc, e)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(s, hs)
	return s, e, hs, listenAndServe(t, s)
}

// listenAndServe serves s on a loopback port, which it returns, until the
// test ends.
func listenAndServe(t *testing.T, s *Server) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Stop()
		if err := <-served; !errors.Is(err, ErrServerStopped) {
			t.Errorf("Serve returned %v, want ErrServerStopped", err)
		}
	})
	return l.Addr().String()
}

func dial(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func call(ctx context.Context, cc *grpc.ClientConn, method string, in []byte, opts ...grpc.CallOption) ([]byte, error) {
	var out wrapperspb.BytesValue
	err := cc.Invoke(ctx, "/test.Echo/"+method, wrapperspb.Bytes(in), &out, opts...)
	return out.GetValue(), err
}

func modes(t *testing.T, f func(t *testing.T, opts Options)) {
	for _, m := range []struct {
		name string
		opts Options
	}{{"goroutine-per-call", Options{}}, {"workers", Options{Workers: 4}}, {"inline", Options{Inline: true}}} {
		t.Run(m.name, func(t *testing.T) { f(t, m.opts) })
	}
}

func TestUnaryCallsCarryMetadataDeadlinesAndPeer(t *testing.T) {
	modes(t, func(t *testing.T, opts Options) {
		_, _, _, addr := serve(t, opts)
		cc := dial(t, addr)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "x", "1", "x", "2", "x-bin", "\x00\xffbin")
		var hdr, trl metadata.MD
		got, err := call(ctx, cc, "Unary", []byte("hello"), grpc.Header(&hdr), grpc.Trailer(&trl))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != "hello" {
			t.Errorf("answer %q, want hello", got)
		}
		want := map[string]string{"echo-x": "1,2", "echo-authority": addr, "echo-bin": "\x00\xffbin", "method": "/test.Echo/Unary", "deadline": "30s"}
		for k, v := range want {
			if g := strings.Join(hdr.Get(k), ","); g != v {
				t.Errorf("header %s = %q, want %q", k, g, v)
			}
		}
		if len(hdr.Get("peer")) != 1 || !strings.HasPrefix(hdr.Get("peer")[0], "127.0.0.1:") {
			t.Errorf("peer %q, want the client's loopback address", hdr.Get("peer"))
		}
		if g := trl.Get("trailer"); len(g) != 1 || g[0] != "t" {
			t.Errorf("trailer %q, want t", g)
		}
		// Many calls at once, on one connection.
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for i := range 64 {
			wg.Go(func() {
				in := bytes.Repeat([]byte{byte(i)}, i*100)
				got, err := call(context.Background(), cc, "Unary", in)
				if err == nil && !bytes.Equal(got, in) {
					err = errors.New("a call got another's answer")
				}
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestErrorsCarryTheirStatus(t *testing.T) {
	modes(t, func(t *testing.T, opts Options) {
		_, _, _, addr := serve(t, opts)
		cc := dial(t, addr)
		msg := failMessage
		ctx := metadata.AppendToOutgoingContext(context.Background(), "fail", "yes")
		_, err := call(ctx, cc, "Unary", nil)
		st := status.Convert(err)
		if st.Code() != codes.FailedPrecondition || st.Message() != msg {
			t.Errorf("got %v %q, want FailedPrecondition %q", st.Code(), st.Message(), msg)
		}
		if d := st.Details(); len(d) != 1 || d[0].(*wrapperspb.StringValue).GetValue() != "detail" {
			t.Errorf("details %v, want the handler's", d)
		}
		for _, c := range []struct{ method, want string }{
			{"/test.Echo/Nope", "unknown method Nope for service test.Echo"},
			{"/test.Nope/Unary", "unknown service test.Nope"},
		} {
			err := cc.Invoke(context.Background(), c.method, wrapperspb.Bytes(nil), new(wrapperspb.BytesValue))
			if st := status.Convert(err); st.Code() != codes.Unimplemented || st.Message() != c.want {
				t.Errorf("%s: %v %q, want Unimplemented %q", c.method, st.Code(), st.Message(), c.want)
			}
		}
	})
}

func TestLargeMessagesWaitForFlowControl(t *testing.T) {
	modes(t, func(t *testing.T, opts Options) {
		_, _, _, addr := serve(t, opts)
		// The client's windows are HTTP/2's default 64 KiB: a 3 MiB
		// answer needs its WINDOW_UPDATEs, a 3 MiB request the server's.
		cc := dial(t, addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithInitialWindowSize(65535), grpc.WithInitialConnWindowSize(65535), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(8<<20)))
		in := make([]byte, 3<<20)
		for i := range in {
			in[i] = byte(i * 7)
		}
		got, err := call(context.Background(), cc, "Unary", in)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, in) {
			t.Fatal("the 3 MiB answer differs from the request")
		}
		_, err = call(context.Background(), cc, "Unary", make([]byte, 5<<20))
		if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "larger than max") {
			t.Errorf("5 MiB request: %v, want ResourceExhausted", err)
		}
		// The connection still serves.
		if _, err := call(context.Background(), cc, "Unary", []byte("after")); err != nil {
			t.Fatal(err)
		}
	})
}

func TestCompressedRequestsAreRead(t *testing.T) {
	_, _, _, addr := serve(t, Options{})
	cc := dial(t, addr)
	in := bytes.Repeat([]byte("squeeze "), 1000)
	got, err := call(context.Background(), cc, "Unary", in, grpc.UseCompressor(gzip.Name))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, in) {
		t.Error("the compressed call's answer differs from its request")
	}
}

func TestStreamingCalls(t *testing.T) {
	_, _, hs, addr := serve(t, Options{Workers: 2})
	cc := dial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := cc.NewStream(ctx, bidiDesc, "/test.Echo/Bidi")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		want := bytes.Repeat([]byte{byte(i)}, i*1000)
		if err := cs.SendMsg(wrapperspb.Bytes(want)); err != nil {
			t.Fatal(err)
		}
		var got wrapperspb.BytesValue
		if err := cs.RecvMsg(&got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.GetValue(), want) {
			t.Fatalf("message %d came back different", i)
		}
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := cs.RecvMsg(new(wrapperspb.BytesValue)); err != io.EOF {
		t.Fatalf("after CloseSend: %v, want io.EOF", err)
	}

	// A server-streaming call (health's Watch) sees every change.
	hc := healthpb.NewHealthClient(cc)
	hs.SetServingStatus("svc", healthpb.HealthCheckResponse_SERVING)
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: "svc"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []healthpb.HealthCheckResponse_ServingStatus{healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING} {
		r, err := w.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if r.GetStatus() != want {
			t.Fatalf("watch: %v, want %v", r.GetStatus(), want)
		}
		hs.SetServingStatus("svc", healthpb.HealthCheckResponse_NOT_SERVING)
	}
	if r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "svc"}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("check: %v %v", r, err)
	}
}

func TestCancelledCallsSeeTheirContextEnd(t *testing.T) {
	_, e, _, addr := serve(t, Options{})
	cc := dial(t, addr)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := call(ctx, cc, "Block", nil)
		done <- err
	}()
	<-e.started
	cancel()
	if err := <-e.ended; err != context.Canceled {
		t.Errorf("handler's context: %v, want Canceled", err)
	}
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Errorf("call: %v, want Canceled", err)
	}

	// A deadline reaches the handler too.
	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := call(ctx, cc, "Block", nil)
	<-e.started
	// The server's timer and the client's RST_STREAM, sent when its own
	// deadline passes, race: either ends the handler's context.
	if err := <-e.ended; err != context.DeadlineExceeded && err != context.Canceled {
		t.Errorf("handler's context: %v, want it ended", err)
	}
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("call: %v, want DeadlineExceeded", err)
	}
}

// blocked starts a server that the test stops itself, and a call to
// Block on it; it returns when the call is in the handler, with the
// channel that gets the call's outcome.
func blocked(t *testing.T) (*Server, *echo, net.Listener, chan error) {
	t.Helper()
	s := NewServer(Options{})
	e := newEcho()
	s.RegisterService(&echoDesc, e)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	cc := dial(t, l.Addr().String())
	answer := make(chan error, 1)
	go func() {
		got, err := call(context.Background(), cc, "Block", nil)
		if err == nil && string(got) != "released" {
			err = errors.New("wrong answer " + string(got))
		}
		answer <- err
	}()
	<-e.started
	return s, e, l, answer
}

func TestGracefulStopLetsCallsFinish(t *testing.T) {
	s, e, l, answer := blocked(t)
	stopped := make(chan struct{})
	go func() { s.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("GracefulStop returned with a call in flight")
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := net.DialTimeout("tcp", l.Addr().String(), time.Second); err == nil {
		t.Error("the listener still accepts during GracefulStop")
	}
	close(e.release)
	if err := <-answer; err != nil {
		t.Errorf("the call in flight: %v", err)
	}
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("GracefulStop did not return after the last call ended")
	}
}

func TestStopCutsCalls(t *testing.T) {
	s, e, _, answer := blocked(t)
	s.Stop()
	if err := <-e.ended; err != context.Canceled {
		t.Errorf("handler's context after Stop: %v, want Canceled", err)
	}
	if err := <-answer; status.Code(err) != codes.Unavailable {
		t.Errorf("call cut by Stop: %v, want Unavailable", err)
	}
}

func TestTLS(t *testing.T) {
	certPEM, keyPEM := selfSigned(t, "localhost")
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	_, _, _, addr := serve(t, Options{TLS: &tls.Config{Certificates: []tls.Certificate{cert}}})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	cc := dial(t, addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "localhost"})))
	var hdr metadata.MD
	if _, err := call(context.Background(), cc, "Unary", []byte("x"), grpc.Header(&hdr)); err != nil {
		t.Fatal(err)
	}
	if g := hdr.Get("tls"); len(g) != 1 || g[0] != "h2" {
		t.Errorf("the handler's peer: TLS protocol %q, want h2", g)
	}
	// A plaintext client gets nowhere.
	plain := dial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := call(ctx, plain, "Unary", nil); err == nil {
		t.Error("a plaintext call to the TLS server succeeded")
	}
}

// selfSigned makes a certificate for host and its key, PEM-encoded.
func selfSigned(t *testing.T, host string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// An answer left for a slower call on the same connection to flush goes
// out anyway, soon, while that call still runs.
func TestAnswersDoNotWaitForSlowerCalls(t *testing.T) {
	for _, opts := range []Options{{}, {Workers: 4}} {
		_, e, _, addr := serve(t, opts)
		cc := dial(t, addr)
		go call(context.Background(), cc, "Block", nil)
		<-e.started
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if _, err := call(ctx, cc, "Unary", []byte("quick")); err != nil {
			t.Errorf("a quick call beside a blocked one: %v", err)
		}
		cancel()
		close(e.release)
	}
}

// Calls that end without an answer (cancelled by the client) stop
// counting as running, so later answers are flushed at once.
func TestCancelledCallsStopCounting(t *testing.T) {
	s, e, _, addr := serve(t, Options{Workers: 2})
	cc := dial(t, addr)
	for range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		go call(ctx, cc, "Block", nil)
		<-e.started
		cancel()
		<-e.ended
	}
	if _, err := call(context.Background(), cc, "Unary", []byte("x")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		var running int32
		for c := range s.conns {
			running += c.running.Load()
		}
		s.mu.Unlock()
		if running == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls still count as running after every call ended", running)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A streamed message larger than the stream's receive window arrives:
// the server credits its bytes while it is still incomplete.
func TestStreamedMessagesLargerThanTheWindow(t *testing.T) {
	_, _, _, addr := serve(t, Options{InitialWindowSize: 1 << 16})
	cc := dial(t, addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(8<<20)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := cc.NewStream(ctx, bidiDesc, "/test.Echo/Bidi")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{3 << 20, 10, 1 << 20} {
		want := bytes.Repeat([]byte{byte(n)}, n)
		if err := cs.SendMsg(wrapperspb.Bytes(want)); err != nil {
			t.Fatal(err)
		}
		var got wrapperspb.BytesValue
		if err := cs.RecvMsg(&got); err != nil {
			t.Fatalf("a message of %d bytes: %v", n, err)
		}
		if !bytes.Equal(got.GetValue(), want) {
			t.Fatalf("a message of %d bytes came back different", n)
		}
	}
	cs.CloseSend()
}
