package server_test

import (
	"context"
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
