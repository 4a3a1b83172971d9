package gctune

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		live uint64
		want int
	}{
		{live: 0, want: 3200},         // no collection yet: the cap
		{live: 1 * mib, want: 3200},   // 12800% capped
		{live: 8 * mib, want: 1600},   // 128 MiB of headroom
		{live: 20 * mib, want: 640},   // 128 MiB of headroom
		{live: 32 * mib, want: 400},   // exactly the minimum
		{live: 1024 * mib, want: 400}, // the share is larger: the minimum
		{live: 1<<63 + 1, want: 400},  // no overflow
		{live: 5 * mib, want: 2560},
	} {
		if got := Percent(tc.live, 128*mib, 400, 3200); got != tc.want {
			t.Errorf("Percent(%d): got %d, want %d", tc.live, got, tc.want)
		}
	}
}

func TestTuneSetsGOGC(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		// A headroom far above any test's live heap: the cap applies.
		Tune(ctx, Options{Headroom: 1 << 40, MinPercent: 400, MaxPercent: 777, Interval: time.Millisecond})
	}()
	gogc := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	deadline := time.Now().Add(5 * time.Second)
	for {
		metrics.Read(gogc)
		if p := gogc[0].Value.Uint64(); p == 777 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("GOGC is %d after 5s, want 777", p)
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
}
