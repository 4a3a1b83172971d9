package clock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/clock"
)

func TestFakeMovesOnlyWhenTold(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f := clock.NewFake(start)
	if got := f.Now(); !got.Equal(start) {
		t.Fatalf("got %v, want %v", got, start)
	}
	if got, want := f.Add(1500*time.Millisecond), start.Add(1500*time.Millisecond); !got.Equal(want) {
		t.Fatalf("after Add: got %v, want %v", got, want)
	}
	if got, want := f.Advance(500*time.Millisecond), start.Add(2*time.Second); !got.Equal(want) {
		t.Fatalf("after Advance: got %v, want %v", got, want)
	}
	later := start.Add(time.Hour)
	f.Set(later)
	if got := f.Now(); !got.Equal(later) {
		t.Fatalf("after Set: got %v, want %v", got, later)
	}
}

func TestFakeIsSafeForConcurrentUse(t *testing.T) {
	t.Parallel()
	f := clock.NewFake(time.Unix(0, 0))
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				f.Add(time.Millisecond)
				_ = f.Now()
			}
		}()
	}
	wg.Wait()
	if got, want := f.Now(), time.Unix(0, 0).Add(800*time.Millisecond); !got.Equal(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestRealClockAdvances(t *testing.T) {
	t.Parallel()
	c := clock.New()
	a := c.Now()
	time.Sleep(time.Millisecond)
	if b := c.Now(); !b.After(a) {
		t.Fatalf("real clock did not advance: %v then %v", a, b)
	}
}

// TestRealClockTellsWallTime checks that the real clock's readings, most
// of them taken from the monotonic clock since its last wall reading, fall
// between time.Now's before and after, in wall time as well as monotonic,
// across several resyncs.
func TestRealClockTellsWallTime(t *testing.T) {
	t.Parallel()
	var c clock.Real
	deadline := time.Now().Add(350 * time.Millisecond)
	n := 0
	for time.Now().Before(deadline) {
		before := time.Now()
		got := c.Now()
		after := time.Now()
		if got.Before(before) || got.After(after) {
			t.Fatalf("reading %d: got %v, want between %v and %v", n, got, before, after)
		}
		if w := got.UnixNano(); w < before.UnixNano() || w > after.UnixNano() {
			t.Fatalf("reading %d: got wall time %d ns, want between %d and %d", n, w, before.UnixNano(), after.UnixNano())
		}
		// The nanosecond reading, alone and through clock.UnixNano.
		for i, w := range []int64{c.UnixNano(), clock.UnixNano(&c)} {
			if late := time.Now().UnixNano(); w < before.UnixNano() || w > late {
				t.Fatalf("reading %d, UnixNano %d: got %d ns, want between %d and %d", n, i, w, before.UnixNano(), late)
			}
		}
		n++
		if n%1000 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
}

func TestUnixNanoOfAFakeClock(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 23, 12, 0, 0, 123, time.UTC)
	c := clock.NewFake(start)
	if got := clock.UnixNano(c); got != start.UnixNano() {
		t.Errorf("got %d, want %d", got, start.UnixNano())
	}
	c.Advance(time.Second)
	if got := clock.UnixNano(c); got != start.Add(time.Second).UnixNano() {
		t.Errorf("after a second: got %d, want %d", got, start.Add(time.Second).UnixNano())
	}
}

func TestUntilDeadline(t *testing.T) {
	t.Parallel()
	if _, ok := clock.UntilDeadline(context.Background()); ok {
		t.Errorf("no deadline: got ok, want none")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	left, ok := clock.UntilDeadline(ctx)
	if !ok || left <= 59*time.Minute || left > time.Hour {
		t.Errorf("an hour's deadline: got %s, %t; want just under an hour", left, ok)
	}
}

func TestEnded(t *testing.T) {
	t.Parallel()
	if clock.Ended(context.Background()) {
		t.Error("a background context: got ended, want not")
	}
	past, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if !clock.Ended(past) {
		t.Error("a deadline in the past: got not ended, want ended")
	}
	c, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if !clock.Ended(c) {
		t.Error("a cancelled context: got not ended, want ended")
	}
	later, cancel3 := context.WithTimeout(context.Background(), time.Hour)
	defer cancel3()
	if clock.Ended(later) {
		t.Error("an hour to go: got ended, want not")
	}
}
