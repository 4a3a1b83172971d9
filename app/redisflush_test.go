package app_test

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/app"
)

func TestRedisMaxFlushDelayOption(t *testing.T) {
	redis := []string{"--store", "redis", "--redis-addr", "127.0.0.1:6379"}
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		want    time.Duration
		wantErr string
	}{
		{name: "the default gathers for 20µs", args: redis, want: 20 * time.Microsecond},
		{name: "0 writes at once", args: append([]string{"--redis-max-flush-delay", "0"}, redis...), want: 0},
		{name: "the flag sets it", args: append([]string{"--redis-max-flush-delay", "20us"}, redis...), want: 20 * time.Microsecond},
		{name: "the SLUICE_ variable sets it", args: redis, env: map[string]string{"SLUICE_REDIS_MAX_FLUSH_DELAY": "50us"}, want: 50 * time.Microsecond},
		{name: "envoyproxy/ratelimit's REDIS_PIPELINE_WINDOW=0 writes at once", args: redis, env: map[string]string{"REDIS_PIPELINE_WINDOW": "0"}, want: 0},
		{name: "a negative delay is refused", args: append([]string{"--redis-max-flush-delay", "-1ms"}, redis...), wantErr: "--redis-max-flush-delay: -1ms is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := app.ParseServe(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseServe: %v", err)
			}
			if o.Redis.MaxFlushDelay != tc.want {
				t.Errorf("got --redis-max-flush-delay %s, want %s", o.Redis.MaxFlushDelay, tc.want)
			}
		})
	}
}
