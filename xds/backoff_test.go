package xds

import (
	"testing"
	"time"
)

func TestBackoffDoublesUpToTheMaximum(t *testing.T) {
	c := &Client{opts: Options{BackoffInitial: 10 * time.Second, BackoffMax: 60 * time.Second}}
	tests := []struct {
		failures int
		want     time.Duration // the wait before jitter takes up to half off
	}{
		{failures: 0, want: 10 * time.Second},
		{failures: 1, want: 20 * time.Second},
		{failures: 2, want: 40 * time.Second},
		{failures: 3, want: 60 * time.Second},
		{failures: 1000, want: 60 * time.Second},
	}
	for _, tt := range tests {
		for range 50 {
			got := c.backoff(tt.failures)
			if got < tt.want/2 || got > tt.want {
				t.Fatalf("after %d failures: got %s, want between %s and %s", tt.failures, got, tt.want/2, tt.want)
			}
		}
	}
}
