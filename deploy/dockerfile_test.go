package deploy_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, …
	args string
	line int
}

// stage is one FROM and the instructions after it.
type stage struct {
	from, name string
	ins        []instruction
}

// parseDockerfile reads the instructions of a Dockerfile: comments and
// blank lines dropped, lines ending in a backslash joined to the next.
func parseDockerfile(t *testing.T, path string) []stage {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var stages []stage
	var cur strings.Builder
	start, n := 0, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if cur.Len() == 0 {
			start = n
		}
		if body, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(line)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		cur.Reset()
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: start}
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			s := stage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 {
			t.Fatalf("%s:%d: %s before the first FROM", path, start, in.cmd)
		}
		stages[len(stages)-1].ins = append(stages[len(stages)-1].ins, in)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return stages
}

// find returns the instructions of s named cmd.
func (s stage) find(cmd string) []instruction {
	var out []instruction
	for _, in := range s.ins {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// imageUser is the numeric user id the Dockerfile's final stage runs as;
// the Kubernetes manifests' runAsUser must agree with it.
func imageUser(t *testing.T) int {
	t.Helper()
	stages := parseDockerfile(t, "../Dockerfile")
	users := stages[len(stages)-1].find("USER")
	if len(users) != 1 {
		t.Fatalf("Dockerfile: got %d USER instructions in the final stage, want 1", len(users))
	}
	uid, _, _ := strings.Cut(users[0].args, ":")
	n, err := strconv.Atoi(uid)
	if err != nil {
		t.Fatalf("Dockerfile:%d: USER %s: got a name, want a numeric user id (runAsNonRoot can only verify numbers)", users[0].line, users[0].args)
	}
	return n
}

// imageEnv is the environment the Dockerfile's final stage sets.
func imageEnv(t *testing.T) map[string]string {
	t.Helper()
	stages := parseDockerfile(t, "../Dockerfile")
	env := map[string]string{}
	for _, in := range stages[len(stages)-1].find("ENV") {
		for _, kv := range strings.Fields(in.args) {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				t.Fatalf("Dockerfile:%d: ENV %s: want KEY=value", in.line, in.args)
			}
			env[k] = v
		}
	}
	return env
}

func TestDockerfile(t *testing.T) {
	stages := parseDockerfile(t, "../Dockerfile")
	if len(stages) < 2 {
		t.Fatalf("got %d stages, want a builder stage and a final stage", len(stages))
	}
	build, final := stages[0], stages[len(stages)-1]
	goMod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(goMod)
	all := func(s stage) string {
		var b strings.Builder
		for _, in := range s.ins {
			b.WriteString(in.cmd + " " + in.args + "\n")
		}
		return b.String()
	}
	var exposed []string
	for _, in := range final.find("EXPOSE") {
		exposed = append(exposed, strings.Fields(in.args)...)
	}
	var healthchecks int
	for _, s := range stages {
		healthchecks += len(s.find("HEALTHCHECK"))
	}
	exec1 := func(cmd string) []string {
		ins := final.find(cmd)
		if len(ins) != 1 {
			return nil
		}
		var v []string
		if err := json.Unmarshal([]byte(ins[0].args), &v); err != nil {
			return []string{"not JSON: " + ins[0].args}
		}
		return v
	}

	tests := []struct {
		name string
		ok   bool
		got  any
	}{
		{name: "the builder is golang at go.mod's Go version",
			ok:  goVersion != nil && build.from == "golang:"+string(goVersion[1]) && build.name != "",
			got: build.from},
		{name: "the modules are downloaded in a layer of their own, before the code is copied",
			ok:  regexp.MustCompile(`(?s)COPY go\.mod go\.sum \S+\nRUN go mod download.*\nCOPY \. `).MatchString(all(build)),
			got: all(build)},
		{name: "the binary is static, trimmed and stripped",
			ok:  regexp.MustCompile(`RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/sluice \./cmd/sluice`).MatchString(all(build)),
			got: all(build)},
		{name: "the final stage is a minimal base",
			ok:  strings.HasPrefix(final.from, "gcr.io/distroless/static") || final.from == "scratch",
			got: final.from},
		{name: "the final stage copies only the binary from the builder",
			ok:  len(final.find("COPY")) == 1 && final.find("COPY")[0].args == "--from="+build.name+" /out/sluice /sluice",
			got: final.find("COPY")},
		{name: "there is no HEALTHCHECK (Kubernetes probes are used)",
			ok:  healthchecks == 0,
			got: healthchecks},
		{name: "the entry point is the binary",
			ok:  strings.Join(exec1("ENTRYPOINT"), " ") == "/sluice",
			got: exec1("ENTRYPOINT")},
		{name: "the command is serve",
			ok:  strings.Join(exec1("CMD"), " ") == "serve",
			got: exec1("CMD")},
		{name: "the HTTP, gRPC and debug ports are exposed",
			ok:  strings.Join(exposed, " ") == "8080 8081 6070",
			got: exposed},
		{name: "the debug port listens on every interface",
			ok:  imageEnv(t)["SLUICE_DEBUG_ADDR"] == ":6070",
			got: imageEnv(t)},
		{name: "the user is not root",
			ok:  imageUser(t) > 0,
			got: imageUser(t)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !tt.ok {
				t.Errorf("got %v", tt.got)
			}
		})
	}
}

// TestMakeImageWithoutAContainerTool runs `make image` where neither
// docker nor podman is on the PATH: it must fail and say why.
func TestMakeImageWithoutAContainerTool(t *testing.T) {
	mk, err := exec.LookPath("make")
	if err != nil {
		t.Skip("make is not installed")
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("sh is not installed")
	}
	bin := t.TempDir()
	if err := os.Symlink(sh, filepath.Join(bin, "sh")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(mk, "-s", "image")
	cmd.Dir = ".."
	cmd.Env = []string{"PATH=" + bin}
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("got success (%s), want a failure", out)
	}
	if want := "neither docker nor podman is installed"; !strings.Contains(string(out), want) {
		t.Errorf("got %q, want it to say %q", out, want)
	}
}
