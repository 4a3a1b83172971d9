package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-rl/sluice/app"
)

// The worked example of docs/replay.md: 2 a second per client.
const (
	replayConfig = `domain: edge
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 2}
`
	// replayLooser allows 5 a second.
	replayLooser = `domain: edge
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 5}
`
	replayLog = `{"time":"2026-11-23T15:00:00.1Z","domain":"edge","descriptors":[{"entries":[{"key":"client","value":"10.0.0.1"}]}]}
{"time":"2026-11-23T15:00:00.2Z","domain":"edge","descriptors":[{"entries":[{"key":"client","value":"10.0.0.1"}]}]}
{"time":"2026-11-23T15:00:00.3Z","domain":"edge","descriptors":[{"entries":[{"key":"client","value":"10.0.0.1"}]}]}
`
)

// writeFile writes content to dir/name and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReplayCommand(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Dir(writeFile(t, dir, "config/edge.yaml", replayConfig))
	looser := filepath.Dir(writeFile(t, dir, "looser/edge.yaml", replayLooser))
	log := writeFile(t, dir, "requests.log", replayLog)
	badLog := writeFile(t, dir, "bad.log", replayLog+`{"time":"2026-11-23T15:00:00.4Z","domain":"edge","descriptors":[{"entries":[{"key":"client","valeu":"10.0.0.1"}]}]}`+"\n"+replayLog[:strings.IndexByte(replayLog, '\n')+1])
	backLog := writeFile(t, dir, "back.log", replayLog+`{"time":"2026-11-23T14:00:00Z","domain":"edge","descriptors":[{"entries":[{"key":"client","value":"10.0.0.1"}]}]}`+"\n")
	stepLog := writeFile(t, dir, "step.log", replayLog+`{"time":"2026-11-23T15:00:00.25Z","domain":"edge","descriptors":[{"entries":[{"key":"client","value":"10.0.0.1"}]}]}`+"\nnot json\n")
	badCfg := filepath.Dir(writeFile(t, dir, "badcfg/edge.yaml", "domain: edge\ndescriptors:\n  - key: client\n    rate_limit: {unit: fortnight, requests_per_unit: 2}\n"))

	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string   // the whole standard output, when not empty
		wantErr  []string // in standard error
	}{
		{name: "the table shows each rule's allowed, over_limit, near_limit and first_over",
			args: []string{"--config", cfg, "--log", log}, wantCode: 0,
			wantOut: "rule         allowed  over_limit  near_limit  first_over\n" +
				"edge.client  2        1           1           2026-11-23T15:00:00.3Z\n" +
				"3 requests from 2026-11-23T15:00:00.1Z to 2026-11-23T15:00:00.3Z\n"},
		{name: "--json prints one object per rule",
			args: []string{"--config", cfg, "--log", log, "--json"}, wantCode: 0,
			wantOut: `{"rule":"edge.client","allowed":2,"over_limit":1,"near_limit":1,"first_over":"2026-11-23T15:00:00.3Z"}` + "\n"},
		{name: "--json gives first_over null when a rule never went over",
			args: []string{"--config", looser, "--log", log, "--json"}, wantCode: 0,
			wantOut: `{"rule":"edge.client","allowed":3,"over_limit":0,"near_limit":0,"first_over":null}` + "\n"},
		{name: "--compare shows both configs side by side",
			args: []string{"--config", cfg, "--log", log, "--compare", looser}, wantCode: 0,
			wantOut: "A: " + cfg + "\nB: " + looser + "\n" +
				"rule         allowed A  allowed B  over_limit A  over_limit B  near_limit A  near_limit B  first_over A            first_over B\n" +
				"edge.client  2          3          1             0             1             0             2026-11-23T15:00:00.3Z  -\n" +
				"A: 3 requests from 2026-11-23T15:00:00.1Z to 2026-11-23T15:00:00.3Z\n" +
				"B: 3 requests from 2026-11-23T15:00:00.1Z to 2026-11-23T15:00:00.3Z\n"},
		{name: "--compare --json gives each object its config",
			args: []string{"--config", cfg, "--log", log, "--compare", looser, "--json"}, wantCode: 0,
			wantOut: `{"config":"` + cfg + `","rule":"edge.client","allowed":2,"over_limit":1,"near_limit":1,"first_over":"2026-11-23T15:00:00.3Z"}` + "\n" +
				`{"config":"` + looser + `","rule":"edge.client","allowed":3,"over_limit":0,"near_limit":0,"first_over":null}` + "\n"},
		{name: "--near-limit-ratio changes near_limit as serve's does",
			args: []string{"--config", cfg, "--log", log, "--json", "--near-limit-ratio", "0.4"}, wantCode: 0,
			wantOut: `{"rule":"edge.client","allowed":2,"over_limit":1,"near_limit":2,"first_over":"2026-11-23T15:00:00.3Z"}` + "\n"},
		{name: "a bad line stops the replay naming file, line and field",
			args: []string{"--config", cfg, "--log", badLog}, wantCode: 1,
			wantErr: []string{badLog + `:4: invalid log line: descriptors[0].entries[0]: unknown field "valeu"`}},
		{name: "--skip-bad reports the bad line and goes on",
			args: []string{"--config", cfg, "--log", badLog, "--json", "--skip-bad"}, wantCode: 0,
			wantOut: `{"rule":"edge.client","allowed":2,"over_limit":2,"near_limit":1,"first_over":"2026-11-23T15:00:00.3Z"}` + "\n",
			wantErr: []string{"skipped " + badLog + ":4: "}},
		{name: "the table's last line counts lines skipped and lines a little back in time",
			args: []string{"--config", cfg, "--log", stepLog, "--skip-bad"}, wantCode: 0,
			wantOut: "rule         allowed  over_limit  near_limit  first_over\n" +
				"edge.client  2        2           1           2026-11-23T15:00:00.3Z\n" +
				"4 requests from 2026-11-23T15:00:00.1Z to 2026-11-23T15:00:00.3Z, 1 replayed a little back in time, 1 bad line(s) skipped\n"},
		{name: "a line an hour back in time is refused",
			args: []string{"--config", cfg, "--log", backLog}, wantCode: 1,
			wantErr: []string{backLog + ":4: line goes back in time", "sort the log by time"}},
		{name: "a config that does not load is reported with file:line",
			args: []string{"--config", badCfg, "--log", log}, wantCode: 1, wantErr: []string{"edge.yaml:4:", "fortnight"}},
		{name: "a missing log is an error", args: []string{"--config", cfg, "--log", filepath.Join(dir, "nope.log")}, wantCode: 1, wantErr: []string{"nope.log"}},
		{name: "--config is required", args: []string{"--log", log}, wantCode: 2, wantErr: []string{"--config is required"}},
		{name: "--log is required", args: []string{"--config", cfg}, wantCode: 2, wantErr: []string{"--log is required"}},
		{name: "--compare cannot read standard input twice", args: []string{"--config", cfg, "--log", "-", "--compare", looser}, wantCode: 2, wantErr: []string{"--compare reads the log twice"}},
		{name: "a negative backstep is refused", args: []string{"--config", cfg, "--log", log, "--max-backstep", "-1s"}, wantCode: 2, wantErr: []string{"--max-backstep -1s is negative"}},
		{name: "a near-limit ratio out of range is refused", args: []string{"--config", cfg, "--log", log, "--near-limit-ratio", "2"}, wantCode: 2, wantErr: []string{"--near-limit-ratio 2 is outside (0, 1]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runCmd(append([]string{"replay"}, tt.args...)...)
			if code != tt.wantCode {
				t.Fatalf("got exit %d, want %d; stderr:\n%s", code, tt.wantCode, errOut)
			}
			if tt.wantOut != "" && out != tt.wantOut {
				t.Errorf("got stdout\n%s\nwant\n%s", out, tt.wantOut)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(errOut, w) {
					t.Errorf("got stderr %q, want it to contain %q", errOut, w)
				}
			}
		})
	}
}

