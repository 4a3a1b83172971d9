package memory

import (
	"context"
	"slices"
	"sync"

	"github.com/sluice-rl/sluice/store"
)

var _ store.OverrideStore = (*Store)(nil)

// overrideDocs are the runtime override documents of a Store. They last as
// long as the process: a restarted service has none.
type overrideDocs struct {
	mu   sync.Mutex        // protects docs
	docs map[string][]byte // key → document
}

// Overrides implements store.OverrideStore: every document kept since the
// Store was created.
func (s *Store) Overrides(ctx context.Context) (map[string][]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.docs.mu.Lock()
	defer s.docs.mu.Unlock()
	out := make(map[string][]byte, len(s.docs.docs))
	for k, v := range s.docs.docs {
		out[k] = slices.Clone(v)
	}
	return out, nil
}

// SaveOverride implements store.OverrideStore.
func (s *Store) SaveOverride(ctx context.Context, key string, doc []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.docs.mu.Lock()
	defer s.docs.mu.Unlock()
	if s.docs.docs == nil {
		s.docs.docs = map[string][]byte{}
	}
	s.docs.docs[key] = slices.Clone(doc)
	return nil
}

// DeleteOverride implements store.OverrideStore.
func (s *Store) DeleteOverride(ctx context.Context, key string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.docs.mu.Lock()
	defer s.docs.mu.Unlock()
	_, ok := s.docs.docs[key]
	delete(s.docs.docs, key)
	return ok, nil
}
