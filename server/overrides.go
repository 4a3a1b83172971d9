package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/limits"
)

// OverridesOptions configure an Overrides. The zero value of each optional
// field gives the default stated beside it.
type OverridesOptions struct {
	// Limiter reaches the store that keeps the overrides. Required.
	Limiter *limiter.Limiter
	// Files returns the limits loaded from the files, called once per
	// request; nil, or a nil *limits.Set, means none.
	Files func() *limits.Set
	// Clock stamps each change; default clock.New().
	Clock clock.Clock
	// Logger for changes and refreshes; default slog.Default().
	Logger *slog.Logger
	// StoreKind names the store in errors, as --store does: memory, redis,
	// memcache. Optional.
	StoreKind string
	// Registerer receives the sluice_kv_runtime_overrides gauge; nil
	// registers nothing.
	Registerer prometheus.Registerer
}

// Overrides holds the key-value overrides set at runtime: it keeps them in
// the store (through the limiter) and layers them over the files' limits
// (limits.Set.WithRuntime). Create it with NewOverrides; pass its Limits to
// KVOptions.Limits and the Overrides itself to KVOptions.Overrides, which
// serves the admin API. Refresh reads the store again, so that the
// services sharing a store converge. Safe for concurrent use.
type Overrides struct {
	limiter   *limiter.Limiter
	files     func() *limits.Set
	clock     clock.Clock
	log       *slog.Logger
	storeKind string
	gauge     prometheus.Gauge

	mu     sync.Mutex                 // serialises changes and refreshes; protects rt and warned
	rt     map[string]limits.Override // the runtime overrides in force, by key; replaced, never modified
	warned map[string]string          // key → the problem last logged for a stored override skipped

	cur atomic.Pointer[layered] // the Set in force and what it was built from
	// unsupported is the error of the store that keeps no overrides, once
	// a call found out; nil until then.
	unsupported atomic.Pointer[error]
}

// layered is a Set built from the files' Set and a runtime layer.
type layered struct {
	files *limits.Set
	rt    map[string]limits.Override
	set   *limits.Set
}

// NewOverrides returns an Overrides with no runtime overrides: call Refresh
// to read the store's. It panics when o.Limiter is nil, a programmer's bug.
func NewOverrides(o OverridesOptions) *Overrides {
	if o.Limiter == nil {
		panic("server.NewOverrides: nil Limiter") // a wiring bug, not bad input
	}
	if o.Files == nil {
		o.Files = func() *limits.Set { return nil }
	}
	if o.Clock == nil {
		o.Clock = clock.New()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	ov := &Overrides{limiter: o.Limiter, files: o.Files, clock: o.Clock, log: o.Logger, storeKind: o.StoreKind, warned: map[string]string{}}
	ov.gauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "sluice", Subsystem: "kv", Name: "runtime_overrides",
		Help: "Key-value overrides set at runtime through the admin API and in force on this service.",
	})
	if o.Registerer != nil {
		o.Registerer.MustRegister(ov.gauge)
	}
	f := ov.files()
	ov.cur.Store(&layered{files: f, set: f.WithRuntime(nil)})
	return ov
}

// Limits returns the limits in force: the files' Set with the runtime
// overrides over it. A file reload keeps the runtime overrides, and a
// change of the runtime overrides keeps the files.
func (ov *Overrides) Limits() *limits.Set {
	f := ov.files()
	c := ov.cur.Load()
	if c.files == f {
		return c.set
	}
	n := &layered{files: f, rt: c.rt, set: f.WithRuntime(c.rt)}
	ov.cur.CompareAndSwap(c, n) // a change published meanwhile wins
	return n.set
}

// publish puts rt in force. It requires ov.mu held.
func (ov *Overrides) publish(rt map[string]limits.Override) {
	ov.rt = rt
	f := ov.files()
	ov.cur.Store(&layered{files: f, rt: rt, set: f.WithRuntime(rt)})
	ov.gauge.Set(float64(len(rt)))
}

// List returns the runtime overrides in force, sorted by key, or the
// Unsupported error of a store that keeps none.
func (ov *Overrides) List() ([]limits.Override, error) {
	if err := ov.unsupported.Load(); err != nil {
		return nil, *err
	}
	return ov.Limits().Runtime(), nil
}

// key checks name and id as a runtime override's and returns its key, or
// an Invalid error naming the field.
func (ov *Overrides) key(name, id string) (string, error) {
	k, err := ov.files().RuntimeKey(name, id)
	if err != nil {
		return "", invalidOverride(err)
	}
	return k, nil
}

// invalidOverride is the Invalid error for a runtime override
// limits.Set.RuntimeOverride refuses.
func invalidOverride(err error) error {
	var re *limits.RuntimeError
	field := ""
	if errors.As(err, &re) {
		field = re.Field
	}
	return limiter.InvalidErr(field, "", err)
}

// Get returns the runtime override of name and id, or a NotFound error.
func (ov *Overrides) Get(name, id string) (limits.Override, error) {
	if err := ov.unsupported.Load(); err != nil {
		return limits.Override{}, *err
	}
	k, err := ov.key(name, id)
	if err != nil {
		return limits.Override{}, err
	}
	ov.mu.Lock()
	o, ok := ov.rt[k]
	ov.mu.Unlock()
	if !ok {
		return limits.Override{}, ov.notFound(name, id, k)
	}
	return o, nil
}

// notFound is the error for a runtime override that is not set.
func (ov *Overrides) notFound(name, id, key string) error {
	return &limiter.Error{Kind: limiter.NotFound, Field: "id",
		Msg: fmt.Sprintf("no runtime override for %s id %s (key %s)", name, limits.Quote(id), key)}
}

