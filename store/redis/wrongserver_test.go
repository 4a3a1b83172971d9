package redis_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/redis"
)

// Pointed at a server that is not Redis, New says so, and does not call
// it an outage (startup would retry an outage forever).
func TestNewNamesAServerThatIsNotRedis(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	for _, mode := range []redis.Mode{redis.Single, redis.Cluster} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, err := redis.New(ctx, redis.Options{Addrs: []string{addr}, Mode: mode, Timeout: time.Second})
		cancel()
		if err == nil {
			_ = s.Close()
			t.Fatalf("mode %s: got a store, want an error", mode)
		}
		if !strings.Contains(err.Error(), "does not speak the Redis protocol") || !strings.Contains(err.Error(), addr) || errors.Is(err, store.ErrUnavailable) {
			t.Errorf("mode %s: got %v, want an error naming %s as not a Redis server, not ErrUnavailable", mode, err, addr)
		}
	}
}
