package limiter

import (
	"context"
	"time"

	"github.com/sluice-rl/sluice/internal/tracing"
	"github.com/sluice-rl/sluice/store"
)

// TraceStore makes every store round trip of l a span of t (see
// tracing.Tracer.StartStore), recording backend, the store's name. Call it
// once, before l is used; a Limiter never given a Tracer calls its store
// directly and pays nothing for tracing.
func (l *Limiter) TraceStore(t *tracing.Tracer, backend string) {
	l.store = &tracedStore{Store: l.store, t: t, backend: backend}
	// Every round trip goes through Do, and its span.
	l.oner, l.spender, l.mem = nil, nil, nil
}

// tracedStore is a store.Store with a span around each Do; Ping and Close
// pass through.
type tracedStore struct {
	store.Store
	t       *tracing.Tracer
	backend string
}

var _ store.Store = (*tracedStore)(nil)

func (s *tracedStore) Do(ctx context.Context, now time.Time, b store.Batch, out []store.Result) error {
	ctx, span := s.t.StartStore(ctx, s.backend, len(b.Ops))
	if span == nil { // the caller's span was sampled out
		return s.Store.Do(ctx, now, b, out)
	}
	err := s.Store.Do(ctx, now, b, out)
	tracing.End(span, err)
	return err
}
