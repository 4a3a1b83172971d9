package fallback

import (
	"context"
	"fmt"

	"github.com/sluice-rl/sluice/store"
)

var _ store.OverrideStore = (*Store)(nil)

// overrides returns the primary as a store.OverrideStore, or
// store.ErrUnsupported. The runtime overrides live in the primary only:
// the local fallback never holds them, whatever the policy.
func (s *Store) overrides() (store.OverrideStore, error) {
	if o, ok := s.primary.(store.OverrideStore); ok {
		return o, nil
	}
	return nil, fmt.Errorf("%w: %T", store.ErrUnsupported, s.primary)
}

// Overrides implements store.OverrideStore, reading the primary's.
func (s *Store) Overrides(ctx context.Context) (map[string][]byte, error) {
	o, err := s.overrides()
	if err != nil {
		return nil, err
	}
	return o.Overrides(ctx)
}

// SaveOverride implements store.OverrideStore on the primary.
func (s *Store) SaveOverride(ctx context.Context, key string, doc []byte) error {
	o, err := s.overrides()
	if err != nil {
		return err
	}
	return o.SaveOverride(ctx, key, doc)
}

// DeleteOverride implements store.OverrideStore on the primary.
func (s *Store) DeleteOverride(ctx context.Context, key string) (bool, error) {
	o, err := s.overrides()
	if err != nil {
		return false, err
	}
	return o.DeleteOverride(ctx, key)
}
