package main

import (
	"runtime/debug"
	"testing"
	"time"
)

// gcPercent reads the collector's GOGC without changing it.
func gcPercent() int {
	p := debug.SetGCPercent(-1)
	debug.SetGCPercent(p)
	return p
}

func TestTuneGCKeepsAnExplicitGOGC(t *testing.T) {
	t.Setenv("GOGC", "100")
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })
	tuneGC(t.Context())
	time.Sleep(50 * time.Millisecond)
	if p := gcPercent(); p != 100 {
		t.Fatalf("GOGC=100 in the environment, collector at %d", p)
	}
}

func TestTuneGCGivesHeadroom(t *testing.T) {
	t.Setenv("GOGC", "")
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })
	tuneGC(t.Context())
	deadline := time.Now().Add(5 * time.Second)
	for gcPercent() < 400 {
		if time.Now().After(deadline) {
			t.Fatalf("collector at GOGC=%d after tuneGC, want at least 400", gcPercent())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
