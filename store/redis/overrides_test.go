package redis_test

import (
	"context"
	"testing"

	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/fallback"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/redis/redistest"
	"github.com/sluice-rl/sluice/store/split"
	"github.com/sluice-rl/sluice/store/storetest"
)

// Runtime overrides live in one hash under the key prefix, on a single
// node, a Cluster and a Sentinel-managed master, and a new connection (a
// restarted service) reads them back.
func TestOverrides(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) redis.Options
	}{
		{name: "single node", start: func(t *testing.T) redis.Options {
			return redis.Options{Addrs: []string{redistest.StartSingle(t).Addr}}
		}},
		{name: "cluster", start: func(t *testing.T) redis.Options {
			return redis.Options{Addrs: redistest.StartCluster(t, 3).Addrs(), Mode: redis.Cluster}
		}},
		{name: "sentinel", start: func(t *testing.T) redis.Options {
			st := redistest.StartSentinel(t, 1)
			return redis.Options{Addrs: st.Addrs(), Mode: redis.Sentinel, MasterName: st.MasterName}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := tc.start(t)
			opts := map[store.OverrideStore]redis.Options{}
			storetest.RunOverrides(t, func(t *testing.T) store.OverrideStore {
				o := o
				o.KeyPrefix = t.Name() + ":" // each scenario its own hash
				s := newStore(t, o)
				opts[s] = o
				return s
			}, func(t *testing.T, s store.OverrideStore) store.OverrideStore {
				return newStore(t, opts[s])
			})
		})
	}
}

func TestOverridesHashIsUnderTheKeyPrefix(t *testing.T) {
	t.Parallel()
	srv := redistest.StartSingle(t)
	s := newStore(t, redis.Options{Addrs: []string{srv.Addr}, KeyPrefix: "pfx:"})
	if err := s.SaveOverride(context.Background(), "3:1", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	got, err := srv.Do("HGET", "pfx:"+redis.OverridesKey, "3:1")
	if err != nil || got != "{}" {
		t.Errorf("HGET pfx:sluice_kv_overrides 3:1: got %v, %v, want {}", got, err)
	}
	if ttl := srv.MustDo("TTL", "pfx:"+redis.OverridesKey); ttl != int64(-1) {
		t.Errorf("got TTL %v, want -1 (no expiry)", ttl)
	}
}

// The wrappers pass the calls to the store that holds the buckets.
func TestOverridesThroughTheWrappers(t *testing.T) {
	t.Parallel()
	srv := redistest.StartSingle(t)
	o := redis.Options{Addrs: []string{srv.Addr}}
	for _, tc := range []struct {
		name string
		wrap func(t *testing.T) store.Store
	}{
		{name: "fallback", wrap: func(t *testing.T) store.Store {
			fb, err := fallback.New(newStore(t, o), fallback.Error, nil, fallback.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = fb.Close() })
			return fb
		}},
		{name: "split", wrap: func(t *testing.T) store.Store {
			sp, err := split.New(newStore(t, o), newStore(t, o))
			if err != nil {
				t.Fatal(err)
			}
			return sp
		}},
	} {
		t.Run(tc.name+" keeps the overrides in Redis", func(t *testing.T) {
			os, ok := tc.wrap(t).(store.OverrideStore)
			if !ok {
				t.Fatal("got no store.OverrideStore, want the wrapper to implement it")
			}
			if err := os.SaveOverride(context.Background(), "3:"+tc.name, []byte("{}")); err != nil {
				t.Fatal(err)
			}
			if got := srv.MustDo("HEXISTS", redis.OverridesKey, "3:"+tc.name); got != int64(1) {
				t.Errorf("got HEXISTS %v, want 1", got)
			}
		})
	}
}
