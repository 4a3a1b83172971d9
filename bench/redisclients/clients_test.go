// Package redisclients measures the Redis client under Sluice's store
// against the other maintained Go clients, on the Envoy service's
// commonest Redis work: one descriptor's fixed window, counted as
// envoyproxy/ratelimit counts it (INCRBY key hits; EXPIRE key seconds,
// pipelined in one round trip), from many concurrent callers. It is a
// module of its own so that the main module never depends on the other
// clients.
//
//	cd bench/redisclients && go test -run '^$' -bench . -count 3
//
// cpu-ns/op is this process's CPU time per call (the callers and each
// client's own goroutines and system calls, not redis-server's): what the
// client costs a server. redis-server must be on PATH.
package redisclients

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/store"
	sluiceredis "github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/redis/redistest"
	"github.com/sluice-rl/sluice/window"
)

// windowSeconds is the window's length, and the keys' TTL.
const windowSeconds = 60

// counter counts one hit in the current window of the descriptor key k
// (without the window's start) and returns the window's count.
type counter func(ctx context.Context, k string) (int64, error)

// client is one way of counting a window, opened on a Redis address.
type client struct {
	name string
	open func(tb testing.TB, addr string) counter
}

// windowKey is k in the current window, as envoyproxy/ratelimit names it:
// the key, then the window's start in Unix seconds.
func windowKey(k string) string {
	return k + strconv.FormatInt(window.Start(time.Now(), windowSeconds), 10)
}

var clients = []client{
	{
		// Sluice's store as `sluice serve --store redis` configures it: one
		// connection (rueidis), the 20 µs flush delay, the shared
		// deadline; the store builds the window's key.
		name: "sluice_store",
		open: func(tb testing.TB, addr string) counter {
			s, err := sluiceredis.New(context.Background(), sluiceredis.Options{Addrs: []string{addr}, EnvoyCompatible: true, MaxFlushDelay: 20 * time.Microsecond})
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { s.Close() })
			clk := clock.New()
			return func(ctx context.Context, k string) (int64, error) {
				op := [1]store.Op{{Key: k, Algorithm: store.FixedWindow, Kind: store.Spend,
					Window: store.Window{Limit: 1 << 40, Length: windowSeconds * time.Second}, Cost: 1}}
				var out [1]store.Result
				if err := s.Do(ctx, clk.Now(), store.Batch{Ops: op[:]}, out[:]); err != nil {
					return 0, err
				}
				return out[0].Count, nil
			}
		},
	},
	{
		// rueidis with its own defaults (auto-pipelining, its number of
		// connections per node).
		name: "rueidis_defaults",
		open: func(tb testing.TB, addr string) counter {
			return rueidisCounter(tb, rueidis.ClientOption{InitAddress: []string{addr}})
		},
	},
	{
		// rueidis configured as Sluice's store configures it (one
		// connection, the 20 µs flush delay), without the store: what the
		// store's own work costs is the difference to sluice_store.
		name: "rueidis_as_sluice",
		open: func(tb testing.TB, addr string) counter {
			return rueidisCounter(tb, rueidis.ClientOption{InitAddress: []string{addr}, PipelineMultiplex: -1, MaxFlushDelay: 20 * time.Microsecond})
		},
	},
	{
		// go-redis with its defaults: a pool of connections, each call's
		// pipeline written and read on one of them by the caller.
		name: "go-redis",
		open: func(tb testing.TB, addr string) counter {
			c := goredis.NewClient(&goredis.Options{Addr: addr})
			tb.Cleanup(func() { c.Close() })
			return func(ctx context.Context, k string) (int64, error) {
				key := windowKey(k)
				p := c.Pipeline()
				n := p.IncrBy(ctx, key, 1)
				p.Expire(ctx, key, windowSeconds*time.Second)
				if _, err := p.Exec(ctx); err != nil {
					return 0, err
				}
				return n.Val(), nil
			}
		},
	},
	{
		// radix v4 as envoyproxy/ratelimit (f2fb157) uses it on a single
		// Redis: a pool of REDIS_POOL_SIZE (default 10) connections, and
		// each request's commands as one explicit pipeline.
		name: "radix_v4",
		open: func(tb testing.TB, addr string) counter {
			ctx := context.Background()
			pool, err := radix.PoolConfig{Size: 10}.New(ctx, "tcp", addr)
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { pool.Close() })
			return func(ctx context.Context, k string) (int64, error) {
				key := windowKey(k)
				var n int64
				p := radix.NewPipeline()
				p.Append(radix.FlatCmd(&n, "INCRBY", key, 1))
				p.Append(radix.FlatCmd(nil, "EXPIRE", key, windowSeconds))
				if err := pool.Do(ctx, p); err != nil {
					return 0, err
				}
				return n, nil
			}
		},
	},
}

// rueidisCounter opens a rueidis client with o (client-side caching off)
// and counts with its auto-pipelined DoMulti.
func rueidisCounter(tb testing.TB, o rueidis.ClientOption) counter {
	o.DisableCache = true
	c, err := rueidis.NewClient(o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return func(ctx context.Context, k string) (int64, error) {
		key := windowKey(k)
		rs := c.DoMulti(ctx,
			c.B().Incrby().Key(key).Increment(1).Build(),
			c.B().Expire().Key(key).Seconds(windowSeconds).Build())
		if err := rs[1].Error(); err != nil {
			return 0, err
		}
		return rs[0].AsInt64()
	}
}

// TestClientsCountTheSameWindow checks that every client counts the same
// window of the same key, one hit each, and leaves it expiring.
func TestClientsCountTheSameWindow(t *testing.T) {
	srv := redistest.StartSingle(t)
	ctx := context.Background()
	// Not across a window's end, where the count would start again.
	for time.Now().Unix()%windowSeconds >= windowSeconds-5 {
		time.Sleep(time.Second)
	}
	for i, c := range clients {
		n, err := c.open(t, srv.Addr)(ctx, "same_")
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if n != int64(i+1) {
			t.Errorf("%s: count %d, want %d (one hit per client so far)", c.name, n, i+1)
		}
	}
	cli := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	defer cli.Close()
	ttl, err := cli.TTL(ctx, windowKey("same_")).Result()
	if err != nil || ttl <= 0 || ttl > windowSeconds*time.Second {
		t.Errorf("TTL of the window's key: %v, %v; want 0 < TTL <= %ds", ttl, err, windowSeconds)
	}
}

// processCPU is this process's CPU time so far, user and system.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEnvoyWindow counts one window per call, over 10,000 descriptor
// values, from 16 and 64 concurrent callers, through each client on one
// Redis.
func BenchmarkEnvoyWindow(b *testing.B) {
	srv := redistest.StartSingle(b)
	keys := make([]string, 10000)
	for i := range keys {
		keys[i] = "bench_k0_v" + strconv.Itoa(i) + "_"
	}
	for _, callers := range []int{16, 64} {
		for _, c := range clients {
			b.Run(fmt.Sprintf("callers=%d/%s", callers, c.name), func(b *testing.B) {
				count := c.open(b, srv.Addr)
				var next atomic.Int64
				b.SetParallelism(max(1, callers/runtime.GOMAXPROCS(0)))
				b.ReportAllocs()
				cpu0 := processCPU(b)
				b.RunParallel(func(pb *testing.PB) {
					ctx := context.Background()
					for pb.Next() {
						n, err := count(ctx, keys[next.Add(1)%int64(len(keys))])
						if err != nil || n < 1 {
							b.Errorf("%s: count %d, %v", c.name, n, err)
							return
						}
					}
				})
				b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}
