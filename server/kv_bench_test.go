package server_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/server"
	"github.com/sluice-rl/sluice/store/memory"
)

// kvNeverDenying is a KV on the memory store whose limit for each of
// names is a billion a second.
func kvNeverDenying(tb testing.TB, names ...string) *server.KV {
	tb.Helper()
	var yaml []byte
	for _, n := range names {
		yaml = append(yaml, n+": {burst: 1000000000, count: 1000000000, period: 1s}\n"...)
	}
	defaults, err := limits.ParseDefaults("defaults.yaml", yaml)
	if err != nil {
		tb.Fatal(err)
	}
	set, err := limits.New(defaults, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return server.NewKV(server.KVOptions{
		Limiter: limiter.New(memory.New(memory.Options{}), clock.New()),
		Limits:  func() *limits.Set { return set },
	})
}

// BenchmarkKVSpend is a whole key-value Spend call in-process on the
// memory store, without gRPC: NewOrdersPerAccount over 10,000 accounts.
func BenchmarkKVSpend(b *testing.B) {
	kv := kvNeverDenying(b, "NewOrdersPerAccount")
	reqs := make([]*sluicev1.Request, 10000)
	for i := range reqs {
		reqs[i] = &sluicev1.Request{Name: "NewOrdersPerAccount", Id: strconv.Itoa(10000000 + i)}
	}
	ctx := context.Background()
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1))
		for pb.Next() {
			d, err := kv.Spend(ctx, reqs[i%len(reqs)])
			if err != nil || !d.GetAllowed() {
				b.Errorf("got %v, %v, want allowed", d, err)
				return
			}
			i++
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}

// BenchmarkKVSpendHTTP is a key-value Spend over HTTP/JSON on the memory
// store: "handler" calls the handler in-process (the body decoded, the
// decision made and encoded, nothing sent), "batch of 3" the same for a
// batch of three accounts, "loopback" sends each call over a keep-alive
// connection to a real server on 127.0.0.1.
func BenchmarkKVSpendHTTP(b *testing.B) {
	h := server.KVHTTPHandler(kvNeverDenying(b, "NewOrdersPerAccount"))
	bodies := make([][]byte, 10000)
	for i := range bodies {
		bodies[i] = []byte(`{"name": "NewOrdersPerAccount", "id": "` + strconv.Itoa(10000000+i) + `", "cost": 1}`)
	}
	// inProcess serves each body in turn on path, in-process.
	inProcess := func(path string, bodies [][]byte) func(*testing.B) {
		return func(b *testing.B) {
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				r := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(bodies[i%len(bodies)]))
				w.code = 0
				h.ServeHTTP(w, r)
				if w.code != 0 && w.code != http.StatusOK {
					b.Fatalf("status %d", w.code)
				}
			}
		}
	}
	b.Run("handler", inProcess("/v1/spend", bodies))
	batches := make([][]byte, len(bodies)/3)
	for i := range batches {
		batches[i] = []byte(`{"transactions": [` + string(bodies[3*i]) + `, ` + string(bodies[3*i+1]) + `, ` + string(bodies[3*i+2]) + `]}`)
	}
	b.Run("batch of 3, handler", inProcess("/v1/batch", batches))
	b.Run("loopback", func(b *testing.B) {
		srv := httptest.NewServer(http.StripPrefix("", h))
		defer srv.Close()
		client := srv.Client()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			resp, err := client.Post(srv.URL+"/v1/spend", "application/json", bytes.NewReader(bodies[i%len(bodies)]))
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	})
}

// discardWriter is a ResponseWriter that keeps only the status.
type discardWriter struct {
	h    http.Header
	code int
}

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(code int)        { d.code = code }
