package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func runCmd(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestVersion(t *testing.T) {
	code, out, _ := runCmd("version")
	if code != 0 || !strings.HasPrefix(out, "sluice ") {
		t.Fatalf("got %d %q, want 0 and a version line", code, out)
	}
}

func TestUnknownCommand(t *testing.T) {
	if code, _, errOut := runCmd("frobnicate"); code != 2 || !strings.Contains(errOut, `unknown command "frobnicate"`) {
		t.Fatalf("got %d %q, want 2 naming the command", code, errOut)
	}
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n  - key: \"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badLimits := filepath.Join(dir, "limits.yaml")
	if err := os.WriteFile(badLimits, []byte("NewOrdersPerAccount:\n  burst: 0\n  count: 1\n  period: 1s\nBogus:\n  burst: 1\n  count: 1\n  period: 1s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	multi := filepath.Join(dir, "multi")
	if err := os.MkdirAll(multi, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(multi, "api.yaml"), []byte("domain: api\ndescriptors:\n  - key: k\n    rate_limits:\n      - {unit: second, requests_per_unit: 2}\n      - {unit: day, requests_per_unit: 10000}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	both := filepath.Join(dir, "both.yaml")
	if err := os.WriteFile(both, []byte("domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 2}\n    rate_limits:\n      - {unit: day, requests_per_unit: 10000}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  []string
	}{
		{name: "the example configs are valid", args: []string{"--config", "../../examples/config"}, wantCode: 0},
		{name: "several limits on a descriptor are valid", args: []string{"--config", multi}, wantCode: 0},
		{name: "rate_limit and rate_limits together are an error", args: []string{"--config", both}, wantCode: 1,
			wantErr: []string{`both.yaml:5: descriptor "k" has both rate_limit and rate_limits, give it one or the other`}},
		{name: "a bad descriptor file lists every error with file:line", args: []string{"--config", bad}, wantCode: 1,
			wantErr: []string{"bad.yaml:4:", "fortnight", "bad.yaml:5:"}},
		{name: "bad limits list every error with file:line", args: []string{"--limits", badLimits}, wantCode: 1,
			wantErr: []string{"limits.yaml:2: invalid burst 0 for NewOrdersPerAccount, must be > 0", "limits.yaml:5:", `"Bogus"`}},
		{name: "a missing file is an error", args: []string{"--config", filepath.Join(dir, "nope")}, wantCode: 1, wantErr: []string{"nope"}},
		{name: "nothing to check is a usage error", args: nil, wantCode: 2, wantErr: []string{"nothing to check"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := runCmd(append([]string{"check"}, tt.args...)...)
			if code != tt.wantCode {
				t.Fatalf("got exit %d (%s), want %d", code, errOut, tt.wantCode)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q lacks %q", errOut, w)
				}
			}
		})
	}
}

// TestServeExitsCleanlyOnSIGTERM runs the real binary: it serves the
// example config, reloads on SIGHUP, and exits 0 on SIGTERM.
func TestServeExitsCleanlyOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildSluice(t)
	cmd := exec.Command(bin, "serve", "--config", "../../examples/config")
	cmd.Env = append(os.Environ(), "SLUICE_GRPC_ADDR=127.0.0.1:0", "SLUICE_HTTP_ADDR=127.0.0.1:0", "SLUICE_DEBUG_ADDR=127.0.0.1:0")
	lines := startProcess(t, cmd)
	httpRe := regexp.MustCompile(`http=(\S+)`)
	l := waitForLine(t, lines, 20*time.Second, `a "sluice serving" line with its addresses`, func(l string) bool {
		return httpRe.MatchString(l) && strings.Contains(l, "sluice serving")
	})
	httpAddr := httpRe.FindStringSubmatch(l)[1]
	resp, err := http.Get("http://" + httpAddr + "/healthcheck")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthcheck: got %v, %v", resp, err)
	}
	resp.Body.Close()

	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitForLine(t, lines, 10*time.Second, "a reload after SIGHUP", func(l string) bool {
		return strings.Contains(l, "descriptor config loaded")
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	discard(lines)
	exited, err := waitExit(cmd, 15*time.Second)
	if !exited {
		t.Fatal("serve did not exit after SIGTERM")
	}
	if err != nil {
		t.Fatalf("serve exited with %v, want exit code 0", err)
	}
}

func TestBenchWithNoServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	for _, client := range []string{"h2", "grpc"} {
		code, out, errOut := runCmd("bench", "--addr", addr, "--client", client, "--duration", "200ms", "--warmup", "0s", "--concurrency", "2")
		if code != 1 || out != "" || !strings.Contains(errOut, addr) {
			t.Errorf("--client %s: got %d, stdout %q, stderr %q; want 1, no result line, an error naming %s", client, code, out, errOut, addr)
		}
	}
}

func TestProxyRefusesRedisServerClock(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
	}{
		{name: "given as flags", args: []string{"--store", "redis", "--redis-clock", "server"}},
		{name: "given as environment variables", env: map[string]string{"SLUICE_STORE": "redis", "SLUICE_REDIS_CLOCK": "server"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			// Port 1 has no Redis: were the options accepted, connecting
			// would fail with exit 1, not this usage error.
			args := append([]string{"proxy", "--upstream", "http://127.0.0.1:9000", "--redis-addr", "127.0.0.1:1", "--listen", "127.0.0.1:0", "--debug-addr", "off"}, tt.args...)
			code, _, errOut := runCmd(args...)
			if code != 2 || !strings.Contains(errOut, "--redis-clock server (SLUICE_REDIS_CLOCK) cannot be used with sluice proxy") {
				t.Fatalf("got %d %q, want 2 and an error refusing --redis-clock server", code, errOut)
			}
		})
	}
}

// A request the upstream never answers holds the proxy's shutdown for
// --shutdown-timeout, not for the 10s default.
func TestProxyShutdownTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
	}))
	defer upstream.Close()
	defer close(release) // before upstream.Close, which waits for the handler

	bin := buildSluice(t)
	cmd := exec.Command(bin, "proxy", "--upstream", upstream.URL, "--listen", "127.0.0.1:0", "--debug-addr", "off")
	cmd.Env = append(os.Environ(), "SLUICE_SHUTDOWN_TIMEOUT=300ms")
	lines := startProcess(t, cmd)
	listenRe := regexp.MustCompile(`listen=(\S+)`)
	l := waitForLine(t, lines, 20*time.Second, `a "sluice proxy serving" line with its address`, func(l string) bool {
		return listenRe.MatchString(l) && strings.Contains(l, "sluice proxy serving")
	})
	addr := listenRe.FindStringSubmatch(l)[1]
	go func() {
		if resp, err := http.Get("http://" + addr + "/slow"); err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the request did not reach the upstream")
	}
	discard(lines)
	sent := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Exit 1: the request did not finish in time.
	if exited, _ := waitExit(cmd, 8*time.Second); !exited {
		t.Fatal("proxy did not exit within 8s of SIGTERM with SLUICE_SHUTDOWN_TIMEOUT=300ms")
	}
	if took := time.Since(sent); took > 5*time.Second {
		t.Fatalf("proxy exited %s after SIGTERM, want about 300ms", took)
	}
}

