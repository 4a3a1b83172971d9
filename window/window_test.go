package window_test

import (
	"math"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/window"
)

func TestUnits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		want time.Duration
	}{
		{"second", time.Second},
		{"MINUTE", time.Minute},
		{"hour", time.Hour},
		{"day", 24 * time.Hour},
		{"week", 7 * 24 * time.Hour},
		{"month", 30 * 24 * time.Hour},
		{"year", 365 * 24 * time.Hour},
	}
	for _, tt := range tests {
		u, err := window.ParseUnit(tt.name)
		if err != nil {
			t.Fatalf("ParseUnit(%q): %v", tt.name, err)
		}
		if got := u.Duration(); got != tt.want {
			t.Errorf("%s: got %s, want %s", tt.name, got, tt.want)
		}
	}
	if _, err := window.ParseUnit("fortnight"); err == nil {
		t.Errorf("ParseUnit(fortnight): got nil error, want one")
	}
}

func TestWindowsAreAlignedToTheEpoch(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_123, 500_000_000)
	if got, want := window.Start(now, 60), int64(1_700_000_100); got != want {
		t.Errorf("minute start: got %d, want %d", got, want)
	}
	if got, want := window.ResetIn(now, 60), 37*time.Second; got != want {
		t.Errorf("minute reset: got %s, want %s", got, want)
	}
	// On the boundary a whole window remains.
	edge := time.Unix(1_700_000_100, 0)
	if got, want := window.ResetIn(edge, 60), 60*time.Second; got != want {
		t.Errorf("reset on the boundary: got %s, want %s", got, want)
	}
	if got, want := window.Start(edge, 3600), int64(1_699_999_200); got != want {
		t.Errorf("hour start: got %d, want %d", got, want)
	}
}

func TestHitCountsEvenWhenOver(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                     string
		count, hits, limit       int64
		wantOver                 bool
		wantAfter, wantRemaining int64
	}{
		{name: "the first hit leaves limit-1", count: 0, hits: 1, limit: 20, wantAfter: 1, wantRemaining: 19},
		{name: "reaching the limit exactly is allowed", count: 19, hits: 1, limit: 20, wantAfter: 20, wantRemaining: 0},
		{name: "one past the limit is over", count: 20, hits: 1, limit: 20, wantOver: true, wantAfter: 21},
		{name: "a limit of zero is always over", count: 0, hits: 1, limit: 0, wantOver: true, wantAfter: 1},
		{name: "zero hits peek", count: 5, hits: 0, limit: 20, wantAfter: 5, wantRemaining: 15},
		{name: "a counter that would overflow stays at the largest int64", count: 2, hits: math.MaxInt64, limit: 20, wantOver: true, wantAfter: math.MaxInt64},
		{name: "a counter at the largest int64 stays there", count: math.MaxInt64, hits: 1, limit: 20, wantOver: true, wantAfter: math.MaxInt64},
	}
	for _, tt := range tests {
		r := window.Hit(tt.count, tt.hits, tt.limit)
		if r.Over != tt.wantOver || r.After != tt.wantAfter || r.Remaining != tt.wantRemaining || r.Before != tt.count {
			t.Errorf("%s: got %+v, want over=%v after=%d remaining=%d", tt.name, r, tt.wantOver, tt.wantAfter, tt.wantRemaining)
		}
	}
}
