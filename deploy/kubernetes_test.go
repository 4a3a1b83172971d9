package deploy_test

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/app"
	"github.com/sluice-rl/sluice/internal/yamlconf"
)

const kubeDir = "kubernetes"

// object is one Kubernetes object of a manifest file.
type object struct {
	file string
	doc  int // 1-based document number in file
	v    map[string]any
}

func (o object) kind() string { return str(o.v, "kind") }
func (o object) name() string { return str(o.v, "metadata", "name") }
func (o object) String() string {
	return fmt.Sprintf("%s (document %d): %s %s", o.file, o.doc, o.kind(), o.name())
}

// at walks v by map keys (string) and list indexes (int); nil when a
// step is missing.
func at(v any, path ...any) any {
	for _, p := range path {
		switch p := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[p]
		case int:
			l, ok := v.([]any)
			if !ok || p >= len(l) {
				return nil
			}
			v = l[p]
		}
	}
	return v
}

func str(v any, path ...any) string { s, _ := at(v, path...).(string); return s }
func num(v any, path ...any) int64  { n, _ := at(v, path...).(int64); return n }
func list(v any, path ...any) []any { l, _ := at(v, path...).([]any); return l }

// byName finds the item of a list of maps whose name is name.
func byName(l []any, name string) map[string]any {
	for _, item := range l {
		if m, ok := item.(map[string]any); ok && m["name"] == name {
			return m
		}
	}
	return nil
}

// loadManifests decodes every YAML file under dir, strictly (repeated keys
// are errors), and checks that each document is an object with an
// apiVersion, a kind and a name (kustomize files need no name).
func loadManifests(t *testing.T, dir string) []object {
	t.Helper()
	var objs []object
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		docs, err := yamlconf.Documents(path, data)
		if err != nil {
			return err
		}
		for i, doc := range docs {
			m, ok := doc.(map[string]any)
			o := object{file: path, doc: i + 1, v: m}
			switch {
			case !ok:
				t.Errorf("%s: got %T, want an object", o, doc)
			case str(m, "apiVersion") == "" || o.kind() == "":
				t.Errorf("%s: got no apiVersion or kind", o)
			case o.name() == "" && o.kind() != "Kustomization" && o.kind() != "Component":
				t.Errorf("%s: got no metadata.name", o)
			default:
				objs = append(objs, o)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// find returns the one object of kind and name in file (any file when
// file is ""); the test fails when there is not exactly one.
func find(t *testing.T, objs []object, file, kind, name string) object {
	t.Helper()
	var got []object
	for _, o := range objs {
		if o.kind() == kind && o.name() == name && (file == "" || o.file == file) {
			got = append(got, o)
		}
	}
	if len(got) != 1 {
		t.Fatalf("got %d %s objects named %q in %q, want 1", len(got), kind, name, file)
	}
	return got[0]
}

// containerEnv is a container's env list as a map; a value from a
// reference (valueFrom) fails the test, since the test cannot know it.
func containerEnv(t *testing.T, c map[string]any) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range list(c, "env") {
		name, value := str(e, "name"), at(e, "value")
		s, ok := value.(string)
		if !ok {
			t.Fatalf("container %s: env %s: got %v (%T), want a string (quote numbers and booleans)", str(c, "name"), name, value, value)
		}
		env[name] = s
	}
	return env
}

// sluiceOptions reads the options Sluice runs with in container c: the
// image's environment, then the container's, then its arguments after
// "serve", as the binary reads them.
func sluiceOptions(t *testing.T, c map[string]any, extraEnv map[string]string) app.Options {
	t.Helper()
	env := imageEnv(t)
	for k, v := range containerEnv(t, c) {
		env[k] = v
	}
	for k, v := range extraEnv {
		env[k] = v
	}
	var args []string
	for _, a := range list(c, "args") {
		args = append(args, fmt.Sprint(a))
	}
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("container %s: got args %q, want serve first", str(c, "name"), args)
	}
	o, err := app.ParseServe(args[1:], func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatalf("container %s: the environment %v does not start Sluice: %v", str(c, "name"), env, err)
	}
	if len(o.EnvoyEnvUnsupported) > 0 {
		t.Errorf("container %s: got variables Sluice ignores %q, want none", str(c, "name"), o.EnvoyEnvUnsupported)
	}
	return o
}

func portOf(t *testing.T, addr string) int64 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	n, err := strconv.ParseInt(p, 10, 64)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return n
}