// Put validates spec (stamped with the clock's now) as a file's override,
// saves it in the store and puts it in force, replacing any runtime
// override of the same key. who names the caller in the log.
func (ov *Overrides) Put(ctx context.Context, spec limits.RuntimeSpec, who string) (limits.Override, error) {
	spec.Updated = ov.clock.Now().UTC()
	o, err := ov.files().RuntimeOverride(spec)
	if err != nil {
		return limits.Override{}, invalidOverride(err)
	}
	ov.mu.Lock()
	defer ov.mu.Unlock()
	if err := ov.limiter.SaveOverride(ctx, o); err != nil {
		return limits.Override{}, ov.storeError(err)
	}
	prev, replaced := ov.rt[o.Key]
	rt := maps.Clone(ov.rt)
	if rt == nil {
		rt = map[string]limits.Override{}
	}
	rt[o.Key] = o
	ov.publish(rt)
	args := []any{"by", who, "name", o.Name.Text, "id", o.ID, "key", o.Key,
		"burst", o.Limit.Burst, "count", o.Limit.Count, "period", o.Limit.Period.String(), "comment", o.Comment}
	if replaced {
		args = append(args, "was", fmt.Sprintf("%d/%d/%s", prev.Limit.Burst, prev.Limit.Count, prev.Limit.Period))
	}
	ov.log.Info("key-value runtime override set", args...)
	return o, nil
}

// Delete removes the runtime override of name and id from the store and
// from force, so that the file's override or the default applies again,
// and returns it; NotFound when there is none. who names the caller in
// the log.
func (ov *Overrides) Delete(ctx context.Context, name, id, who string) (limits.Override, error) {
	k, err := ov.key(name, id)
	if err != nil {
		return limits.Override{}, err
	}
	ov.mu.Lock()
	defer ov.mu.Unlock()
	var removedDoc []limiter.StoredOverride // what the store had, when this service did not
	if _, had := ov.rt[k]; !had {
		removedDoc, _ = ov.limiter.Overrides(ctx) // for the answer only; the delete decides
	}
	removed, err := ov.limiter.DeleteOverride(ctx, k)
	if err != nil {
		return limits.Override{}, ov.storeError(err)
	}
	o, had := ov.rt[k]
	if had {
		rt := maps.Clone(ov.rt)
		delete(rt, k)
		ov.publish(rt)
	}
	if !removed && !had {
		return limits.Override{}, ov.notFound(name, id, k)
	}
	if !had { // set by another service, not yet refreshed here
		o = ov.stored(removedDoc, k, name, id)
	}
	ov.log.Info("key-value runtime override removed", "by", who, "name", name, "id", id, "key", k)
	return o, nil
}

// stored returns the override of key among docs, or, when it is not there
// or no longer valid, one with just its name, id and key.
func (ov *Overrides) stored(docs []limiter.StoredOverride, key, name, id string) limits.Override {
	for _, d := range docs {
		if d.Key != key || d.Err != nil {
			continue
		}
		if o, err := ov.files().RuntimeOverride(d.Spec); err == nil {
			return o
		}
	}
	o := limits.Override{Key: key, ID: id, Runtime: true}
	o.Name, _ = limits.ParseName(name)
	return o
}

// Refresh reads every runtime override from the store and puts them in
// force, in place of the ones before: the store is the reference, so
// several services sharing it converge. A stored override that no longer
// validates (its name left the files) is skipped with a warning, logged
// once per problem. On error (the store is down) the overrides in force
// stay.
func (ov *Overrides) Refresh(ctx context.Context) error {
	ov.mu.Lock()
	defer ov.mu.Unlock()
	stored, err := ov.limiter.Overrides(ctx)
	if err != nil {
		return ov.storeError(err)
	}
	files := ov.files()
	rt := make(map[string]limits.Override, len(stored))
	warned := make(map[string]string, len(ov.warned))
	for _, s := range stored {
		err := s.Err
		var o limits.Override
		if err == nil {
			o, err = files.RuntimeOverride(s.Spec)
		}
		if err == nil && o.Key != s.Key {
			err = fmt.Errorf("stored under key %s, but %s id %s has key %s", s.Key, o.Name.Text, limits.Quote(o.ID), o.Key)
		}
		if err != nil {
			msg := err.Error()
			if ov.warned[s.Key] != msg {
				ov.log.Warn("key-value runtime override in the store ignored", "key", s.Key, "problem", msg)
			}
			warned[s.Key] = msg
			continue
		}
		rt[o.Key] = o
	}
	ov.warned = warned
	if !maps.EqualFunc(rt, ov.rt, sameOverride) {
		ov.publish(rt)
	}
	return nil
}

// sameOverride reports whether a and b are the same runtime override.
func sameOverride(a, b limits.Override) bool {
	return a.Key == b.Key && a.ID == b.ID && a.Limit == b.Limit && a.Comment == b.Comment && a.Updated.Equal(b.Updated)
}

// storeError names the store kind in an Unsupported error, and
// remembers it for List and Get.
func (ov *Overrides) storeError(err error) error {
	if limiter.KindOf(err) != limiter.Unsupported {
		return err
	}
	if ov.storeKind != "" {
		err = &limiter.Error{Kind: limiter.Unsupported, Err: err,
			Msg: fmt.Sprintf("runtime overrides need a store that keeps them (--store memory or redis); the %s store does not", ov.storeKind)}
	}
	ov.unsupported.Store(&err)
	return err
}
