package deploy_test

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/app"
	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/store/redis/redistest"
)

// httpGet returns the status and body of GET url; status 0 when the
// request fails.
func httpGet(url string) (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestKubernetesTermination runs the sluice binary with the Deployment's
// environment and stops it as the kubelet does, with SIGTERM: the health
// check must fail at once while calls are still answered through the
// drain delay, and the process must exit before the grace period ends.
func TestKubernetesTermination(t *testing.T) {
	objs := loadManifests(t, kubeDir)
	dep := find(t, objs, filepath.Join(kubeDir, "deployment.yaml"), "Deployment", "sluice")
	cm := find(t, objs, filepath.Join(kubeDir, "configmap.yaml"), "ConfigMap", "sluice-config")
	pod := at(dep.v, "spec", "template", "spec")
	c := byName(list(pod, "containers"), "sluice")
	root := t.TempDir()
	httpAddr := freeAddr(t)
	env := imageEnv(t)
	for k, v := range containerEnv(t, c) {
		env[k] = v
	}
	env["RUNTIME_ROOT"] = root
	env["SLUICE_HTTP_ADDR"], env["SLUICE_GRPC_ADDR"], env["SLUICE_DEBUG_ADDR"] = httpAddr, freeAddr(t), freeAddr(t)
	o := sluiceOptions(t, c, env)
	writeConfigMap(t, cm, filepath.Join(root, o.RuntimeSubdirectory, o.RuntimeAppDirectory))
	grace := time.Duration(num(pod, "terminationGracePeriodSeconds")) * time.Second

	var args []string
	for _, a := range list(c, "args") {
		args = append(args, fmt.Sprint(a))
	}
	cmd := exec.Command(sluiceBinary(t), args...)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("sluice's output:\n%s", logs.String())
		}
	})
	health := "http://" + httpAddr + str(c, "readinessProbe", "httpGet", "path")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if code, _ := httpGet(health); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: not OK 20s after start", health)
		}
	}

	stop := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for deadline := stop.Add(o.ShutdownDrainDelay / 2); ; time.Sleep(20 * time.Millisecond) {
		if code, _ := httpGet(health); code == http.StatusServiceUnavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: not 503 within %v of SIGTERM", health, o.ShutdownDrainDelay/2)
		}
	}
	// Still serving calls while draining.
	req := `{"domain": "mongo_cps", "descriptors": [{"entries": [{"key": "database", "value": "users"}]}]}`
	resp, err := http.Post("http://"+httpAddr+"/json", "application/json", strings.NewReader(req))
	if err != nil {
		t.Fatalf("a call while draining: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a call while draining: got %d, want 200", resp.StatusCode)
	}
	select {
	case err := <-exited:
		took := time.Since(stop)
		exited <- err // for the cleanup
		if err != nil {
			t.Errorf("sluice exited with %v after SIGTERM, want 0", err)
		}
		if took < o.ShutdownDrainDelay {
			t.Errorf("sluice exited %v after SIGTERM, want no sooner than the drain delay %v", took, o.ShutdownDrainDelay)
		}
	case <-time.After(grace):
		t.Fatalf("sluice still running %v after SIGTERM, the grace period: the kubelet would kill it", grace)
	}
}

// TestKubernetesRedisSharesCounts runs two replicas of Sluice with the
// Redis component's environment (REDIS_URL moved to a redis-server the
// test starts) and checks that they share one limit: what one replica
// counts, the other sees. With the memory store each would allow the
// limit on its own.
func TestKubernetesRedisSharesCounts(t *testing.T) {
	srv := redistest.StartSingle(t)
	objs := loadManifests(t, kubeDir)
	base := find(t, objs, filepath.Join(kubeDir, "deployment.yaml"), "Deployment", "sluice")
	patch := find(t, objs, filepath.Join(kubeDir, "redis", "sluice-redis.yaml"), "Deployment", "sluice")
	cm := find(t, objs, filepath.Join(kubeDir, "configmap.yaml"), "ConfigMap", "sluice-config")
	c := byName(list(base.v, "spec", "template", "spec", "containers"), "sluice")
	env := containerEnv(t, byName(list(patch.v, "spec", "template", "spec", "containers"), "sluice"))
	root := t.TempDir()
	env["RUNTIME_ROOT"], env["REDIS_URL"] = root, srv.Addr
	o := sluiceOptions(t, c, env)
	if o.Store != "redis" {
		t.Fatalf("got store %q, want redis", o.Store)
	}
	writeConfigMap(t, cm, filepath.Join(root, o.RuntimeSubdirectory, o.RuntimeAppDirectory))
	o.GRPCAddr, o.HTTPAddr, o.DebugAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	// One fixed time for both, so that the minute window cannot roll over.
	clk := clock.NewFake(time.Date(2026, 11, 23, 12, 0, 10, 0, time.UTC))
	var replicas []*app.App
	for range 2 {
		a, err := app.New(o, app.Deps{Clock: clk, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = a.Shutdown(t.Context()) })
		replicas = append(replicas, a)
	}
	// edge_proxy allows 10 logins a minute per address; 6 calls to each
	// replica make 12.
	req := `{"domain": "edge_proxy", "descriptors": [{"entries": [{"key": "remote_address", "value": "203.0.113.9"}, {"key": "path", "value": "/login"}]}]}`
	var allowed, over int
	for i := range 12 {
		a := replicas[i%2]
		resp, err := http.Post("http://"+a.HTTPAddr()+"/json", "application/json", strings.NewReader(req))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK:
			allowed++
		case resp.StatusCode == http.StatusTooManyRequests && strings.Contains(string(body), "OVER_LIMIT"):
			over++
		default:
			t.Fatalf("call %d: got %d %s", i, resp.StatusCode, body)
		}
	}
	if allowed != 10 || over != 2 {
		t.Errorf("got %d allowed and %d over the limit across the replicas, want 10 and 2", allowed, over)
	}
}