// envoyCompatData finds envoyproxy/ratelimit's configuration files,
// shared/compat-data/envoy in a directory above the repository (see
// compatData).
func envoyCompatData(t *testing.T) string {
	t.Helper()
	return compatData(t, "envoy")
}

// compatData finds shared/compat-data/<which> in a directory above the
// repository. It skips the test when it is missing, or fails it when
// SLUICE_REQUIRE_REDIS=1 asks for every integration test to run.
func compatData(t *testing.T, which string) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		p := filepath.Join(dir, "shared", "compat-data", which)
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	msg := "shared/compat-data/" + which + " not found above the repository"
	if os.Getenv("SLUICE_REQUIRE_REDIS") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// upstreamAcceptsFile says, for every configuration file envoyproxy/ratelimit
// ships (paths relative to shared/compat-data/envoy), whether upstream's own
// loader accepts it on its own. The table was produced by running
// upstream's config_check_cmd (built from envoyproxy/ratelimit at f2fb157,
// outside this repository) on a directory holding only that file:
// accepted means exit status 0.
var upstreamAcceptsFile = map[string]bool{
	"README/snippet-03-line-0377.yaml":                                                                   true,
	"README/snippet-04-line-0402.yaml":                                                                   true,
	"README/snippet-05-line-0452.yaml":                                                                   true,
	"README/snippet-06-line-0493.yaml":                                                                   true,
	"README/snippet-07-line-0505.yaml":                                                                   true,
	"README/snippet-08-line-0521.yaml":                                                                   true,
	"README/snippet-09-line-0553.yaml":                                                                   true,
	"README/snippet-10-line-0584.yaml":                                                                   true,
	"README/snippet-11-line-0620.yaml":                                                                   true,
	"README/snippet-12-line-0651.yaml":                                                                   true,
	"README/snippet-13-line-0665.yaml":                                                                   true,
	"README/snippet-14-line-0679.yaml":                                                                   true,
	"README/snippet-15-line-0695.yaml":                                                                   true,
	"README/snippet-16-line-0722.yaml":                                                                   true,
	"README/snippet-17-line-0747.yaml":                                                                   true,
	"README/snippet-18-line-0776.yaml":                                                                   true,
	"examples/ratelimit/config/config.yaml":                                                              true,
	"examples/ratelimit/config/example.yaml":                                                             true,
	"history/2017-01-30-d129b8b43/test/config/basic_config.yaml":                                         true,
	"history/2017-01-30-d129b8b43/test/config/duplicate_key.yaml":                                        false,
	"history/2017-01-30-d129b8b43/test/config/misspelled_key.yaml":                                       false,
	"history/2017-01-30-d129b8b43/test/config/misspelled_key2.yaml":                                      false,
	"history/2017-01-30-d129b8b43/test/config/non_map_list.yaml":                                         false,
	"history/2017-01-30-d129b8b43/test/config/non_string_key.yaml":                                       false,
	"history/2017-01-30-d129b8b43/test/integration/runtime/current/ratelimit/config/another.yaml":        true,
	"history/2017-01-30-d129b8b43/test/integration/runtime/current/ratelimit/config/basic.yaml":          true,
	"history/2017-02-06-3c924193b/test/config/basic_config.yaml":                                         true,
	"history/2017-12-18-347aea661/test/config/basic_config.yaml":                                         true,
	"history/2018-06-11-2e0387bd0/test/integration/runtime/current/ratelimit/config/another_legacy.yaml": true,
	"history/2018-06-11-2e0387bd0/test/integration/runtime/current/ratelimit/config/basic_legacy.yaml":   true,
	"history/2018-11-14-1da36ecc8/test/integration/runtime/current/ratelimit/config/basic_headers.yaml":  true,
	"history/2019-12-20-87ed58e3a/test/integration/runtime/current/ratelimit/config/another.yaml":        true,
	"history/2019-12-20-87ed58e3a/test/integration/runtime/current/ratelimit/config/another_legacy.yaml": true,
	"history/2019-12-20-87ed58e3a/test/integration/runtime/current/ratelimit/config/basic.yaml":          true,
	"history/2019-12-20-87ed58e3a/test/integration/runtime/current/ratelimit/config/basic_legacy.yaml":   true,
	"history/2020-01-17-403b5b5c5/test/integration/runtime/current/ratelimit/config/another_legacy.yaml": true,
	"history/2020-05-26-85cbfd621/test/integration/runtime/current/ratelimit/config/basic.yaml":          true,
	"history/2020-09-04-9b421960f/examples/ratelimit/config/example.yaml":                                true,
	"history/2021-07-07-edab0ecf6/examples/ratelimit/config/example.yaml":                                true,
	"history/2021-07-07-edab0ecf6/test/config/basic_config.yaml":                                         true,
	"history/2021-10-05-1c1d46ec4/examples/ratelimit/config/example.yaml":                                true,
	"history/2022-07-13-1f4ea68e5/examples/ratelimit/config/example.yaml":                                true,
	"history/2023-01-17-f28024e33/examples/ratelimit/config/example.yaml":                                true,
	"history/2023-01-17-f28024e33/test/config/basic_config.yaml":                                         true,
	"history/2023-03-27-008b66acb/test/config/wildcard.yaml":                                             true,
	"history/2023-05-12-b3562caaa/test/config/wildcard.yaml":                                             true,
	"history/2025-12-04-afec97a76/test/config/share_threshold.yaml":                                      true,
	"history/2026-03-16-b1603d112/examples/ratelimit/config/example.yaml":                                true,
	"test/config/bad_limit_unit.yaml":                                                                    false,
	"test/config/bad_yaml.yaml":                                                                          false,
	"test/config/basic_config.yaml":                                                                      true,
	"test/config/duplicate_domain.yaml":                                                                  true,
	"test/config/duplicate_key.yaml":                                                                     false,
	"test/config/empty_domain.yaml":                                                                      false,
	"test/config/empty_key.yaml":                                                                         false,
	"test/config/merge_domain_key1.yaml":                                                                 true,
	"test/config/merge_domain_key2.yaml":                                                                 true,
	"test/config/metadata.yaml":                                                                          true,
	"test/config/misspelled_key.yaml":                                                                    false,
	"test/config/misspelled_key2.yaml":                                                                   false,
	"test/config/non_map_list.yaml":                                                                      false,
	"test/config/non_string_key.yaml":                                                                    false,
	"test/config/replaces_empty.yaml":                                                                    false,
	"test/config/replaces_self.yaml":                                                                     false,
	"test/config/shadowmode_config.yaml":                                                                 true,
	"test/config/share_threshold.yaml":                                                                   true,
	"test/config/unlimited_with_unit.yaml":                                                               false,
	"test/config/wildcard.yaml":                                                                          true,
	"test/integration/runtime/current/ratelimit/config/another.yaml":                                     true,
	"test/integration/runtime/current/ratelimit/config/basic.yaml":                                       true,
	"test/integration/runtime/current/ratelimit/config/share_threshold.yaml":                             true,
	"test/integration/runtime/current/ratelimit/reload.yaml":                                             true,
}

