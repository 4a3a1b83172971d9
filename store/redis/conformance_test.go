package redis_test

import (
	"testing"

	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/redis/redistest"
	"github.com/sluice-rl/sluice/store/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) redis.Options
	}{
		{name: "single node", start: func(t *testing.T) redis.Options {
			return redis.Options{Addrs: []string{redistest.StartSingle(t).Addr}}
		}},
		{name: "single node, envoy compatible", start: func(t *testing.T) redis.Options {
			return redis.Options{Addrs: []string{redistest.StartSingle(t).Addr}, EnvoyCompatible: true}
		}},
		{name: "cluster", start: func(t *testing.T) redis.Options {
			return redis.Options{Addrs: redistest.StartCluster(t, 3).Addrs(), Mode: redis.Cluster}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := tc.start(t)
			storetest.Run(t, func(t *testing.T) store.Store {
				o := o
				// Each scenario gets keys of its own.
				o.KeyPrefix = t.Name() + ":"
				return newStore(t, o)
			})
		})
	}
}