func TestKubernetesManifests(t *testing.T) {
	objs := loadManifests(t, kubeDir)
	dep := find(t, objs, filepath.Join(kubeDir, "deployment.yaml"), "Deployment", "sluice")
	svc := find(t, objs, filepath.Join(kubeDir, "service.yaml"), "Service", "sluice")
	cm := find(t, objs, filepath.Join(kubeDir, "configmap.yaml"), "ConfigMap", "sluice-config")
	pod := at(dep.v, "spec", "template", "spec")
	c := byName(list(pod, "containers"), "sluice")
	if c == nil {
		t.Fatalf("%s: got no container named sluice", dep)
	}
	o := sluiceOptions(t, c, nil)
	ports := map[string]int64{}
	for _, p := range list(c, "ports") {
		ports[str(p, "name")] = num(p, "containerPort")
	}
	labels, _ := at(dep.v, "spec", "template", "metadata", "labels").(map[string]any)
	selector, _ := at(svc.v, "spec", "selector").(map[string]any)
	matchLabels, _ := at(dep.v, "spec", "selector", "matchLabels").(map[string]any)

	t.Run("the container ports are the ports Sluice listens on", func(t *testing.T) {
		for name, addr := range map[string]string{"http": o.HTTPAddr, "grpc": o.GRPCAddr, "debug": o.DebugAddr} {
			if got, want := ports[name], portOf(t, addr); got != want {
				t.Errorf("port %s: got containerPort %d, want %d (Sluice's %s)", name, got, want, addr)
			}
			if host, _, _ := net.SplitHostPort(addr); host != "" && host != "0.0.0.0" {
				t.Errorf("port %s: got Sluice listening on %s, want every interface", name, addr)
			}
		}
	})
	t.Run("the probes ask /healthcheck on the HTTP port", func(t *testing.T) {
		for _, probe := range []string{"startupProbe", "readinessProbe", "livenessProbe"} {
			get := at(c, probe, "httpGet")
			if got := str(get, "path"); got != "/healthcheck" {
				t.Errorf("%s: got path %q, want /healthcheck", probe, got)
			}
			port := at(get, "port")
			if port != "http" && port != ports["http"] {
				t.Errorf("%s: got port %v, want http", probe, port)
			}
		}
	})
	t.Run("the grace period outlasts the drain delay and the shutdown timeout", func(t *testing.T) {
		grace := time.Duration(num(pod, "terminationGracePeriodSeconds")) * time.Second
		if o.ShutdownDrainDelay <= 0 {
			t.Errorf("got drain delay %v, want one, so that endpoints drop the pod before it stops serving", o.ShutdownDrainDelay)
		}
		if sum := o.ShutdownDrainDelay + o.ShutdownTimeout; grace <= sum {
			t.Errorf("got terminationGracePeriodSeconds %v, want more than drain %v + timeout %v", grace, o.ShutdownDrainDelay, o.ShutdownTimeout)
		}
	})
	t.Run("the pod runs as the image's non-root user on a read-only root", func(t *testing.T) {
		if at(pod, "securityContext", "runAsNonRoot") != true {
			t.Errorf("got runAsNonRoot %v, want true", at(pod, "securityContext", "runAsNonRoot"))
		}
		if got, want := num(pod, "securityContext", "runAsUser"), int64(imageUser(t)); got != want {
			t.Errorf("got runAsUser %d, want the Dockerfile's USER %d", got, want)
		}
		for _, f := range []string{"readOnlyRootFilesystem", "allowPrivilegeEscalation"} {
			if got, want := at(c, "securityContext", f), f == "readOnlyRootFilesystem"; got != want {
				t.Errorf("container securityContext.%s: got %v, want %v", f, got, want)
			}
		}
	})
	t.Run("resources are requested and limited", func(t *testing.T) {
		for _, kind := range []string{"requests", "limits"} {
			for _, r := range []string{"cpu", "memory"} {
				if at(c, "resources", kind, r) == nil {
					t.Errorf("got no resources.%s.%s", kind, r)
				}
			}
		}
	})
	t.Run("the Service reaches every named port of the pod", func(t *testing.T) {
		for k, v := range selector {
			if labels[k] != v || matchLabels[k] != v {
				t.Errorf("selector %s=%v: got pod label %v and matchLabels %v, want it", k, v, labels[k], matchLabels[k])
			}
		}
		if len(selector) == 0 {
			t.Error("got an empty Service selector")
		}
		seen := map[string]bool{}
		for _, p := range list(svc.v, "spec", "ports") {
			name, target := str(p, "name"), at(p, "targetPort")
			if _, ok := ports[name]; !ok || (target != name && target != ports[name]) {
				t.Errorf("Service port %s: got targetPort %v, want the container port %s", name, target, name)
			}
			seen[name] = true
		}
		for name := range ports {
			if !seen[name] {
				t.Errorf("got no Service port for container port %s", name)
			}
		}
	})
	t.Run("the ConfigMap is mounted as the runtime config directory", func(t *testing.T) {
		dir := filepath.Join(o.RuntimeRoot, o.RuntimeSubdirectory, o.RuntimeAppDirectory)
		mount := byName(list(c, "volumeMounts"), "config")
		vol := byName(list(pod, "volumes"), "config")
		if got := str(mount, "mountPath"); got != dir {
			t.Errorf("got the config volume mounted at %q, want %q (RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY)", got, dir)
		}
		if got := str(vol, "configMap", "name"); got != cm.name() {
			t.Errorf("got the config volume from ConfigMap %q, want %q", got, cm.name())
		}
		if o.RuntimeWatchRoot {
			t.Error("got RUNTIME_WATCH_ROOT true, want false: a ConfigMap update swaps a link inside the mounted directory")
		}
	})
	t.Run("the ConfigMap's files pass sluice check", func(t *testing.T) {
		dir := writeConfigMap(t, cm, t.TempDir())
		out, err := exec.Command(sluiceBinary(t), "check", "--config", dir).CombinedOutput()
		if err != nil {
			t.Fatalf("sluice check: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), ": ok") {
			t.Errorf("sluice check: got %q, want ok", out)
		}
	})
	t.Run("the memory store runs one replica", func(t *testing.T) {
		if o.Store != "memory" || num(dep.v, "spec", "replicas") != 1 {
			t.Errorf("got store %q with %d replicas, want memory with 1 (each replica would count alone)", o.Store, num(dep.v, "spec", "replicas"))
		}
	})
	t.Run("the kustomizations list every manifest", func(t *testing.T) {
		for _, o := range objs {
			if o.kind() != "Kustomization" && o.kind() != "Component" {
				continue
			}
			dir := filepath.Dir(o.file)
			var listed []string
			for _, r := range list(o.v, "resources") {
				listed = append(listed, filepath.Join(dir, fmt.Sprint(r)))
			}
			for _, p := range list(o.v, "patches") {
				listed = append(listed, filepath.Join(dir, str(p, "path")))
			}
			for _, f := range listed {
				if _, err := os.Stat(f); err != nil {
					t.Errorf("%s: lists %s: %v", o.file, f, err)
				}
			}
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				f := filepath.Join(dir, e.Name())
				if strings.HasSuffix(f, ".yaml") && e.Name() != "kustomization.yaml" && !slices.Contains(listed, f) {
					t.Errorf("%s: does not list %s", o.file, f)
				}
			}
		}
	})
}

