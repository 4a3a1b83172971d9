package app_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/app"
	"github.com/sluice-rl/sluice/descriptors"
	"github.com/sluice-rl/sluice/store/redis/redistest"
)

// runtimeLayout is envoyproxy/ratelimit's goruntime layout on disk:
// base/current is a symlink to a version directory base/<version>, whose
// files live in <subdir>/<appdir>, as RUNTIME_ROOT=base/current,
// RUNTIME_SUBDIRECTORY=ratelimit, RUNTIME_APPDIRECTORY=config expect.
type runtimeLayout struct {
	t      *testing.T
	base   string
	subdir string
}

func newRuntimeLayout(t *testing.T) *runtimeLayout {
	t.Helper()
	return &runtimeLayout{t: t, base: t.TempDir(), subdir: "ratelimit"}
}

// root is the RUNTIME_ROOT symlink's path.
func (l *runtimeLayout) root() string { return filepath.Join(l.base, "current") }

// version writes a version directory with files (relative name below
// subdir/config → content).
func (l *runtimeLayout) version(name string, files map[string]string) {
	l.t.Helper()
	for rel, content := range files {
		p := filepath.Join(l.base, name, l.subdir, "config", rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			l.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			l.t.Fatal(err)
		}
	}
}

// swap points the root at version atomically, the way goruntime
// deployments do: `ln -s version tmp && mv -T tmp current`.
func (l *runtimeLayout) swap(version string) {
	l.t.Helper()
	tmp := filepath.Join(l.base, "current.tmp")
	if err := os.Symlink(version, tmp); err != nil {
		l.t.Fatal(err)
	}
	if err := os.Rename(tmp, l.root()); err != nil {
		l.t.Fatal(err)
	}
}

// options sets the --runtime-* options for the layout.
func (l *runtimeLayout) options(o *app.Options) {
	o.ConfigPath = ""
	o.RuntimeRoot = l.root()
	o.RuntimeSubdirectory = l.subdir
}

func TestRuntimeLayoutReloads(t *testing.T) {
	tests := []struct {
		name      string
		watchRoot bool
		change    func(l *runtimeLayout, ta *testApp)
		want      uint32 // the limit of domain rt after the change
	}{
		{name: "swapping the root symlink reloads when the root is watched", watchRoot: true,
			change: func(l *runtimeLayout, ta *testApp) {
				l.version("v2", map[string]string{"rt.yaml": domainFile("rt", 22)})
				l.swap("v2")
			}, want: 22},
		{name: "editing a file in place reloads when the root is not watched", watchRoot: false,
			change: func(l *runtimeLayout, ta *testApp) {
				writeFile(t, filepath.Join(l.base, "v1", l.subdir, "config", "rt.yaml"), domainFile("rt", 33))
			}, want: 33},
		{name: "editing a file in place also reloads when the root is watched", watchRoot: true,
			change: func(l *runtimeLayout, ta *testApp) {
				writeFile(t, filepath.Join(l.base, "v1", l.subdir, "config", "rt.yaml"), domainFile("rt", 44))
			}, want: 44},
		{name: "after a swap, editing the new version in place reloads", watchRoot: true,
			change: func(l *runtimeLayout, ta *testApp) {
				l.version("v2", map[string]string{"rt.yaml": domainFile("rt", 22)})
				l.swap("v2")
				eventually(t, "the swapped limit", func() bool { n, _ := limitOf(ta, "rt", "k", "v"); return n == 22 })
				writeFile(t, filepath.Join(l.base, "v2", l.subdir, "config", "rt.yaml"), domainFile("rt", 66))
			}, want: 66},
		{name: "a new file in a nested directory reloads", watchRoot: false,
			change: func(l *runtimeLayout, ta *testApp) {
				p := filepath.Join(l.base, "v1", l.subdir, "config", "team", "rt.yaml")
				if err := os.Remove(filepath.Join(l.base, "v1", l.subdir, "config", "rt.yaml")); err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				writeFile(t, p, domainFile("rt", 55))
			}, want: 55},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newRuntimeLayout(t)
			l.version("v1", map[string]string{"rt.yaml": domainFile("rt", 11)})
			l.swap("v1")
			ta := start(t, nil, func(o *app.Options) { l.options(o); o.RuntimeWatchRoot = tt.watchRoot })
			if n, err := limitOf(ta, "rt", "k", "v"); err != nil || n != 11 {
				t.Fatalf("before the change: got %d, %v; want 11", n, err)
			}
			tt.change(l, ta)
			eventually(t, "the new limit", func() bool { n, _ := limitOf(ta, "rt", "k", "v"); return n == tt.want })
		})
	}
}

