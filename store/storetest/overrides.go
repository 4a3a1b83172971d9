package storetest

import (
	"context"
	"testing"

	"github.com/sluice-rl/sluice/store"
)

// RunOverrides runs the store.OverrideStore scenarios against the store
// newStore returns: a fresh store, with no documents, for each.
// reopen, when not nil, returns another store over the same data (a new
// connection, or a restarted service): the documents must be there.
func RunOverrides(t *testing.T, newStore func(t *testing.T) store.OverrideStore, reopen func(t *testing.T, s store.OverrideStore) store.OverrideStore) {
	ctx := context.Background()
	get := func(t *testing.T, s store.OverrideStore) map[string][]byte {
		t.Helper()
		m, err := s.Overrides(ctx)
		if err != nil {
			t.Fatalf("Overrides: %v", err)
		}
		return m
	}
	t.Run("a new store has no documents", func(t *testing.T) {
		if m := get(t, newStore(t)); len(m) != 0 {
			t.Errorf("got %d documents, want 0", len(m))
		}
	})
	t.Run("a saved document is read back and replaced by the next save", func(t *testing.T) {
		s := newStore(t)
		for _, doc := range []string{`{"burst":1}`, `{"burst":2}`} {
			if err := s.SaveOverride(ctx, "2:2001:db8::/48", []byte(doc)); err != nil {
				t.Fatalf("SaveOverride: %v", err)
			}
		}
		if err := s.SaveOverride(ctx, "3:12345678", []byte(`{"x":"ü"}`)); err != nil {
			t.Fatalf("SaveOverride: %v", err)
		}
		m := get(t, s)
		if len(m) != 2 || string(m["2:2001:db8::/48"]) != `{"burst":2}` || string(m["3:12345678"]) != `{"x":"ü"}` {
			t.Errorf("got %q, want the two documents, the first replaced", m)
		}
	})
	t.Run("a deleted document is gone and deleting it again reports so", func(t *testing.T) {
		s := newStore(t)
		if err := s.SaveOverride(ctx, "3:1", []byte("{}")); err != nil {
			t.Fatal(err)
		}
		for i, want := range []bool{true, false} {
			got, err := s.DeleteOverride(ctx, "3:1")
			if err != nil || got != want {
				t.Errorf("delete %d: got %v, %v, want %v", i+1, got, err, want)
			}
		}
		if m := get(t, s); len(m) != 0 {
			t.Errorf("got %q, want no documents", m)
		}
	})
	t.Run("a cancelled call fails", func(t *testing.T) {
		s := newStore(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := s.SaveOverride(cctx, "3:1", []byte("{}")); err == nil {
			t.Error("got no error, want the cancellation")
		}
	})
	if reopen == nil {
		return
	}
	t.Run("the documents are there for another store over the same data", func(t *testing.T) {
		s := newStore(t)
		if err := s.SaveOverride(ctx, "3:7", []byte(`{"a":1}`)); err != nil {
			t.Fatal(err)
		}
		m := get(t, reopen(t, s))
		if string(m["3:7"]) != `{"a":1}` {
			t.Errorf("got %q, want the document saved before", m)
		}
	})
}