// TestKubernetesRedis checks the Redis component: Sluice switched to the
// Redis Service's address, over TCP, scaled out.
func TestKubernetesRedis(t *testing.T) {
	objs := loadManifests(t, kubeDir)
	redisDir := filepath.Join(kubeDir, "redis")
	base := find(t, objs, filepath.Join(kubeDir, "deployment.yaml"), "Deployment", "sluice")
	patch := find(t, objs, filepath.Join(redisDir, "sluice-redis.yaml"), "Deployment", "sluice")
	svc := find(t, objs, filepath.Join(redisDir, "redis.yaml"), "Service", "redis")
	find(t, objs, filepath.Join(redisDir, "redis.yaml"), "Deployment", "redis")

	baseC := byName(list(base.v, "spec", "template", "spec", "containers"), "sluice")
	patchC := byName(list(patch.v, "spec", "template", "spec", "containers"), "sluice")
	if patchC == nil {
		t.Fatalf("%s: got no container named sluice to patch", patch)
	}
	// A strategic merge patch merges env by name.
	o := sluiceOptions(t, baseC, containerEnv(t, patchC))
	want := fmt.Sprintf("%s:%d", svc.name(), num(byName(list(svc.v, "spec", "ports"), "redis"), "port"))
	if o.Store != "redis" || len(o.Redis.Addrs) != 1 || o.Redis.Addrs[0] != want || o.Redis.SocketType != "tcp" {
		t.Errorf("got store %q at %q over %q, want redis at %s over tcp", o.Store, o.Redis.Addrs, o.Redis.SocketType, want)
	}
	if n := num(patch.v, "spec", "replicas"); n < 2 {
		t.Errorf("got %d replicas with Redis, want the patch to scale out", n)
	}
}

