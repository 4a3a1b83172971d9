package app_test

import (
	"io"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/app"
)

func TestMemoryMaxBytesOption(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    int64
		wantErr string
	}{
		{name: "the default is sized for a small pod", want: 256 << 20},
		{name: "the environment sets it", env: map[string]string{"SLUICE_MEMORY_MAX_BYTES": "1048576"}, want: 1 << 20},
		{name: "the flag wins over the environment", args: []string{"--memory-max-bytes", "2097152"}, env: map[string]string{"SLUICE_MEMORY_MAX_BYTES": "1048576"}, want: 2 << 20},
		{name: "a negative budget is refused", args: []string{"--memory-max-bytes", "-1"}, wantErr: "memory-max-bytes"},
		{name: "a budget that is not a number is refused", args: []string{"--memory-max-bytes", "1GiB"}, wantErr: "memory-max-bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := app.ParseServe(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an error naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.MemoryMaxBytes != tt.want {
				t.Errorf("got %d, want %d", o.MemoryMaxBytes, tt.want)
			}
		})
	}
}

func TestMemoryStoreMetricsAreRegistered(t *testing.T) {
	ta := start(t, nil, func(o *app.Options) { o.MemoryMaxBytes = 1 << 20 })
	got := registered(t, ta.Registry())
	for _, name := range []string{"sluice_memory_entries", "sluice_memory_bytes", "sluice_memory_mapped_bytes", "sluice_memory_evictions_total", "sluice_memory_refused_total"} {
		if !got[name] {
			t.Errorf("got no %s, want it registered for the memory store", name)
		}
	}
}

// The listeners' series are registered whatever the store, with either
// gRPC server.
func TestListenerMetricsAreRegistered(t *testing.T) {
	for _, server := range []string{"sluice", "grpc-go"} {
		t.Run(server, func(t *testing.T) {
			ta := start(t, nil, func(o *app.Options) { o.GRPCServer = server })
			got := registered(t, ta.Registry())
			want := []string{"sluice_http_body_bytes_pending", "sluice_http_bodies_refused_total", "sluice_grpc_connections",
				"sluice_grpc_calls_open", "sluice_grpc_calls_refused_total", "sluice_grpc_late_requests_total"}
			if server == "sluice" {
				want = append(want, "sluice_grpc_pending_bytes", "sluice_grpc_connection_errors_total")
			}
			for _, name := range want {
				if !got[name] {
					t.Errorf("got no %s, want it registered", name)
				}
			}
		})
	}
}

// registered returns the names of the series reg gathers.
func registered(t *testing.T, reg *prometheus.Registry) map[string]bool {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		got[mf.GetName()] = true
	}
	return got
}
