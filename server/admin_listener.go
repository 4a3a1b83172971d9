package server

import (
	"context"
	"net/http"
	"strings"

	"google.golang.org/grpc"
)

// Admin is the admin listener's front door: HTTP handlers and gRPC
// services on one port, every call guarded by one AdminAuth. gRPC calls
// (HTTP/2 requests whose content-type is application/grpc) go to a
// grpc.Server through its ServeHTTP; every other request goes to an HTTP
// mux. Other features mount their handlers with Handle and register their
// gRPC services on GRPC, before the listener serves.
//
// Serve it with an http.Server whose Protocols allow HTTP/2 (unencrypted
// HTTP/2 with prior knowledge on a plaintext port, as gRPC clients speak
// it; "h2" by ALPN over TLS). Create it with NewAdmin; it is safe for
// concurrent use once serving.
type Admin struct {
	auth AdminAuth
	mux  *http.ServeMux
	grpc *grpc.Server
}

// NewAdmin returns an Admin whose calls must carry auth's credentials (the
// zero AdminAuth admits every caller). opts are options of its gRPC
// server; credentials among them are ignored (the http.Server's TLS
// applies).
func NewAdmin(auth AdminAuth, opts ...grpc.ServerOption) *Admin {
	a := &Admin{auth: auth, mux: http.NewServeMux()}
	opts = append(opts,
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := a.auth.allowGRPC(ctx); err != nil {
				return nil, grpcError(err)
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := a.auth.allowGRPC(ss.Context()); err != nil {
				return grpcError(err)
			}
			return h(srv, ss)
		}),
	)
	a.grpc = grpc.NewServer(opts...)
	return a
}

// Handle mounts h on the admin mux at pattern (http.ServeMux's patterns,
// "GET /v1/x" included). Call it before serving.
func (a *Admin) Handle(pattern string, h http.Handler) { a.mux.Handle(pattern, h) }

// GRPC is the admin listener's gRPC server, on which to register
// services before serving. Do not call its Serve: Admin serves it.
func (a *Admin) GRPC() *grpc.Server { return a.grpc }

// ServeHTTP routes a gRPC call to the gRPC server and any other request,
// once its credentials pass, to the mux.
func (a *Admin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
		a.grpc.ServeHTTP(w, r)
		return
	}
	if err := a.auth.allowHTTP(r); err != nil {
		writeError(w, httpStatus(err), "%s", err.Error())
		return
	}
	a.mux.ServeHTTP(w, r)
}
