package app_test

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/app"
)

// TestEnvoyDocsInspectAndResetExample runs the worked example of
// docs/envoy.md's "Inspect and reset counters" as written (the ports
// swapped for free ones): every command must print what the page shows,
// but for the seconds until the window ends.
func TestEnvoyDocsInspectAndResetExample(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	doc, err := os.ReadFile("../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "## Inspect and reset counters\n")
	if !ok {
		t.Fatal(`docs/envoy.md has no "## Inspect and reset counters" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, example, ok := strings.Cut(section, "```sh\n$ ")
	if !ok {
		t.Fatal("the section has no shell example with $ prompts")
	}
	example, _, _ = strings.Cut("$ "+example, "```")

	// Each step: a command and the lines it prints.
	type step struct {
		cmd  string
		want []string
	}
	var steps []step
	for _, line := range strings.Split(strings.TrimSpace(example), "\n") {
		switch {
		case strings.HasPrefix(line, "$ #"):
		case strings.HasPrefix(line, "$ "):
			steps = append(steps, step{cmd: strings.TrimPrefix(line, "$ ")})
		case len(steps) > 0:
			steps[len(steps)-1].want = append(steps[len(steps)-1].want, line)
		}
	}
	if len(steps) < 6 {
		t.Fatalf("got %d commands in the example, want the requests, inspects and a reset", len(steps))
	}

	const config = `
domain: edge_proxy
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
`
	ta := start(t, map[string]string{"edge.yaml": config}, func(o *app.Options) { o.AdminAddr = "127.0.0.1:0" })
	ports := strings.NewReplacer("localhost:8080", ta.HTTPAddr(), "localhost:9091", ta.AdminAddr())
	seconds := regexp.MustCompile(`"reset_in_seconds":[0-9]+`)
	for i, s := range steps {
		out, err := exec.Command("bash", "-c", ports.Replace(s.cmd)+" --max-time 5").Output()
		if err != nil {
			t.Fatalf("step %d %s: %v", i+1, s.cmd, err)
		}
		got := seconds.ReplaceAllString(strings.TrimSpace(string(out)), `"reset_in_seconds":N`)
		want := seconds.ReplaceAllString(strings.Join(s.want, "\n"), `"reset_in_seconds":N`)
		if strings.Contains(s.cmd, "entry=user=1") {
			// No rule: nothing to wait for, and the page says so.
			got, want = strings.TrimSpace(string(out)), strings.Join(s.want, "\n")
		}
		if got != want {
			t.Errorf("step %d %s:\ngot  %s\nwant %s", i+1, s.cmd, got, want)
		}
	}
}