// writeConfigMap writes the data of ConfigMap cm into dir the way the
// kubelet mounts it: the files in a timestamped directory, ..data linking
// to it and each file a link through ..data. It returns dir.
func writeConfigMap(t *testing.T, cm object, dir string) string {
	t.Helper()
	data, _ := at(cm.v, "data").(map[string]any)
	if len(data) == 0 {
		t.Fatalf("%s: got no data", cm)
	}
	version := "..2026_11_23_00_00_00." + strconv.FormatInt(time.Now().UnixNano(), 10)
	if err := os.MkdirAll(filepath.Join(dir, version), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range data {
		s, ok := content.(string)
		if !ok {
			t.Fatalf("%s: key %s: got %T, want text", cm, name, content)
		}
		if !strings.HasSuffix(name, ".yaml") && !strings.HasSuffix(name, ".yml") {
			t.Errorf("%s: key %s: want a .yaml name, or Sluice does not load it", cm, name)
		}
		if err := os.WriteFile(filepath.Join(dir, version, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	return dir
}

var (
	sluiceOnce sync.Once
	sluicePath string
	sluiceErr  error
)

// sluiceBinary builds the sluice command the way the README says to get
// it (`go install ./cmd/sluice`), into a temporary GOBIN, once per run.
func sluiceBinary(t *testing.T) string {
	t.Helper()
	sluiceOnce.Do(func() {
		cmdline := readmeInstallLine(t)
		dir, err := os.MkdirTemp("", "sluice-bin")
		if err != nil {
			sluiceErr = err
			return
		}
		f := strings.Fields(cmdline)
		cmd := exec.Command(f[0], f[1:]...)
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), "GOBIN="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			sluiceErr = fmt.Errorf("%s: %v\n%s", cmdline, err, out)
			return
		}
		sluicePath = filepath.Join(dir, "sluice")
	})
	if sluiceErr != nil {
		t.Fatal(sluiceErr)
	}
	return sluicePath
}

// readmeInstallLine finds the README's command that installs sluice.
func readmeInstallLine(t *testing.T) string {
	f, err := os.Open("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "go install ./cmd/sluice") {
			return line
		}
	}
	t.Fatal("README.md: got no `go install ./cmd/sluice` line, want the way to get the binary")
	return ""
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sluicePath != "" {
		os.RemoveAll(filepath.Dir(sluicePath))
	}
	os.Exit(code)
}

// TestKubernetesConfigMapReload runs Sluice with the Deployment's
// environment on the ConfigMap's files laid out as the kubelet mounts
// them (RUNTIME_ROOT moved to a temporary directory, ports on loopback):
// the probe's /healthcheck answers OK, the domains load, and a ConfigMap
// update — a new version directory and a swap of ..data — reloads them.
func TestKubernetesConfigMapReload(t *testing.T) {
	objs := loadManifests(t, kubeDir)
	dep := find(t, objs, filepath.Join(kubeDir, "deployment.yaml"), "Deployment", "sluice")
	cm := find(t, objs, filepath.Join(kubeDir, "configmap.yaml"), "ConfigMap", "sluice-config")
	c := byName(list(dep.v, "spec", "template", "spec", "containers"), "sluice")
	root := t.TempDir()
	o := sluiceOptions(t, c, map[string]string{"RUNTIME_ROOT": root})
	mount := filepath.Join(root, o.RuntimeSubdirectory, o.RuntimeAppDirectory)
	writeConfigMap(t, cm, mount)
	o.GRPCAddr, o.HTTPAddr, o.DebugAddr, o.LogLevel = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "error"
	a, err := app.New(o, app.Deps{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("Sluice with the Deployment's environment: %v", err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Shutdown(t.Context()) })
	get := httpGet
	probe := str(c, "readinessProbe", "httpGet", "path")
	if code, body := get("http://" + a.HTTPAddr() + probe); code != http.StatusOK {
		t.Errorf("GET %s: got %d %q, want 200", probe, code, body)
	}
	data, _ := at(cm.v, "data").(map[string]any)
	_, rules := get("http://" + a.DebugAddr() + "/rlconfig")
	for name, content := range data {
		domain := domainOf(fmt.Sprint(content))
		if !strings.Contains(rules, domain+".") {
			t.Errorf("/rlconfig: got %q, want the domain %s of %s", rules, domain, name)
		}
	}

	// A ConfigMap update: the kubelet writes a new version and swaps ..data.
	updated := map[string]any{"data": map[string]any{"updated.yaml": "domain: updated_by_configmap\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 7}\n"}}
	for k, v := range data {
		updated["data"].(map[string]any)[k] = v
	}
	writeConfigMap(t, object{file: cm.file, v: updated}, mount)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, rules = get("http://" + a.DebugAddr() + "/rlconfig")
		if strings.Contains(rules, "updated_by_configmap.") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/rlconfig 10s after the ConfigMap update: got %q, want the domain updated_by_configmap", rules)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// domainOf returns the domain a descriptor file declares.
func domainOf(content string) string {
	for line := range strings.Lines(content) {
		if d, ok := strings.CutPrefix(strings.TrimSpace(line), "domain:"); ok {
			return strings.TrimSpace(d)
		}
	}
	return ""
}

// TestReadmeBinary runs the README's commands for getting the binary:
// `go install ./cmd/sluice` (with GOBIN in a temporary directory) and
// `make build` (with BIN there too) must each give a sluice that runs.
func TestReadmeBinary(t *testing.T) {
	out, err := exec.Command(sluiceBinary(t), "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "sluice ") {
		t.Errorf("go install: sluice version: got %q, %v; want a version line", out, err)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "\nmake build\n") || !strings.Contains(string(readme), "`bin/sluice`") {
		t.Fatal("README.md: got no `make build` line saying it writes bin/sluice")
	}
	mk, err := exec.LookPath("make")
	if err != nil {
		t.Skip("make is not installed")
	}
	// The default BIN is bin, as the README says.
	cmd := exec.Command(mk, "-n", "build")
	cmd.Dir = ".."
	plan, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(plan), `CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o bin/sluice ./cmd/sluice`) {
		t.Errorf("make -n build: got %q, %v; want it to write bin/sluice as the Dockerfile builds it", plan, err)
	}
	bin := t.TempDir()
	cmd = exec.Command(mk, "build", "BIN="+bin)
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	out, err = exec.Command(filepath.Join(bin, "sluice"), "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "sluice ") {
		t.Errorf("make build: sluice version: got %q, %v; want a version line", out, err)
	}
}

// TestKustomizeBuilds renders both ways of applying the manifests with
// kubectl's kustomize, when kubectl is installed: the memory store as
// shipped, and with the Redis component turned on as docs/deploy.md says.
func TestKustomizeBuilds(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not installed")
	}
	// A copy of deploy/kubernetes with the component's lines uncommented.
	withRedis := filepath.Join(t.TempDir(), "kubernetes")
	if err := os.CopyFS(withRedis, os.DirFS(kubeDir)); err != nil {
		t.Fatal(err)
	}
	k := filepath.Join(withRedis, "kustomization.yaml")
	data, err := os.ReadFile(k)
	if err != nil {
		t.Fatal(err)
	}
	on := strings.NewReplacer("# components:\n", "components:\n", "#   - redis\n", "  - redis\n").Replace(string(data))
	if on == string(data) {
		t.Fatalf("%s: got no commented components: [redis] to turn on", k)
	}
	if err := os.WriteFile(k, []byte(on), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		dir   string
		kinds []string
		redis bool
	}{
		{name: "the memory store as shipped", dir: kubeDir, kinds: []string{"ConfigMap/sluice-config", "Deployment/sluice", "Service/sluice"}},
		{name: "with the Redis component", dir: withRedis, redis: true,
			kinds: []string{"ConfigMap/sluice-config", "Deployment/redis", "Deployment/sluice", "Service/redis", "Service/sluice"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := exec.Command(kubectl, "kustomize", tt.dir).Output()
			if err != nil {
				t.Fatalf("kubectl kustomize %s: %v", tt.dir, err)
			}
			docs, err := yamlconf.Documents("kustomize output", out)
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			var sluice map[string]any
			for _, d := range docs {
				kinds = append(kinds, str(d, "kind")+"/"+str(d, "metadata", "name"))
				if str(d, "kind") == "Deployment" && str(d, "metadata", "name") == "sluice" {
					sluice = d.(map[string]any)
				}
			}
			slices.Sort(kinds)
			if !slices.Equal(kinds, tt.kinds) {
				t.Fatalf("got %q, want %q", kinds, tt.kinds)
			}
			c := byName(list(sluice, "spec", "template", "spec", "containers"), "sluice")
			o := sluiceOptions(t, c, nil)
			if got := o.Store == "redis"; got != tt.redis {
				t.Errorf("got store %q, want redis %v", o.Store, tt.redis)
			}
			if tt.redis && (o.ShutdownDrainDelay == 0 || o.RuntimeRoot == "") {
				t.Errorf("got drain %v and runtime root %q after the patch, want the base's kept", o.ShutdownDrainDelay, o.RuntimeRoot)
			}
		})
	}
}

// TestDeployDocsEnvironment checks that docs/deploy.md's table of the
// Deployment's environment lists exactly the variables and values the
// manifest sets.
func TestDeployDocsEnvironment(t *testing.T) {
	objs := loadManifests(t, kubeDir)
	dep := find(t, objs, filepath.Join(kubeDir, "deployment.yaml"), "Deployment", "sluice")
	want := containerEnv(t, byName(list(dep.v, "spec", "template", "spec", "containers"), "sluice"))
	doc, err := os.ReadFile("../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n### The environment\n")
	if !ok {
		t.Fatal("docs/deploy.md: got no section ### The environment")
	}
	section, _, _ = strings.Cut(section, "\n#")
	got := map[string]string{}
	for line := range strings.Lines(section) {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		got[strings.Trim(strings.TrimSpace(cells[1]), "`")] = strings.Trim(strings.TrimSpace(cells[2]), "`")
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("docs/deploy.md: %s: got %q, want the manifest's %q", k, got[k], v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("docs/deploy.md: lists %s, which the manifest does not set", k)
		}
	}
}