func TestReplayJSONHasExactlyTheDocumentedFields(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Dir(writeFile(t, dir, "config/edge.yaml", replayConfig))
	log := writeFile(t, dir, "requests.log", replayLog)
	code, out, errOut := runCmd("replay", "--config", cfg, "--log", log, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", line, err)
		}
		var keys []string
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if want := []string{"allowed", "first_over", "near_limit", "over_limit", "rule"}; !slices.Equal(keys, want) {
			t.Errorf("got fields %v, want %v", keys, want)
		}
	}
}

// TestReplayBinaryEqualsServe runs a service writing its request log,
// asks it over gRPC, then runs the built sluice binary's replay on the log
// with the same config: per rule, the same allowed and over-limit calls.
func TestReplayBinaryEqualsServe(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	cfg := filepath.Dir(writeFile(t, dir, "config/edge.yaml", `domain: edge
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
`))
	logPath := filepath.Join(dir, "requests.log")
	addr := startService(t, func(o *app.Options) { o.ConfigPath, o.RequestLog = cfg, logPath })
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type counts struct{ allowed, over uint64 }
	served := map[string]*counts{"edge.client": {}, "edge.user": {}}
	const calls = 8
	for range calls {
		resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
			{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "client", Value: "10.0.0.1"}}},
			{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "user", Value: "ann"}}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		for i, rule := range []string{"edge.client", "edge.user"} {
			if resp.Statuses[i].Code == rlsv3.RateLimitResponse_OVER_LIMIT {
				served[rule].over++
			} else {
				served[rule].allowed++
			}
		}
	}
	// The writer flushes as soon as it has nothing waiting.
	deadline := time.Now().Add(5 * time.Second)
	for {
		data, _ := os.ReadFile(logPath)
		if bytes.Count(data, []byte{'\n'}) == calls {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the request log holds %q, want %d lines", data, calls)
		}
		time.Sleep(10 * time.Millisecond)
	}
	out, err := exec.Command(buildSluice(t), "replay", "--config", cfg, "--log", logPath, "--json").Output()
	if err != nil {
		t.Fatalf("sluice replay: %v", err)
	}
	var got []ruleJSON
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r ruleJSON
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		got = append(got, r)
	}
	if len(got) != len(served) {
		t.Fatalf("got %d rules, want %d: %s", len(got), len(served), out)
	}
	for _, r := range got {
		want := served[r.Rule]
		if want == nil {
			t.Errorf("replay has rule %s, serve answered none", r.Rule)
			continue
		}
		if r.Allowed != want.allowed || r.OverLimit != want.over {
			t.Errorf("%s: got allowed %d, over_limit %d; serve answered %d allowed, %d over", r.Rule, r.Allowed, r.OverLimit, want.allowed, want.over)
		}
	}
	if served["edge.user"].over == 0 {
		t.Error("serve answered no over-limit call for edge.user: the test does not test it")
	}
}