// upstreamAcceptsSet says whether upstream's loader accepts files loaded
// together, with and without MERGE_DOMAIN_CONFIG. Produced like
// upstreamAcceptsFile, with config_check_cmd -config_dir on the directory
// (or on a directory of links to the files) and -merge_domain_configs.
var upstreamAcceptsSet = []struct {
	paths    []string // one directory, or files linked into one directory
	merge    bool
	accepted bool
}{
	{paths: []string{"test/config/basic_config.yaml", "test/config/duplicate_domain.yaml"}, merge: false, accepted: false},
	{paths: []string{"test/config/basic_config.yaml", "test/config/duplicate_domain.yaml"}, merge: true, accepted: true},
	{paths: []string{"test/config/merge_domain_key1.yaml", "test/config/merge_domain_key2.yaml"}, merge: false, accepted: false},
	{paths: []string{"test/config/merge_domain_key1.yaml", "test/config/merge_domain_key2.yaml"}, merge: true, accepted: true},
	{paths: []string{"README"}, merge: false, accepted: false}, // example4 declared twice
	{paths: []string{"README"}, merge: true, accepted: false},  // example4's key_value declared twice
	{paths: []string{"test/config"}, merge: false, accepted: false},
	{paths: []string{"test/config"}, merge: true, accepted: false},
	{paths: []string{"test/integration/runtime/current/ratelimit/config"}, merge: false, accepted: true},
	{paths: []string{"test/integration/runtime/current/ratelimit/config"}, merge: true, accepted: true},
	{paths: []string{"examples/ratelimit/config"}, merge: false, accepted: true},
	{paths: []string{"examples/ratelimit/config"}, merge: true, accepted: true},
	{paths: []string{"history/2017-01-30-d129b8b43/test/integration/runtime/current/ratelimit/config"}, merge: false, accepted: true},
	{paths: []string{"history/2018-06-11-2e0387bd0/test/integration/runtime/current/ratelimit/config"}, merge: false, accepted: true},
	{paths: []string{"history/2019-12-20-87ed58e3a/test/integration/runtime/current/ratelimit/config"}, merge: false, accepted: true},
}

