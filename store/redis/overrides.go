package redis

import (
	"context"
	"fmt"

	"github.com/sluice-rl/sluice/store"
)

var _ store.OverrideStore = (*Store)(nil)

// OverridesKey is the hash, after the key prefix, that holds the runtime
// overrides: one field per override key, its document as the value. It
// has no TTL. In Cluster mode it is one key, on one node.
const OverridesKey = "sluice_kv_overrides"

// overridesKey is the hash's full key.
func (s *Store) overridesKey() string { return s.prefix + OverridesKey }

// Overrides implements store.OverrideStore with one HGETALL.
func (s *Store) Overrides(ctx context.Context) (map[string][]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	m, err := s.client.Do(ctx, s.client.B().Hgetall().Key(s.overridesKey()).Build()).AsStrMap()
	if err != nil {
		return nil, s.fail(fmt.Errorf("read runtime overrides: %w", err))
	}
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		out[k] = []byte(v)
	}
	return out, nil
}

// SaveOverride implements store.OverrideStore with one HSET.
func (s *Store) SaveOverride(ctx context.Context, key string, doc []byte) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	cmd := s.client.B().Hset().Key(s.overridesKey()).FieldValue().FieldValue(key, string(doc)).Build()
	if err := s.client.Do(ctx, cmd).Error(); err != nil {
		return s.fail(fmt.Errorf("save runtime override %s: %w", key, err))
	}
	return nil
}

// DeleteOverride implements store.OverrideStore with one HDEL.
func (s *Store) DeleteOverride(ctx context.Context, key string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	n, err := s.client.Do(ctx, s.client.B().Hdel().Key(s.overridesKey()).Field(key).Build()).AsInt64()
	if err != nil {
		return false, s.fail(fmt.Errorf("delete runtime override %s: %w", key, err))
	}
	return n > 0, nil
}
