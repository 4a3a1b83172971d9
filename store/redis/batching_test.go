package redis_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/redis/redistest"
)

// sluiceConns counts the server's client connections named "sluice" (the
// store's ClientName).
func sluiceConns(t *testing.T, srv *redistest.Server) int {
	t.Helper()
	list, _ := srv.MustDo("CLIENT", "LIST").(string)
	n := 0
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, " name=sluice ") {
			n++
		}
	}
	return n
}

// shareHammer runs calls Envoy-layout window spends from callers goroutines at
// once and returns how many reads Redis made for them.
func shareHammer(t *testing.T, srv *redistest.Server, s *redis.Store, callers, calls int) int64 {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	before := srv.Reads()
	for c := range callers {
		wg.Go(func() {
			batch := store.Batch{Ops: []store.Op{{Key: fmt.Sprintf("hammer_k_v%d_", c), Algorithm: store.FixedWindow,
				Kind: store.Spend, Window: store.Window{Limit: 1 << 30, Length: time.Minute}, Cost: 1}}}
			out := make([]store.Result, 1)
			for range calls / callers {
				if err := s.Do(context.Background(), base, batch, out); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Do: %v", err)
	}
	return srv.Reads() - before - 1
}

// By default the store keeps one connection to a single node, whatever
// the number of calls in flight; PipelineMultiplex asks for more.
func TestConnectionsPerNode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		multiplex int
		want      int
	}{
		{name: "the default is one connection", multiplex: 0, want: 1},
		{name: "multiplex 2 opens four connections", multiplex: 2, want: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, s := single(t, redis.Options{EnvoyCompatible: true, PipelineMultiplex: tc.multiplex})
			shareHammer(t, srv, s, 32, 3200)
			if got := sluiceConns(t, srv); got != tc.want {
				t.Errorf("got %d connections named sluice, want %d", got, tc.want)
			}
		})
	}
}

// With a flush delay, calls in flight together reach Redis in shared
// writes: far fewer reads than calls. Each call is still whole in one read
// (TestOneRoundTripPerBatch).
func TestConcurrentCallsShareWrites(t *testing.T) {
	t.Parallel()
	// A long delay, so that the test tells it from the batching one
	// connection does by itself (333 to 538 reads here without it).
	srv, s := single(t, redis.Options{EnvoyCompatible: true, MaxFlushDelay: time.Millisecond})
	const calls = 3200
	shareHammer(t, srv, s, 32, 320) // connect, warm up
	reads := shareHammer(t, srv, s, 32, calls)
	if reads > calls/16 {
		t.Errorf("got %d reads by Redis for %d calls from 32 callers, want at most %d (calls gathered into shared writes)", reads, calls, calls/16)
	}
	t.Logf("%d reads for %d calls", reads, calls)
}