func TestCheckAgreesWithUpstreamOnEveryShippedFile(t *testing.T) {
	root := envoyCompatData(t)
	var seen int
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		seen++
		want, ok := upstreamAcceptsFile[rel]
		if !ok {
			t.Errorf("%s: not in upstreamAcceptsFile; run upstream's config_check_cmd on it and add it", rel)
			return nil
		}
		t.Run(rel, func(t *testing.T) {
			code, _, errOut := runCmd("check", "--config", path)
			if got := code == 0; got != want {
				t.Errorf("sluice check accepted = %t (exit %d: %s), want %t as upstream", got, code, strings.TrimSpace(errOut), want)
			}
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen != len(upstreamAcceptsFile) {
		t.Errorf("walked %d files, want the %d upstreamAcceptsFile lists", seen, len(upstreamAcceptsFile))
	}
}

func TestCheckAgreesWithUpstreamOnFilesLoadedTogether(t *testing.T) {
	root := envoyCompatData(t)
	for _, tt := range upstreamAcceptsSet {
		name := strings.Join(tt.paths, " + ")
		if tt.merge {
			name += " merged"
		}
		t.Run(name, func(t *testing.T) {
			config := filepath.Join(root, tt.paths[0])
			if len(tt.paths) > 1 {
				config = t.TempDir()
				for _, p := range tt.paths {
					if err := os.Symlink(filepath.Join(root, p), filepath.Join(config, filepath.Base(p))); err != nil {
						t.Fatal(err)
					}
				}
			}
			args := []string{"check", "--config", config}
			if tt.merge {
				args = append(args, "--merge-domain-config")
			}
			code, _, errOut := runCmd(args...)
			if got := code == 0; got != tt.accepted {
				t.Errorf("sluice check accepted = %t (exit %d: %s), want %t as upstream", got, code, strings.TrimSpace(errOut), tt.accepted)
			}
		})
	}
}

// An environment written for envoyproxy/ratelimit runs the binary with no
// flags: its ports, its JSON log fields, and on SIGTERM failing health
// checks while calls are still served (SLUICE_SHUTDOWN_DRAIN_DELAY).
func TestServeFromAnEnvoyEnvironmentDrainsOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildSluice(t)
	port := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	}
	// The ports are free when chosen, but a test running beside this one
	// may take one before the process binds it: then it exits at once,
	// and the test tries other ports (up to three times).
	var (
		httpPort string
		cmd      *exec.Cmd
		lines    <-chan string
		l        string
	)
	for attempt := 1; ; attempt++ {
		httpPort = port()
		cmd = exec.Command(bin, "serve")
		cmd.Env = []string{
			"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
			"HOST=127.0.0.1", "PORT=" + httpPort, "GRPC_HOST=127.0.0.1", "GRPC_PORT=" + port(), "DEBUG_PORT=" + port(),
			"LOG_LEVEL=info", "LOG_FORMAT=json", "USE_STATSD=false",
			"SLUICE_CONFIG=../../examples/config", "SLUICE_SHUTDOWN_DRAIN_DELAY=3s",
		}
		lines = startProcess(t, cmd)
		var seen []string
		var err error
		l, seen, err = readUntil(lines, 20*time.Second, func(l string) bool {
			return strings.Contains(l, `"@message":"sluice serving"`)
		})
		if err == nil {
			break
		}
		if attempt < 3 && strings.Contains(strings.Join(seen, "\n"), "address already in use") {
			t.Logf("attempt %d: a port was taken before the process bound it; again", attempt)
			continue
		}
		t.Fatalf("%v before a JSON \"sluice serving\" line; the last lines:\n%s", err, strings.Join(seen, "\n"))
	}
	if !strings.Contains(l, `"@timestamp":`) || !strings.Contains(l, `"level":"info"`) {
		t.Errorf("got %s, want envoyproxy/ratelimit's JSON fields", l)
	}
	discard(lines)
	health := func() int {
		resp, err := http.Get("http://127.0.0.1:" + httpPort + "/healthcheck")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := health(); code != http.StatusOK {
		t.Fatalf("healthcheck: got %d, want 200", code)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	sawDrain := false
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end) && !sawDrain; time.Sleep(20 * time.Millisecond) {
		sawDrain = health() == http.StatusServiceUnavailable
	}
	if !sawDrain {
		t.Fatal("healthcheck after SIGTERM: never 503 while draining")
	}
	exited, err := waitExit(cmd, 15*time.Second)
	if !exited {
		t.Fatal("serve did not exit after the drain")
	}
	if err != nil {
		t.Fatalf("serve exited with %v, want exit code 0", err)
	}
}

func TestHelpNamesTheEnvironmentAndTheDocs(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"serve", "--help"}} {
		code, out, errOut := runCmd(args...)
		text := out + errOut
		if code != 0 || !strings.Contains(text, "SLUICE_GRPC_ADDR") || !strings.Contains(text, "docs/configuration.md") || !strings.Contains(text, "REDIS_URL") {
			t.Errorf("%v: got exit %d and %q, want 0 and the environment variables and docs named", args, code, text)
		}
	}
}

