// Package xdstest runs a real xDS management server for tests:
// go-control-plane's server over its snapshot cache, on a free loopback
// port, serving RateLimitConfig resources. It records every request its
// clients send, so tests can see ACKs and NACKs, and it can be stopped and
// started again on the same port to test reconnection.
package xdstest

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
)

// Server is a management server. Its snapshots live on while it is
// stopped, so a restarted server serves what was set before. It is safe
// for concurrent use.
type Server struct {
	// Addr is the server's "127.0.0.1:port", the same across restarts.
	Addr string

	cache cachev3.SnapshotCache
	ctx   context.Context
	opts  []grpc.ServerOption

	mu       sync.Mutex // protects the fields below
	grpc     *grpc.Server
	requests []*discoveryv3.DiscoveryRequest
}

// Start starts a server on a free loopback port, with opts (grpc.Creds
// for TLS, say); it stops when the test ends.
func Start(t testing.TB, opts ...grpc.ServerOption) *Server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil), ctx: ctx, opts: opts}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("xdstest: listen: %v", err)
	}
	s.Addr = ln.Addr().String()
	s.serve(ln)
	t.Cleanup(func() {
		s.Stop()
		cancel()
	})
	return s
}

func (s *Server) serve(ln net.Listener) {
	cb := serverv3.CallbackFuncs{StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
		s.mu.Lock()
		s.requests = append(s.requests, req)
		s.mu.Unlock()
		return nil
	}}
	g := grpc.NewServer(s.opts...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, serverv3.NewServer(s.ctx, s.cache, cb))
	s.mu.Lock()
	s.grpc = g
	s.mu.Unlock()
	go func() { _ = g.Serve(ln) }()
}

// Stop stops the server, cutting its streams. Stopping a stopped server
// does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	g := s.grpc
	s.grpc = nil
	s.mu.Unlock()
	if g != nil {
		g.Stop()
	}
}

// Restart starts a stopped server again on the same address, retrying for
// a few seconds while the port is still being released.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ln, err := net.Listen("tcp", s.Addr)
		if err == nil {
			s.serve(ln)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("xdstest: listen again on %s: %v", s.Addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Set makes version, with configs as its resources, the snapshot for
// node; connected clients of that node receive it at once.
func (s *Server) Set(t testing.TB, node, version string, configs ...*rlsconfv3.RateLimitConfig) {
	t.Helper()
	res := make([]types.Resource, len(configs))
	for i, c := range configs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		t.Fatalf("xdstest: snapshot %s: %v", version, err)
	}
	if err := s.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatalf("xdstest: set snapshot %s: %v", version, err)
	}
}

// Requests returns every request clients sent, in order.
func (s *Server) Requests() []*discoveryv3.DiscoveryRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// NACKs returns the requests that carry an error detail: the responses
// clients refused.
func (s *Server) NACKs() []*discoveryv3.DiscoveryRequest {
	var out []*discoveryv3.DiscoveryRequest
	for _, r := range s.Requests() {
		if r.GetErrorDetail() != nil {
			out = append(out, r)
		}
	}
	return out
}

// Streams counts the streams clients opened: requests without a response
// nonce.
func (s *Server) Streams() int {
	n := 0
	for _, r := range s.Requests() {
		if r.GetResponseNonce() == "" {
			n++
		}
	}
	return n
}
