package split

import (
	"context"
	"fmt"

	"github.com/sluice-rl/sluice/store"
)

var _ store.OverrideStore = (*Store)(nil)

// overrides returns the main store as a store.OverrideStore, or
// store.ErrUnsupported. The runtime overrides live in the main store,
// beside its GCRA buckets, never in the per-second one.
func (s *Store) overrides() (store.OverrideStore, error) {
	if o, ok := s.main.(store.OverrideStore); ok {
		return o, nil
	}
	return nil, fmt.Errorf("%w: %T", store.ErrUnsupported, s.main)
}

// Overrides implements store.OverrideStore, reading the main store's.
func (s *Store) Overrides(ctx context.Context) (map[string][]byte, error) {
	o, err := s.overrides()
	if err != nil {
		return nil, err
	}
	return o.Overrides(ctx)
}

// SaveOverride implements store.OverrideStore on the main store.
func (s *Store) SaveOverride(ctx context.Context, key string, doc []byte) error {
	o, err := s.overrides()
	if err != nil {
		return err
	}
	return o.SaveOverride(ctx, key, doc)
}

// DeleteOverride implements store.OverrideStore on the main store.
func (s *Store) DeleteOverride(ctx context.Context, key string) (bool, error) {
	o, err := s.overrides()
	if err != nil {
		return false, err
	}
	return o.DeleteOverride(ctx, key)
}
