package limiter_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/memory"
)

// bucketsOnly is a store that keeps buckets and no runtime overrides, as
// memcache does: a memory store seen only through store.Store.
type bucketsOnly struct{ store.Store }

func TestRuntimeOverridesGoThroughTheStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := limiter.New(memory.New(memory.Options{}), clock.New())
	burst := int64(7)
	at := time.Date(2026, 11, 23, 12, 0, 0, 0, time.FixedZone("x", 3600))
	o, err := (*limits.Set)(nil).RuntimeOverride(limits.RuntimeSpec{Name: "NewRegistrationsPerIPv6Range", ID: "2001:db8::/48",
		Burst: &burst, Count: &burst, Period: "90m", Comment: "a lab", Updated: at})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("a saved override reads back as it was set", func(t *testing.T) {
		if err := l.SaveOverride(ctx, o); err != nil {
			t.Fatalf("SaveOverride: %v", err)
		}
		got, err := l.Overrides(ctx)
		if err != nil || len(got) != 1 {
			t.Fatalf("got %+v, %v, want one override", got, err)
		}
		s := got[0]
		if s.Key != "2:2001:db8::/48" || s.Err != nil || s.Spec.Name != o.Name.Text || s.Spec.ID != o.ID || *s.Spec.Burst != 7 || *s.Spec.Count != 7 ||
			s.Spec.Period != "1h30m0s" || s.Spec.Comment != "a lab" || !s.Spec.Updated.Equal(at) {
			t.Errorf("got %+v, want the override as saved", s)
		}
	})
	t.Run("a deleted override is gone", func(t *testing.T) {
		for i, want := range []bool{true, false} {
			if ok, err := l.DeleteOverride(ctx, o.Key); ok != want || err != nil {
				t.Errorf("delete %d: got %v, %v, want %v", i+1, ok, err, want)
			}
		}
	})
	t.Run("a store that keeps no overrides answers Unsupported", func(t *testing.T) {
		lb := limiter.New(bucketsOnly{memory.New(memory.Options{})}, clock.New())
		_, err := lb.Overrides(ctx)
		if limiter.KindOf(err) != limiter.Unsupported || !errors.Is(err, store.ErrUnsupported) {
			t.Errorf("got %v (kind %s), want Unsupported wrapping store.ErrUnsupported", err, limiter.KindOf(err))
		}
		if err := lb.SaveOverride(ctx, o); limiter.KindOf(err) != limiter.Unsupported {
			t.Errorf("got %v, want Unsupported", err)
		}
	})
}
