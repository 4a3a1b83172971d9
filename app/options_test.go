package app_test

import (
	"io"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/app"
)

func TestGRPCWorkersOption(t *testing.T) {
	noEnv := func(string) string { return "" }
	o, err := app.ParseServe(nil, noEnv, io.Discard)
	if err != nil || o.GRPCWorkers != 64 {
		t.Fatalf("default: got %d, %v, want 64", o.GRPCWorkers, err)
	}
	o, err = app.ParseServe(nil, func(k string) string {
		if k == "SLUICE_GRPC_WORKERS" {
			return "0"
		}
		return ""
	}, io.Discard)
	if err != nil || o.GRPCWorkers != 0 {
		t.Fatalf("SLUICE_GRPC_WORKERS=0: got %d, %v, want 0", o.GRPCWorkers, err)
	}
	for _, v := range []string{"-1", "65537"} {
		_, err := app.ParseServe([]string{"--grpc-workers", v}, noEnv, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "grpc-workers") || !strings.Contains(err.Error(), v) {
			t.Errorf("--grpc-workers %s: got %v, want an error naming the flag and value", v, err)
		}
	}
}

func TestABadDurationSaysWhatADurationLooksLike(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
	}{
		{args: []string{"--redis-timeout", "100"}},
		{env: map[string]string{"SLUICE_REDIS_TIMEOUT": "100"}},
	} {
		_, err := app.ParseServe(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), `"100" is not a duration`) || !strings.Contains(err.Error(), "100ms") {
			t.Errorf("%v %v: got %v, want an error saying what a duration looks like", tc.args, tc.env, err)
		}
	}
}