func TestRuntimeRootSwapIsMissedWithoutWatchRoot(t *testing.T) {
	// goruntime with RUNTIME_WATCH_ROOT=false watches only the directory
	// below the root, so a swap of the root is seen at the next reload.
	l := newRuntimeLayout(t)
	l.version("v1", map[string]string{"rt.yaml": domainFile("rt", 11)})
	l.version("v2", map[string]string{"rt.yaml": domainFile("rt", 22)})
	l.swap("v1")
	ta := start(t, nil, func(o *app.Options) { l.options(o); o.RuntimeWatchRoot = false })
	l.swap("v2")
	time.Sleep(300 * time.Millisecond) // many reload delays
	if n, err := limitOf(ta, "rt", "k", "v"); err != nil || n != 11 {
		t.Fatalf("after an unwatched swap: got %d, %v; want the running limit 11", n, err)
	}
	if err := ta.Reload(); err != nil {
		t.Fatal(err)
	}
	if n, err := limitOf(ta, "rt", "k", "v"); err != nil || n != 22 {
		t.Fatalf("after a reload: got %d, %v; want 22", n, err)
	}
	// The reload moves the watch to the new version (in the watcher's
	// goroutine, soon after): editing it reloads. The edit is repeated, more
	// slowly than reloads coalesce, in case it came before the move.
	deadline := time.Now().Add(5 * time.Second)
	for n := uint32(0); n != 33; n, _ = limitOf(ta, "rt", "k", "v") {
		if time.Now().After(deadline) {
			t.Fatalf("after editing the new version: got %d, want 33", n)
		}
		writeFile(t, filepath.Join(l.base, "v2", l.subdir, "config", "rt.yaml"), domainFile("rt", 33))
		time.Sleep(200 * time.Millisecond)
	}
}

