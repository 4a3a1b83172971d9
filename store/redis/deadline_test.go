package redis

import (
	"context"
	"testing"
	"time"
)

func TestSharedDeadline(t *testing.T) {
	t.Parallel()
	const timeout, grain = 200 * time.Millisecond, 50 * time.Millisecond
	d := &sharedDeadline{timeout: timeout, grain: grain}
	defer d.close()
	soon, cancelSoon := context.WithTimeout(context.Background(), timeout/2)
	defer cancelSoon()
	later, cancelLater := context.WithTimeout(context.Background(), time.Hour)
	defer cancelLater()
	gone, cancelGone := context.WithCancel(context.Background())
	cancelGone()
	for _, tc := range []struct {
		name     string
		ctx      context.Context
		wantOwn  bool // the call runs on the caller's context
		wantLeft bool // else on a shared one ending timeout to timeout+grain from now
	}{
		{name: "a caller's deadline sooner than the timeout bounds the call", ctx: soon, wantOwn: true},
		{name: "a caller already gone keeps its context, and its error", ctx: gone, wantOwn: true},
		{name: "a caller with no deadline gets the shared one", ctx: context.Background(), wantLeft: true},
		{name: "a caller with a later deadline gets the shared one", ctx: later, wantLeft: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := d.bound(tc.ctx)
			if own := got == tc.ctx; own != tc.wantOwn {
				t.Fatalf("got the caller's own context %v, want %v", own, tc.wantOwn)
			}
			if !tc.wantLeft {
				return
			}
			dl, ok := got.Deadline()
			if !ok {
				t.Fatal("got a context with no deadline, want one")
			}
			if left := time.Until(dl); left < timeout-10*time.Millisecond || left > timeout+grain {
				t.Errorf("got %s left, want %s to %s", left, timeout, timeout+grain)
			}
		})
	}

	t.Run("calls within one grain share a context, later ones get a new one", func(t *testing.T) {
		first := d.context()
		if again := d.context(); again != first {
			t.Error("got a new context at once, want the shared one")
		}
		time.Sleep(grain + 10*time.Millisecond)
		next := d.context()
		if next == first {
			t.Fatal("got the old context after a grain, want a new one")
		}
		if left, _ := next.Deadline(); time.Until(left) < timeout-10*time.Millisecond {
			t.Errorf("got %s left on the new context, want at least %s", time.Until(left), timeout)
		}
	})
}
