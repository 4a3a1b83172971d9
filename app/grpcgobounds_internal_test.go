package app

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// grpc-go's calls past --grpc-max-streams are shared between the
// connections as in Sluice's server: past the bound a connection may open
// more only while it holds less than an even share, past twice the bound
// none; a call's place comes back when it ends.
func TestGRPCGoBoundsShareTheCallsBetweenConnections(t *testing.T) {
	b := &grpcGoBounds{maxStreams: 4, requestTimeout: time.Hour, conns: map[any]int64{}}
	connA := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{Port: 1}})
	connB := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{Port: 2}})
	var calls []*call
	open := func(conn context.Context) error {
		ctx, err := b.tap(conn, nil)
		if err == nil {
			calls = append(calls, callOf(ctx))
		}
		return err
	}
	for i := range 4 { // within the bound, one connection may take it all
		if err := open(connA); err != nil {
			t.Fatalf("call %d on A, within the bound: %v", i+1, err)
		}
	}
	if err := open(connA); status.Code(err) != codes.Unavailable {
		t.Fatalf("a 5th call on A, past the bound and past its share of 2: got %v, want UNAVAILABLE", err)
	}
	for i := range 2 {
		if err := open(connB); err != nil {
			t.Fatalf("call %d on B, within its share of 2: %v", i+1, err)
		}
	}
	if err := open(connB); status.Code(err) != codes.Unavailable {
		t.Fatalf("a 3rd call on B, past its share: got %v, want UNAVAILABLE", err)
	}
	if b.open != 6 || len(b.conns) != 2 {
		t.Fatalf("calls counted open: %d on %d connections, want 6 on 2", b.open, len(b.conns))
	}
	for _, c := range calls {
		c.end()
		c.end() // once only
	}
	if b.open != 0 || len(b.conns) != 0 {
		t.Fatalf("once every call ended: %d calls counted on %d connections, want none", b.open, len(b.conns))
	}
}

// A call's request timer cancels its context when the request is late,
// and gives its place back; a call whose interceptor stopped the timer
// keeps its context.
func TestGRPCGoBoundsCancelALateRequest(t *testing.T) {
	b := &grpcGoBounds{maxStreams: 10, requestTimeout: 20 * time.Millisecond, conns: map[any]int64{}}
	late, err := b.tap(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	onTime, err := b.tap(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	callOf(onTime).arrived() // what the interceptors do once the request is whole
	select {
	case <-late.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a late request's context was not cancelled")
	}
	time.Sleep(40 * time.Millisecond)
	if onTime.Err() != nil {
		t.Fatalf("a request on time: its context ended (%v)", onTime.Err())
	}
	b.mu.Lock()
	open := b.open
	b.mu.Unlock()
	if open != 1 {
		t.Fatalf("calls counted open: %d, want 1 (the late one's place given back)", open)
	}
}

// A request timeout so short that the timer fires before tap returns
// neither panics nor races (the timer's function must not read the timer).
func TestGRPCGoBoundsATimerFiringAtOnce(t *testing.T) {
	b := &grpcGoBounds{maxStreams: 10, requestTimeout: time.Nanosecond, conns: map[any]int64{}}
	for range 1000 {
		ctx, err := b.tap(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		<-ctx.Done()
		c := callOf(ctx)
		c.arrived()
		c.end()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open != 0 || b.late != 1000 {
		t.Fatalf("after 1,000 late calls: %d open, %d late; want 0 and 1000", b.open, b.late)
	}
}
