package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"sync/atomic"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluice-rl/sluice/internal/tracing"
)

// MaxBodyBytes bounds a request body on the HTTP API: 1 MiB.
const MaxBodyBytes = 1 << 20

// The bytes of request bodies being read are bounded for every request
// together: each body's first freeBodyBytes are its own, and what it reads
// past them is taken from pendingBodies, MaxPendingBodyBytes for the whole
// process, and given back once the body is read. A body that finds no
// room is answered 503. Rate-limit requests fit in freeBodyBytes; without
// the bound, 2,000 connections each sending 900 KB of a 1 MB body slowly
// added 2.2 GB of RSS (scenario 8 of scripts/faults.sh, at 7c8ee0a).
const (
	freeBodyBytes       = 16 << 10
	MaxPendingBodyBytes = 64 << 20
)

var (
	pendingBodies atomic.Int64
	bodiesRefused atomic.Int64 // bodies answered 503 for want of room
)

// BodyRoom returns the bytes of request bodies being read that count
// against MaxPendingBodyBytes, and how many bodies found no room, since
// the process started: the HTTP listeners' metrics.
func BodyRoom() (pending, refused int64) {
	return pendingBodies.Load(), bodiesRefused.Load()
}

// errBodyBusy is readBody's error when the bodies being read hold
// MaxPendingBodyBytes.
var errBodyBusy = errors.New("the server is reading as many large request bodies as it takes; try again")

// bodyStatus is the HTTP status for readBody's error: 503 when the server
// had no room for the body, 400 otherwise.
func bodyStatus(err error) int {
	if errors.Is(err, errBodyBusy) {
		return http.StatusServiceUnavailable
	}
	return http.StatusBadRequest
}

// budgetReader reads r, taking what it reads past freeBodyBytes from
// pendingBodies; release gives it back.
type budgetReader struct {
	r          io.Reader
	read, held int64
}

func (b *budgetReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read += int64(n)
	if d := b.read - freeBodyBytes - b.held; d > 0 {
		if pendingBodies.Add(d) > MaxPendingBodyBytes {
			pendingBodies.Add(-d)
			bodiesRefused.Add(1)
			return n, errBodyBusy
		}
		b.held += d
	}
	return n, err
}

func (b *budgetReader) release() {
	pendingBodies.Add(-b.held)
	b.held = 0
}

// readAllBody reads r's body, at most MaxBodyBytes, within the bound on
// bodies being read.
func readAllBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	b := &budgetReader{r: http.MaxBytesReader(w, r.Body, MaxBodyBytes)}
	defer b.release()
	return io.ReadAll(b)
}

// JSONHandler serves /json as envoyproxy/ratelimit does: a
// RateLimitRequest in proto3 JSON in the body (of a request with any
// method), answered with the RateLimitResponse in proto3 JSON: 200 when
// OK, 429 when over the limit. Errors are answered in plain text with the
// status's name as the body ("Bad Request"): 400 for an empty, malformed
// or ill-typed body or an invalid request, 503 when the store is
// unavailable, 500 otherwise. The reason is logged at debug level.
func JSONHandler(rls *RLS) http.Handler {
	fail := func(w http.ResponseWriter, code int, err error) {
		rls.opts.Logger.Debug("json request refused", "status", code, "err", err)
		// The body stays envoyproxy/ratelimit's plain status text; the
		// reason goes in a header of its own.
		w.Header().Set(ErrorHeader, headerSafe(err.Error()))
		http.Error(w, http.StatusText(code), code)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := readBody(w, r)
		if err != nil {
			fail(w, bodyStatus(err), err)
			return
		}
		var req rlsv3.RateLimitRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			fail(w, http.StatusBadRequest, err)
			return
		}
		resp, err := rls.serve(r.Context(), &req)
		if err != nil {
			code := httpStatus(err)
			if code == http.StatusInternalServerError || code == 499 {
				code = http.StatusBadRequest // envoyproxy/ratelimit's answer to any failed call
			}
			fail(w, code, err)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			fail(w, http.StatusInternalServerError, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		_, _ = w.Write(out)
	})
	if t := rls.opts.Tracer; t != nil {
		return traceHTTP(t, jsonSpan, h)
	}
	return h
}

// ErrorHeader carries the reason of a refused /json request; the body is
// only the status text, as envoyproxy/ratelimit answers.
const ErrorHeader = "X-Sluice-Error"

// maxErrorHeader bounds ErrorHeader's value, in bytes.
const maxErrorHeader = 512

// headerSafe makes s a header value: printable ASCII only (other bytes
// become '?'), at most maxErrorHeader bytes.
func headerSafe(s string) string {
	b := make([]byte, 0, min(len(s), maxErrorHeader))
	for i := 0; i < len(s) && len(b) < maxErrorHeader; i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e {
			c = '?'
		}
		b = append(b, c)
	}
	return string(b)
}

// jsonSpan is the name of a /json call's span.
const jsonSpan = "ShouldRateLimit /json"

// traceHTTP runs h in a span named name that continues the caller's trace
// and records the answer's status.
func traceHTTP(t *tracing.Tracer, name string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, span := t.StartHTTP(r, name)
		defer span.End()
		h.ServeHTTP(&statusRecorder{ResponseWriter: w, span: span}, r.WithContext(ctx))
	})
}

// statusRecorder records the status of a traced HTTP answer on its span.
type statusRecorder struct {
	http.ResponseWriter
	span        trace.Span
	wroteHeader bool
}

func (w *statusRecorder) WriteHeader(code int) {
	if !w.wroteHeader && w.span.IsRecording() {
		w.wroteHeader = true
		w.span.SetAttributes(tracing.KeyHTTPStatus.Int(code))
		if code >= http.StatusBadRequest && code != http.StatusTooManyRequests {
			w.span.SetStatus(codes.Error, http.StatusText(code))
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if !w.wroteHeader && w.span.IsRecording() {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap gives http.ResponseController the writer underneath.
func (w *statusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// readBody reads a non-empty body of at most MaxBodyBytes, within the
// bound on bodies being read (errBodyBusy).
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := readAllBody(w, r)
	if errors.Is(err, errBodyBusy) {
		return nil, err
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, fmt.Errorf("request body larger than %d bytes", MaxBodyBytes)
		}
		return nil, fmt.Errorf("read request body: %w", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, errors.New("empty request body")
	}
	return body, nil
}

// writeError answers {"error": "..."} with the given status.
func writeError(w http.ResponseWriter, code int, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": fmt.Sprintf(format, args...)})
}

// HealthHandler serves GET /healthcheck: 200 "OK" when ready returns nil,
// 503 with the reason otherwise.
func HealthHandler(ready func(ctx context.Context) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := ready(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "OK")
	})
}

// DebugHandler serves the debug port: the live dashboard at / and
// /dashboard (its data at /dashboard/state.json; a nil dash shows only
// what it can read without one), /metrics from g, /rlconfig (the loaded
// rules, one per line, from rules), and /debug/pprof/.
func DebugHandler(g prometheus.Gatherer, rules func() string, dash *Dashboard) http.Handler {
	if dash == nil {
		dash = NewDashboard(DashboardOptions{Gatherer: g})
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /rlconfig", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, rules())
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	d := dash.Handler()
	mux.Handle("GET /{$}", d)
	mux.Handle("GET /dashboard", d)
	mux.Handle("GET /dashboard/", d)
	return mux
}
