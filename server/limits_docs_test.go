package server_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/server"
	"github.com/sluice-rl/sluice/store/memory"
)

// docExample is one curl command of docs/api.md and the output shown
// under it.
type docExample struct {
	line    int    // of the command in the doc
	command string // as written, continuation lines joined
	lang    string // of the output block: json or http
	output  string
}

// docExamples returns the curl commands of a Markdown document: every
// ```sh block holding a command that starts with "curl ", each followed by
// a ```json block (the body it prints) or a ```http block (the status
// line, some headers, a blank line and the body, as curl -i prints them).
func docExamples(t *testing.T, path string) []docExample {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	type block struct {
		line       int
		lang, text string
	}
	var blocks []block
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	var cur *block
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &block{line: n + 1, lang: strings.TrimPrefix(line, "```")}
		case cur != nil && line == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		}
	}
	if cur != nil {
		t.Fatalf("%s:%d: unterminated code block", path, cur.line-1)
	}
	var examples []docExample
	for i, b := range blocks {
		if b.lang != "sh" || !strings.HasPrefix(b.text, "curl ") {
			continue
		}
		cmd := strings.TrimSpace(strings.ReplaceAll(b.text, "\\\n", " "))
		if strings.Contains(cmd, "\n") {
			t.Fatalf("%s:%d: one curl command per block, please", path, b.line)
		}
		if i+1 == len(blocks) || (blocks[i+1].lang != "json" && blocks[i+1].lang != "http") {
			t.Fatalf("%s:%d: the curl command must be followed by a ```json or ```http block with its output", path, b.line)
		}
		examples = append(examples, docExample{line: b.line, command: cmd, lang: blocks[i+1].lang, output: blocks[i+1].text})
	}
	return examples
}

// TestAPIDocCurlExamples runs every curl command of docs/api.md, in order,
// against a real HTTP server with examples/limits and a stopped clock, and
// checks each answer against the output the doc shows.
func TestAPIDocCurlExamples(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed; the docs/api.md examples need it to run as written")
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("sh is not installed; the docs/api.md examples are shell commands")
	}
	examples := docExamples(t, "../docs/api.md")
	if len(examples) < 10 {
		t.Fatalf("got %d curl examples in docs/api.md, want at least 10", len(examples))
	}

	set, err := limits.Load("../examples/limits/defaults.yaml", "../examples/limits/overrides.yaml")
	if err != nil {
		t.Fatalf("load example limits: %v", err)
	}
	kv := server.NewKV(server.KVOptions{
		Limiter: limiter.New(memory.New(memory.Options{}), clock.NewFake(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))),
		Limits:  func() *limits.Set { return set },
	})
	mux := http.NewServeMux()
	mux.Handle("/v1/", server.KVHTTPHandler(kv))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := lis.Addr().String()

	for _, ex := range examples {
		where := fmt.Sprintf("docs/api.md:%d: %s", ex.line, ex.command)
		if !strings.Contains(ex.command, "localhost:8080") {
			t.Errorf("%s: the command must talk to localhost:8080", where)
			continue
		}
		cmdline := strings.ReplaceAll(ex.command, "localhost:8080", addr)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cmd := exec.CommandContext(ctx, sh, "-c", cmdline)
		out, err := cmd.Output()
		cancel()
		if err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		if ex.lang == "json" {
			if diff := jsonDiff(t, out, []byte(ex.output)); diff != "" {
				t.Errorf("%s:\n%s", where, diff)
			}
			continue
		}
		checkHTTPOutput(t, where, string(out), ex.output)
	}
}

// checkHTTPOutput compares curl -i output with the doc's: the same status
// line, every header the doc shows (others, such as Date, may be added),
// and the same body as JSON.
func checkHTTPOutput(t *testing.T, where, got, want string) {
	t.Helper()
	split := func(s string) (status string, headers []string, body string) {
		s = strings.ReplaceAll(s, "\r\n", "\n")
		head, body, _ := strings.Cut(s, "\n\n")
		lines := strings.Split(head, "\n")
		return lines[0], lines[1:], body
	}
	gotStatus, gotHeaders, gotBody := split(got)
	wantStatus, wantHeaders, wantBody := split(want)
	if gotStatus != wantStatus {
		t.Errorf("%s: got status line %q, want %q", where, gotStatus, wantStatus)
	}
	have := map[string]string{}
	for _, h := range gotHeaders {
		k, v, _ := strings.Cut(h, ":")
		have[strings.ToLower(k)] = strings.TrimSpace(v)
	}
	for _, h := range wantHeaders {
		k, v, _ := strings.Cut(h, ":")
		if g, ok := have[strings.ToLower(k)]; !ok || g != strings.TrimSpace(v) {
			t.Errorf("%s: got header %s %q (present %v), want %q", where, k, g, ok, strings.TrimSpace(v))
		}
	}
	if diff := jsonDiff(t, []byte(gotBody), []byte(wantBody)); diff != "" {
		t.Errorf("%s: body:\n%s", where, diff)
	}
}
