package limiter

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/store"
)

// StoredOverride is one runtime override as the store keeps it.
type StoredOverride struct {
	// Key is the override key it is stored under, such as "3:12345678".
	Key string
	// Spec is the override as set; check it with limits.Set.RuntimeOverride
	// before use. Zero when Err is set.
	Spec limits.RuntimeSpec
	// Err reports a document that is not a runtime override.
	Err error
}

// overrideDoc is a runtime override as a store keeps it: JSON, one
// document per override key.
type overrideDoc struct {
	Name    string    `json:"name"`
	ID      string    `json:"id"`
	Burst   *int64    `json:"burst"`
	Count   *int64    `json:"count"`
	Period  string    `json:"period"` // a Go duration
	Comment string    `json:"comment,omitempty"`
	Updated time.Time `json:"updated"`
}

// overrides returns the store as a store.OverrideStore, or an Unsupported
// error.
func (l *Limiter) overrides() (store.OverrideStore, error) {
	s := l.store
	if t, ok := s.(*tracedStore); ok {
		s = t.Store
	}
	if o, ok := s.(store.OverrideStore); ok {
		return o, nil
	}
	return nil, unsupported(fmt.Errorf("%w: %T", store.ErrUnsupported, s))
}

// unsupported is the error for a store that keeps no runtime overrides.
func unsupported(err error) error {
	return &Error{Kind: Unsupported, Msg: "runtime overrides need a store that keeps them, memory or redis: " + err.Error(), Err: err}
}

// overrideError wraps an error of the store's override calls.
func overrideError(prefix string, err error) error {
	if KindOf(err) == Unsupported {
		return unsupported(err)
	}
	return storeError(prefix, err)
}

// Overrides reads every runtime override the store keeps, sorted by key.
// A document that does not decode is returned with its Err set. A store
// that keeps none (memcache) answers an Unsupported error.
func (l *Limiter) Overrides(ctx context.Context) ([]StoredOverride, error) {
	ks, err := l.overrides()
	if err != nil {
		return nil, err
	}
	docs, err := ks.Overrides(ctx)
	if err != nil {
		return nil, overrideError("read runtime overrides: ", err)
	}
	out := make([]StoredOverride, 0, len(docs))
	for key, doc := range docs {
		var d overrideDoc
		so := StoredOverride{Key: key}
		if err := json.Unmarshal(doc, &d); err != nil {
			so.Err = fmt.Errorf("runtime override %s in the store: %w", key, err)
		} else {
			so.Spec = limits.RuntimeSpec{Name: d.Name, ID: d.ID, Burst: d.Burst, Count: d.Count, Period: d.Period, Comment: d.Comment, Updated: d.Updated}
		}
		out = append(out, so)
	}
	slices.SortFunc(out, func(a, b StoredOverride) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// SaveOverride stores the runtime override o (from
// limits.Set.RuntimeOverride) under its key, replacing any.
func (l *Limiter) SaveOverride(ctx context.Context, o limits.Override) error {
	ks, err := l.overrides()
	if err != nil {
		return err
	}
	d := overrideDoc{Name: o.Name.Text, ID: o.ID, Burst: &o.Limit.Burst, Count: &o.Limit.Count, Period: o.Limit.Period.String(), Comment: o.Comment, Updated: o.Updated.UTC()}
	doc, err := json.Marshal(d)
	if err != nil {
		return &Error{Kind: Internal, Msg: "encode runtime override: " + err.Error(), Err: err}
	}
	if err := ks.SaveOverride(ctx, o.Key, doc); err != nil {
		return overrideError("save runtime override: ", err)
	}
	return nil
}

// DeleteOverride removes the runtime override under key and reports
// whether there was one.
func (l *Limiter) DeleteOverride(ctx context.Context, key string) (bool, error) {
	ks, err := l.overrides()
	if err != nil {
		return false, err
	}
	ok, err := ks.DeleteOverride(ctx, key)
	if err != nil {
		return false, overrideError("delete runtime override: ", err)
	}
	return ok, nil
}