// TestReplayDocsExample runs the worked example of docs/replay.md: its
// config, its log and each of its commands, whose output must be the one
// the page shows.
func TestReplayDocsExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/replay.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := map[string][]string{} // fence info → blocks
	var cur *strings.Builder
	var info string
	for _, line := range strings.SplitAfter(string(doc), "\n") {
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			info, cur = strings.TrimSpace(strings.TrimPrefix(line, "```")), &strings.Builder{}
		case cur != nil && strings.TrimSpace(line) == "```":
			blocks[info] = append(blocks[info], cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line)
		}
	}
	var logText string
	for _, b := range blocks[""] {
		if strings.HasPrefix(b, `{"time"`) {
			logText = b
		}
	}
	if len(blocks["yaml"]) == 0 || logText == "" || len(blocks["console"]) < 4 {
		t.Fatalf("docs/replay.md lost its example: %d yaml, log %q, %d console blocks", len(blocks["yaml"]), logText, len(blocks["console"]))
	}
	config := blocks["yaml"][0]
	dir := t.TempDir()
	writeFile(t, dir, "config/edge.yaml", config)
	writeFile(t, dir, "looser/edge.yaml", strings.Replace(config, "requests_per_unit: 2", "requests_per_unit: 5", 1))
	writeFile(t, dir, "requests.log", logText)
	t.Chdir(dir)
	for _, b := range blocks["console"] {
		cmdLine, want, _ := strings.Cut(b, "\n")
		args := strings.Fields(strings.TrimPrefix(cmdLine, "$ sluice "))
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errOut := runCmd(args...)
			if code != 0 || out != want {
				t.Errorf("got exit %d, stdout\n%s\nstderr %s\nwant exit 0 and\n%s", code, out, errOut, want)
			}
		})
	}
}
