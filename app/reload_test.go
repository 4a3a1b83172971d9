package app_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// limitOf asks for one descriptor and returns its requests_per_unit (0: no
// limit).
func limitOf(ta *testApp, domain, key, value string) (uint32, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := ta.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommon.RateLimitDescriptor{desc(key, value)}})
	if err != nil {
		return 0, err
	}
	return resp.Statuses[0].CurrentLimit.GetRequestsPerUnit(), nil
}

// eventually polls cond until it holds or 5s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func domainFile(domain string, rpu int) string {
	return "domain: " + domain + "\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: " + strconv.Itoa(rpu) + "}\n"
}

func TestReloadWhileServing(t *testing.T) {
	ta := start(t, map[string]string{"a.yaml": domainFile("a", 100)}, nil)

	// A client keeps calling through every change; no call may fail.
	var failures atomic.Int64
	var calls atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := limitOf(ta, "a", "k", "v"); err != nil {
					failures.Add(1)
				}
				calls.Add(1)
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
		if n := failures.Load(); n > 0 {
			t.Errorf("%d of %d calls failed during reloads, want none", n, calls.Load())
		}
	}()
	limit := func(domain string) func() bool {
		return func() bool { n, _ := limitOf(ta, domain, "k", "v"); return n == 0 }
	}
	has := func(domain string, want uint32) func() bool {
		return func() bool { n, _ := limitOf(ta, domain, "k", "v"); return n == want }
	}

	// Add a file.
	writeFile(t, filepath.Join(ta.dir, "b.yaml"), domainFile("b", 7))
	eventually(t, "the added domain b", has("b", 7))
	// Change a file.
	writeFile(t, filepath.Join(ta.dir, "a.yaml"), domainFile("a", 200))
	eventually(t, "the changed limit of a", has("a", 200))
	// Break a file: the running config stays, the gauge drops to 0.
	writeFile(t, filepath.Join(ta.dir, "a.yaml"), "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	eventually(t, "the failed reload to be reported", func() bool {
		_, body := ta.get(t, "http://"+ta.DebugAddr()+"/metrics")
		return strings.Contains(body, `sluice_config_last_reload_successful{kind="descriptors"} 0`)
	})
	if n, err := limitOf(ta, "a", "k", "v"); err != nil || n != 200 {
		t.Fatalf("after a broken file: got %d, %v; want the running limit 200", n, err)
	}
	// Fix it again.
	writeFile(t, filepath.Join(ta.dir, "a.yaml"), domainFile("a", 300))
	eventually(t, "the fixed file", has("a", 300))
	// Remove a file.
	if err := os.Remove(filepath.Join(ta.dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the removed domain b", limit("b"))
	if calls.Load() == 0 {
		t.Fatal("the client made no calls")
	}
}

func TestReloadFollowsConfigMapSymlinkSwap(t *testing.T) {
	// Kubernetes mounts a ConfigMap as <dir>/..data → ..<timestamp>/ with
	// each file a symlink <dir>/a.yaml → ..data/a.yaml; an update writes a
	// new timestamped directory and swaps ..data atomically.
	ta := start(t, nil, nil)
	dir := ta.dir
	mkVersion := func(name string, rpu int) {
		v := filepath.Join(dir, name)
		if err := os.Mkdir(v, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(v, "a.yaml"), []byte(domainFile("cm", rpu)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	swap := func(name string) {
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	mkVersion("..2026_11_21_00_00_00.1", 11)
	swap("..2026_11_21_00_00_00.1")
	if err := os.Symlink("..data/a.yaml", filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the first ConfigMap version", func() bool { n, _ := limitOf(ta, "cm", "k", "v"); return n == 11 })
	mkVersion("..2026_11_21_00_01_00.2", 22)
	swap("..2026_11_21_00_01_00.2")
	eventually(t, "the swapped ConfigMap version", func() bool { n, _ := limitOf(ta, "cm", "k", "v"); return n == 22 })
}
