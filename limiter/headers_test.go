package limiter_test

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limiter"
)

func TestRetryAfterIsWholeSecondsRoundedUpAtLeastOne(t *testing.T) {
	t.Parallel()
	tests := []struct {
		retryIn time.Duration
		want    int64
	}{
		{retryIn: 0, want: 1},
		{retryIn: time.Nanosecond, want: 1},
		{retryIn: 50 * time.Millisecond, want: 1},
		{retryIn: time.Second, want: 1},
		{retryIn: time.Second + time.Nanosecond, want: 2},
		{retryIn: 36 * time.Second, want: 36},
		{retryIn: 3 * time.Hour, want: 10800},
	}
	for _, tt := range tests {
		if got := limiter.RetryAfter(tt.retryIn); got != tt.want {
			t.Errorf("RetryAfter(%s): got %d, want %d", tt.retryIn, got, tt.want)
		}
	}
}

func TestResetSecondsIsWholeSecondsRoundedDown(t *testing.T) {
	t.Parallel()
	tests := []struct {
		resetIn time.Duration
		want    int64
	}{
		{resetIn: 0, want: 0},
		{resetIn: 999 * time.Millisecond, want: 0},
		{resetIn: time.Second, want: 1},
		{resetIn: 59*time.Second + 999*time.Millisecond, want: 59},
	}
	for _, tt := range tests {
		if got := limiter.ResetSeconds(tt.resetIn); got != tt.want {
			t.Errorf("ResetSeconds(%s): got %d, want %d", tt.resetIn, got, tt.want)
		}
	}
}