// buildSluice builds this command into a temporary directory and returns
// the binary's path.
func buildSluice(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sluice")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startProcess starts cmd and returns its standard error line by line; the
// channel closes when the process closes it. The process is killed when the
// test ends.
func startProcess(t *testing.T, cmd *exec.Cmd) <-chan string {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return lines
}

// waitForLine reads lines until match accepts one and returns it. It fails
// the test when the process exits first or timeout passes; want names the
// line in the failure.
func waitForLine(t *testing.T, lines <-chan string, timeout time.Duration, want string, match func(string) bool) string {
	t.Helper()
	l, seen, err := readUntil(lines, timeout, match)
	if err != nil {
		t.Fatalf("%v before %s; the last lines:\n%s", err, want, strings.Join(seen, "\n"))
	}
	return l
}

// readUntil reads lines until match accepts one and returns it, or
// returns an error when the process exits first or timeout passes, with
// the last lines read either way.
func readUntil(lines <-chan string, timeout time.Duration, match func(string) bool) (string, []string, error) {
	deadline := time.After(timeout)
	var seen []string
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return "", seen, errors.New("the process exited")
			}
			if match(l) {
				return l, seen, nil
			}
			if seen = append(seen, l); len(seen) > 20 {
				seen = seen[1:]
			}
		case <-deadline:
			return "", seen, fmt.Errorf("nothing matched within %s", timeout)
		}
	}
}

// discard reads and drops the rest of lines, so that the process never
// blocks writing to its standard error.
func discard(lines <-chan string) {
	go func() {
		for range lines {
		}
	}()
}

// waitExit waits up to timeout for cmd to exit: exited says whether it did,
// err is cmd.Wait's answer.
func waitExit(cmd *exec.Cmd, timeout time.Duration) (exited bool, err error) {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return true, err
	case <-time.After(timeout):
		return false, nil
	}
}