func TestRuntimeLayoutOptions(t *testing.T) {
	const (
		a1 = "domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: hour, requests_per_unit: 1}}\n"
		a2 = "domain: d\ndescriptors:\n  - {key: b, rate_limit: {unit: hour, requests_per_unit: 2}}\n"
	)
	tests := []struct {
		name    string
		files   map[string]string
		tweak   func(o *app.Options)
		wantA   uint32
		wantB   uint32
		wantErr bool
	}{
		{name: "a domain in two files is an error by default",
			files: map[string]string{"a1.yaml": a1, "a2.yaml": a2}, wantErr: true},
		{name: "a domain in two files merges with --merge-domain-config",
			files: map[string]string{"a1.yaml": a1, "a2.yaml": a2},
			tweak: func(o *app.Options) { o.MergeDomainConfig = true }, wantA: 1, wantB: 2},
		{name: "dotfiles load by default, as goruntime reads them",
			files: map[string]string{"a1.yaml": a1, ".a2.yaml": a2},
			tweak: func(o *app.Options) { o.MergeDomainConfig = true }, wantA: 1, wantB: 2},
		{name: "dotfiles are skipped with --runtime-ignore-dotfiles",
			files: map[string]string{"a1.yaml": a1, ".a2.yaml": a2},
			tweak: func(o *app.Options) { o.RuntimeIgnoreDotfiles = true }, wantA: 1},
		{name: "--runtime-appdirectory names the directory below the subdirectory",
			files: map[string]string{"a1.yaml": "domain: other\n", "../elsewhere/a2.yaml": a2},
			tweak: func(o *app.Options) { o.RuntimeAppDirectory = "elsewhere" }, wantB: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newRuntimeLayout(t)
			l.version("v1", tt.files)
			l.swap("v1")
			o := app.Defaults()
			l.options(&o)
			o.GRPCAddr, o.HTTPAddr, o.DebugAddr = "127.0.0.1:0", "127.0.0.1:0", "off"
			if tt.tweak != nil {
				tt.tweak(&o)
			}
			a, err := app.New(o, app.Deps{Logger: app.NewLogger(o, os.Stderr)})
			if tt.wantErr {
				if err == nil {
					t.Fatal("got no error, want one")
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			defer func() { _ = a.Shutdown(context.Background()) }()
			for _, c := range []struct {
				key  string
				want uint32
			}{{"a", tt.wantA}, {"b", tt.wantB}} {
				var got uint32
				if r := a.RLS().Config().Match("d", []descriptors.Entry{{Key: c.key, Value: "v"}}); r != nil {
					got = r.RequestsPerUnit
				}
				if got != c.want {
					t.Errorf("key %s: got limit %d, want %d", c.key, got, c.want)
				}
			}
		})
	}
}

func TestRuntimeRootSwapUnderLoadOnRedis(t *testing.T) {
	srv := redistest.StartSingle(t)
	l := newRuntimeLayout(t)
	l.version("v1", map[string]string{"rt.yaml": domainFile("rt", 1000)})
	l.version("v2", map[string]string{
		"rt.yaml":   domainFile("rt", 2000),
		"more.yaml": "domain: more\ndescriptors:\n  - {key: k, rate_limit: {unit: hour, requests_per_unit: 3}}\n",
	})
	l.swap("v1")
	ta := start(t, nil, func(o *app.Options) {
		l.options(o)
		o.Store = "redis"
		o.Redis.Addrs = []string{srv.Addr}
		o.Redis.Timeout = 2 * time.Second
	})

	// A client calls continuously, before, during and after the swap.
	var calls, failures atomic.Int64
	var sawNew atomic.Bool
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
				n, err := limitOf(ta, "rt", "k", "v")
				calls.Add(1)
				switch {
				case err != nil:
					failures.Add(1)
				case n == 2000:
					sawNew.Store(true)
				case n != 1000:
					failures.Add(1) // neither the old nor the new limit
				}
			}
		}()
	}
	stopClients := func() {
		close(stop)
		wg.Wait()
	}
	time.Sleep(100 * time.Millisecond)
	l.swap("v2")
	swapped := time.Now()
	const bound = 2 * time.Second
	for !sawNew.Load() {
		if time.Since(swapped) > bound {
			stopClients()
			t.Fatalf("the new limits did not apply within %s of the swap", bound)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // keep calling after the swap
	stopClients()
	if n := failures.Load(); n > 0 {
		t.Errorf("%d of %d calls failed or saw a wrong limit, want none", n, calls.Load())
	}
	if calls.Load() < 10 {
		t.Errorf("the client made %d calls, want many", calls.Load())
	}
	// The new domain is enforced through Redis: 3 of 5 calls pass.
	var ok int
	for range 5 {
		resp := ta.ask(t, "more", desc("k", "x"))
		if resp.OverallCode == rlsv3.RateLimitResponse_OK {
			ok++
		}
	}
	if ok != 3 {
		t.Errorf("domain more after the swap: got %d calls allowed, want 3", ok)
	}
	keys, err := srv.Do("KEYS", "more_k_x_*")
	if err != nil {
		t.Fatal(err)
	}
	if ks, _ := keys.([]any); len(ks) != 1 {
		t.Errorf("got Redis keys %v for domain more, want one counter", keys)
	}
}

func TestRuntimeFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    func(o app.Options) string // "" when o is right, else what is wrong
		wantErr string
	}{
		{name: "defaults match envoyproxy/ratelimit's", want: func(o app.Options) string {
			if o.RuntimeRoot != "" || o.RuntimeSubdirectory != "" || o.RuntimeAppDirectory != "config" ||
				!o.RuntimeWatchRoot || o.RuntimeIgnoreDotfiles || o.MergeDomainConfig {
				return "not the defaults"
			}
			return ""
		}},
		{name: "every flag is read",
			args: []string{"--runtime-root", "/srv/current", "--runtime-subdirectory", "ratelimit", "--runtime-appdirectory", "cfg",
				"--runtime-watch-root=false", "--runtime-ignore-dotfiles", "--merge-domain-config"},
			want: func(o app.Options) string {
				if o.RuntimeRoot != "/srv/current" || o.RuntimeSubdirectory != "ratelimit" || o.RuntimeAppDirectory != "cfg" ||
					o.RuntimeWatchRoot || !o.RuntimeIgnoreDotfiles || !o.MergeDomainConfig {
					return "a flag was not read"
				}
				return ""
			}},
		{name: "every flag reads its SLUICE_ variable",
			env: map[string]string{"SLUICE_RUNTIME_ROOT": "/srv/current", "SLUICE_RUNTIME_SUBDIRECTORY": "ratelimit",
				"SLUICE_RUNTIME_APPDIRECTORY": "cfg", "SLUICE_RUNTIME_WATCH_ROOT": "false",
				"SLUICE_RUNTIME_IGNORE_DOTFILES": "true", "SLUICE_MERGE_DOMAIN_CONFIG": "true"},
			want: func(o app.Options) string {
				if o.RuntimeRoot != "/srv/current" || o.RuntimeSubdirectory != "ratelimit" || o.RuntimeAppDirectory != "cfg" ||
					o.RuntimeWatchRoot || !o.RuntimeIgnoreDotfiles || !o.MergeDomainConfig {
					return "a variable was not read"
				}
				return ""
			}},
		{name: "--config and --runtime-root together are an error",
			args: []string{"--config", "x", "--runtime-root", "/srv/current"}, wantErr: "--runtime-root: --config and --runtime-root are exclusive"},
		{name: "an absolute subdirectory is an error",
			args: []string{"--runtime-root", "/srv/current", "--runtime-subdirectory", "/etc"}, wantErr: `--runtime-subdirectory: "/etc" must be a relative path`},
		{name: "an appdirectory leaving the root is an error",
			args: []string{"--runtime-root", "/srv/current", "--runtime-appdirectory", "../x"}, wantErr: `--runtime-appdirectory: "../x" must be a relative path`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := app.ParseServe(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			if bad := tt.want(o); bad != "" {
				t.Fatalf("got %+v: %s", o, bad)
			}
		})
	}
}

func TestConfigSymlinkSwapReloads(t *testing.T) {
	// --config may itself name a symlink swapped to new versions, as
	// RUNTIME_ROOT does; the swap reloads.
	l := newRuntimeLayout(t)
	l.version("v1", map[string]string{"rt.yaml": domainFile("rt", 11)})
	l.version("v2", map[string]string{"rt.yaml": domainFile("rt", 22)})
	l.swap("v1")
	ta := start(t, nil, func(o *app.Options) { o.ConfigPath = l.root() })
	// The root holds ratelimit/config/rt.yaml; --config loads it, nested.
	if n, err := limitOf(ta, "rt", "k", "v"); err != nil || n != 11 {
		t.Fatalf("before the swap: got %d, %v; want 11", n, err)
	}
	l.swap("v2")
	eventually(t, "the swapped version", func() bool { n, _ := limitOf(ta, "rt", "k", "v"); return n == 22 })
}
