package app_test

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/app"
	"github.com/sluice-rl/sluice/clock"
)

// TestReadmeQuickStart starts the service with the flags of the README's
// Quick start and runs every curl command of the README as written (with
// the ports swapped for free ones): each must succeed and print JSON or
// the health check's OK.
func TestReadmeQuickStart(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	f, err := os.Open("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var serveArgs []string
	var curls []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "go run ./cmd/sluice serve "); ok && serveArgs == nil {
			serveArgs = strings.Fields(rest)
		}
		if strings.HasPrefix(line, "curl ") {
			curls = append(curls, line)
		}
	}
	if serveArgs == nil || len(curls) < 3 {
		t.Fatalf("README: got serve args %q and %d curl commands, want both", serveArgs, len(curls))
	}
	for i, a := range serveArgs { // paths are relative to the repository root
		if strings.HasPrefix(a, "examples/") {
			serveArgs[i] = "../" + a
		}
	}
	o, err := app.ParseServe(serveArgs, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatalf("README serve flags: %v", err)
	}
	o.GRPCAddr, o.HTTPAddr, o.DebugAddr, o.LogLevel = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "error"
	a, err := app.New(o, app.Deps{Clock: clock.NewFake(time.Unix(1_800_000_000, 0))})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Shutdown(t.Context()) })
	for _, c := range curls {
		cmdline := strings.NewReplacer("localhost:8080", a.HTTPAddr(), "127.0.0.1:6070", a.DebugAddr()).Replace(c)
		out, err := exec.Command("bash", "-c", cmdline+" --fail --max-time 5").Output()
		if err != nil {
			t.Errorf("%s: %v", c, err)
			continue
		}
		body := strings.TrimSpace(string(out))
		switch {
		case strings.Contains(c, "/healthcheck"):
			if body != "OK" {
				t.Errorf("%s: got %q, want OK", c, body)
			}
		case strings.Contains(c, "/rlconfig"):
			if !strings.Contains(body, "edge_proxy.") {
				t.Errorf("%s: got %q, want the edge_proxy rules", c, body)
			}
		default:
			var v map[string]any
			if err := json.Unmarshal(out, &v); err != nil {
				t.Errorf("%s: got %q, want JSON: %v", c, body, err)
			} else if _, bad := v["error"]; bad {
				t.Errorf("%s: got an error answer %q", c, body)
			}
		}
	}
}
