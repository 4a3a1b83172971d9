package deploy_test

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// faultsScript is the script that produces the table of faults tried and
// survived in docs/operations.md. Running it takes about half a minute and
// several processes, so CI checks its shape here instead: a broken script
// fails these tests without being run.
const faultsScript = "../scripts/faults.sh"

func readFaultsScript(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(faultsScript)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestFaultsScriptParses(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	out, err := exec.Command("bash", "-n", faultsScript).CombinedOutput()
	if err != nil {
		t.Fatalf("bash -n %s: %v\n%s", faultsScript, err, out)
	}
	fi, err := os.Stat(faultsScript)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&0o111 == 0 {
		t.Errorf("%s: got mode %v, want executable", faultsScript, fi.Mode().Perm())
	}
}

func TestFaultsScriptRunsEveryScenario(t *testing.T) {
	script := readFaultsScript(t)
	tests := []struct {
		name string
		want string
	}{
		{"it stops at the first failing command", "set -euo pipefail"},
		{"it cleans up its processes and files on exit", "trap cleanup EXIT"},
		{"it builds the sluice it tries", `go build -o "$work/sluice" ./cmd/sluice`},
		{"it runs the bad inputs scenario", "\nbad_inputs\n"},
		{"it sends 80,000 descriptors", "i < 80000"},
		{"it sends a 1 MiB descriptor value", "json-value-1mib 100"},
		{"it sends a 1 MiB KV id", "v1-id-1mib 100"},
		{"it sends invalid UTF-8", `\xff\xfe`},
		{"it measures the server's memory", "VmRSS"},
		{"it runs the over-admission scenario", "\nover_admission\n"},
		{"it runs the Redis killed scenario", "\nredis_killed\n"},
		{"it runs the Redis paused scenario", "\nredis_paused\n"},
		{"it runs the SIGTERM scenario", "\nsigterm\n"},
		{"it runs the bad reloads scenario", "\nbad_reloads\n"},
		{"it swaps the runtime root", `mv -T "$rt/current.new" "$rt/current"`},
		{"it builds the HTTP/2 abuser", `go build -o "$work/h2abuse" ./scripts/h2abuse`},
		{"it runs the HTTP/2 abuse scenario", "\nh2_abuse\n"},
		{"it resets calls in a loop while Redis is paused", "-mode reset -n 200000"},
		{"it opens calls past --grpc-max-streams", "-mode idle -conns 80 -streams 1000"},
		{"it leaves messages unfinished", "-mode unfinished"},
		{"it runs the slow HTTP clients scenario", "\nslow_http\n"},
		{"it prints the table's header", `echo "| scenario | tried | measured | held |"`},
		{"it fails when a scenario did not hold", `exit "$failed"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(script, tt.want) {
				t.Errorf("%s: got no %q, want it", faultsScript, tt.want)
			}
		})
	}
}

// TestFaultsScriptListensOnLoopbackOnly checks that every address the
// script hands to a server is on 127.0.0.1.
func TestFaultsScriptListensOnLoopbackOnly(t *testing.T) {
	script := readFaultsScript(t)
	addr := regexp.MustCompile(`--(?:grpc-addr|http-addr|debug-addr|redis-addr|bind) "?([^ "$]*)`)
	found := addr.FindAllStringSubmatch(script, -1)
	if len(found) == 0 {
		t.Fatalf("%s: got no listen addresses, want some", faultsScript)
	}
	for _, m := range found {
		if m[1] != "127.0.0.1" && m[1] != "127.0.0.1:" && m[1] != "off" {
			t.Errorf("%s: got %q, want 127.0.0.1 or off", faultsScript, m[0])
		}
	}
}

// TestFaultsScriptFlagsAreDocumented checks that every flag the script
// gives `sluice serve` is one docs/configuration.md lists, so that a
// renamed flag breaks this test rather than the script.
func TestFaultsScriptFlagsAreDocumented(t *testing.T) {
	script := readFaultsScript(t)
	doc, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	flag := regexp.MustCompile(`--[a-z][a-z0-9-]*`)
	var flags []string
	in := false
	for _, line := range strings.Split(script, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "start_sluice ") || strings.HasPrefix(trimmed, `"$sluice" serve `) {
			in = true
		}
		if in {
			flags = append(flags, flag.FindAllString(line, -1)...)
		}
		in = in && strings.HasSuffix(trimmed, `\`)
	}
	if len(flags) < 10 {
		t.Fatalf("%s: got %d flags given to sluice serve, want at least 10", faultsScript, len(flags))
	}
	for _, f := range flags {
		if !strings.Contains(string(doc), "`"+f+"`") {
			t.Errorf("%s gives sluice serve %s: got no `%s` in docs/configuration.md, want it documented", faultsScript, f, f)
		}
	}
}

// TestFaultsTableIsInTheDocs checks that docs/operations.md shows a run of
// the script: its command, its machine line and a row per scenario.
func TestFaultsTableIsInTheDocs(t *testing.T) {
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Faults tried and survived\n")
	if !ok {
		t.Fatal(`docs/operations.md: got no "## Faults tried and survived" section, want one`)
	}
	tests := []struct {
		name string
		want string
	}{
		{"it gives the command", "scripts/faults.sh\n```"},
		{"it gives the machine the run was on", "    scripts/faults.sh, "},
		{"it has the table's header", "| scenario | tried | measured | held |"},
		{"it has a row for bad inputs", "\n| 1. bad inputs"},
		{"it has a row for over-admission", "\n| 2. over-admission"},
		{"it has a row for Redis killed", "\n| 3. Redis killed"},
		{"it has a row for Redis paused", "\n| 4. Redis paused"},
		{"it has a row for SIGTERM", "\n| 5. SIGTERM"},
		{"it has a row for bad reloads", "\n| 6. bad reloads"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(section, tt.want) {
				t.Errorf("docs/operations.md, Faults tried and survived: got no %q, want it", tt.want)
			}
		})
	}
}

// The benchmark scripts BENCHMARKS.md runs parse and are executable.
func TestBenchScriptsParse(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	for _, script := range []string{"../scripts/bench-rls.sh", "../scripts/ab-cpu.sh"} {
		if out, err := exec.Command("bash", "-n", script).CombinedOutput(); err != nil {
			t.Errorf("bash -n %s: %v\n%s", script, err, out)
		}
		fi, err := os.Stat(script)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o111 == 0 {
			t.Errorf("%s: got mode %v, want executable", script, fi.Mode().Perm())
		}
	}
}
