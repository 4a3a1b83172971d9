package app_test

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/app"
)

func TestConnectionLimitFlags(t *testing.T) {
	t.Run("the defaults bound every connection", func(t *testing.T) {
		o, err := app.ParseServe(nil, func(string) string { return "" }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if o.HTTPReadTimeout != 10*time.Second || o.HTTPWriteTimeout != 30*time.Second || o.HTTPIdleTimeout != 2*time.Minute ||
			o.MaxConnections != 4096 || o.GRPCMaxConnectionIdle != 5*time.Minute || o.GRPCKeepaliveMinTime != 10*time.Second || o.GRPCMaxConcurrentStreams != 1000 ||
			o.GRPCMaxStreams != 65536 || o.GRPCMaxPendingBytes != 64<<20 || o.HTTPMaxHeaderBytes != 64<<10 {
			t.Errorf("got %v %v %v %d %v %v %d %d %d %d, want 10s 30s 2m0s 4096 5m0s 10s 1000 65536 67108864 65536", o.HTTPReadTimeout, o.HTTPWriteTimeout, o.HTTPIdleTimeout,
				o.MaxConnections, o.GRPCMaxConnectionIdle, o.GRPCKeepaliveMinTime, o.GRPCMaxConcurrentStreams, o.GRPCMaxStreams, o.GRPCMaxPendingBytes, o.HTTPMaxHeaderBytes)
		}
	})
	t.Run("flags and SLUICE_ variables set them", func(t *testing.T) {
		env := map[string]string{"SLUICE_MAX_CONNECTIONS": "7", "SLUICE_GRPC_MAX_CONNECTION_IDLE": "1m"}
		o, err := app.ParseServe([]string{"--http-read-timeout", "1s", "--grpc-max-concurrent-streams", "9"}, func(k string) string { return env[k] }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if o.HTTPReadTimeout != time.Second || o.GRPCMaxConcurrentStreams != 9 || o.MaxConnections != 7 || o.GRPCMaxConnectionIdle != time.Minute {
			t.Errorf("got %v %d %d %v, want 1s 9 7 1m0s", o.HTTPReadTimeout, o.GRPCMaxConcurrentStreams, o.MaxConnections, o.GRPCMaxConnectionIdle)
		}
	})
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--http-read-timeout", "0"}, "--http-read-timeout: 0s must be positive"},
		{[]string{"--http-write-timeout", "-1s"}, "--http-write-timeout: -1s must be positive"},
		{[]string{"--http-idle-timeout", "0"}, "--http-idle-timeout: 0s must be positive"},
		{[]string{"--grpc-keepalive-min-time", "0"}, "--grpc-keepalive-min-time: 0s must be positive"},
		{[]string{"--grpc-max-connection-idle", "-1s"}, "--grpc-max-connection-idle: -1s is negative"},
		{[]string{"--max-connections", "-1"}, "--max-connections: -1 is negative"},
		{[]string{"--grpc-max-concurrent-streams", "0"}, "--grpc-max-concurrent-streams: 0 must be at least 1"},
		{[]string{"--grpc-max-streams", "-1"}, "--grpc-max-streams: -1 is negative"},
		{[]string{"--http-max-header-bytes", "100"}, "--http-max-header-bytes: 100 must be at least 1024"},
		{[]string{"--grpc-max-pending-bytes", "-1"}, "--grpc-max-pending-bytes: -1 is negative"},
	} {
		t.Run(strings.Join(tt.args, " ")+" is refused", func(t *testing.T) {
			_, err := app.ParseServe(tt.args, func(string) string { return "" }, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}
