package redis_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/redis"
)

// processCPU is the CPU time, user and system, this process has used so
// far: the calling goroutines' and the Redis client's own (rueidis's
// reading and writing goroutines, its syscalls), not redis-server's.
func processCPU(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU runs f and reports the process's CPU time per operation as
// cpu-ns/op: what a call costs the server, whatever its wall time on a
// shared machine.
func reportCPU(b *testing.B, f func()) {
	b.Helper()
	cpu0 := processCPU(b)
	f()
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkEnvoyWindow is the Envoy service's commonest store call: one
// descriptor, one fixed window counted with envoyproxy/ratelimit's
// pipelined INCRBY and EXPIRE, 16 calls in flight as in a busy server.
func BenchmarkEnvoyWindow(b *testing.B) {
	_, s := single(b, redis.Options{EnvoyCompatible: true})
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16)
	reportCPU(b, func() {
		b.RunParallel(func(pb *testing.PB) {
			batch := store.Batch{Ops: []store.Op{{Key: "bench_k_v" + strconv.FormatInt(n.Add(1), 10) + "_", Algorithm: store.FixedWindow,
				Kind: store.Spend, Window: store.Window{Limit: 1 << 30, Length: time.Minute}, Cost: 1}}}
			out := make([]store.Result, 1)
			for pb.Next() {
				if err := s.Do(context.Background(), base, batch, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}
