package app_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/app"
	"github.com/sluice-rl/sluice/client"
	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/store/fallback"
	"github.com/sluice-rl/sluice/store/memcache/memcachetest"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/redis/redistest"
)

// Runtime overrides (issue 15 item 5): set, changed and removed through
// the authenticated admin API, kept in the store beside the file-based
// ones, the files remaining the fallback.

const rtDefaults = `NewOrdersPerAccount: {burst: 2, count: 2, period: 1h}
`

const rtOverrides = `- NewOrdersPerAccount:
    burst: 4
    count: 4
    period: 1h
    ids: [{id: "100", comment: from the file}]
`

// rtApp is one running service for the runtime override tests.
type rtApp struct {
	*app.App
	stop func() // idempotent
}

// startRT starts a service with the files above in dir and the admin token
// "s3cret" (unless token is false); tweak may change the options.
func startRT(t *testing.T, dir string, token bool, tweak func(*app.Options)) *rtApp {
	t.Helper()
	return startRTWith(t, dir, token, tweak, app.Deps{})
}

// startRTWith is startRT with deps (their Logger and Clock are set here).
func startRTWith(t *testing.T, dir string, token bool, tweak func(*app.Options), deps app.Deps) *rtApp {
	t.Helper()
	o := app.Defaults()
	o.GRPCAddr, o.HTTPAddr, o.DebugAddr = "127.0.0.1:0", "127.0.0.1:0", "off"
	o.LogLevel = "error"
	o.LimitsPath, o.OverridesPath = filepath.Join(dir, "defaults.yaml"), filepath.Join(dir, "overrides.yaml")
	for path, content := range map[string]string{o.LimitsPath: rtDefaults, o.OverridesPath: rtOverrides, filepath.Join(dir, "token"): "s3cret\n"} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if token {
		o.KVAdminTokenFile = filepath.Join(dir, "token")
	}
	if tweak != nil {
		tweak(&o)
	}
	if deps.Logger == nil {
		deps.Logger = app.NewLogger(o, os.Stderr)
	}
	deps.Clock = clock.NewFake(time.Unix(1_800_000_000, 0))
	a, err := app.New(o, deps)
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	if err := a.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := a.Shutdown(ctx); err != nil {
				t.Errorf("Shutdown: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return &rtApp{App: a, stop: stop}
}

// call makes an HTTP call on ta with "Authorization: Bearer auth" (none
// when auth is empty) and returns the status and body.
func (ta *rtApp) call(t *testing.T, method, path, auth, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+ta.HTTPAddr()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// put sets the runtime override of NewOrdersPerAccount id to burst and
// count n per hour.
func (ta *rtApp) put(t *testing.T, id, body string) {
	t.Helper()
	if code, got := ta.call(t, http.MethodPut, "/v1/overrides/NewOrdersPerAccount/"+id, "s3cret", body); code != http.StatusOK {
		t.Fatalf("PUT %s: got %d %s, want 200", id, code, got)
	}
}

// limitOf returns the limit a peek at NewOrdersPerAccount id reports, as
// "burst/count/period source".
func (ta *rtApp) limitOf(t *testing.T, id string) string {
	t.Helper()
	code, body := ta.call(t, http.MethodPost, "/v1/check", "", `{"name": "NewOrdersPerAccount", "id": "`+id+`", "cost": 0}`)
	if code != http.StatusOK {
		t.Fatalf("check %s: got %d %s, want 200", id, code, body)
	}
	var d struct {
		Limit struct {
			Burst, Count int64
			Period       string
			Source       string
		}
	}
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		t.Fatal(err)
	}
	l := d.Limit
	return strings.Join([]string{itoa(l.Burst) + "/" + itoa(l.Count) + "/" + l.Period, l.Source}, " ")
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

func TestRuntimeOverrideTakesEffectAndFallsBack(t *testing.T) {
	ta := startRT(t, t.TempDir(), true, func(o *app.Options) { o.KVOverridesRefresh = 20 * time.Millisecond })

	t.Run("a spend above the file's default is allowed once the override is set", func(t *testing.T) {
		body := `{"name": "NewOrdersPerAccount", "id": "7", "cost": 5}`
		if code, got := ta.call(t, http.MethodPost, "/v1/spend", "", body); code != http.StatusBadRequest {
			t.Fatalf("spend of 5 under the default burst 2: got %d %s, want 400", code, got)
		}
		ta.put(t, "7", `{"burst": 5, "count": 5, "period": "1h", "comment": "ticket 42"}`)
		code, got := ta.call(t, http.MethodPost, "/v1/spend", "", body)
		if code != http.StatusOK || !strings.Contains(got, `"allowed":true`) || !strings.Contains(got, `"source":"override"`) {
			t.Errorf("spend of 5: got %d %s, want allowed under the override", code, got)
		}
	})
	t.Run("the memory store keeps the override across refreshes", func(t *testing.T) {
		time.Sleep(100 * time.Millisecond) // several refreshes
		if got := ta.limitOf(t, "7"); got != "5/5/1h0m0s override" {
			t.Errorf("got %s, want 5/5/1h0m0s override", got)
		}
		code, body := ta.call(t, http.MethodGet, "/v1/overrides", "s3cret", "")
		if code != http.StatusOK || !strings.Contains(body, `"key":"3:7"`) || !strings.Contains(body, `"comment":"ticket 42"`) {
			t.Errorf("list: got %d %s, want 3:7 with its comment", code, body)
		}
	})
	t.Run("a runtime override replaces the file's and its removal brings the file's back", func(t *testing.T) {
		ta.put(t, "100", `{"burst": 9, "count": 9, "period": "2h"}`)
		if got := ta.limitOf(t, "100"); got != "9/9/2h0m0s override" {
			t.Errorf("with the runtime override: got %s, want 9/9/2h0m0s override", got)
		}
		if code, body := ta.call(t, http.MethodDelete, "/v1/overrides/NewOrdersPerAccount/100", "s3cret", ""); code != http.StatusOK {
			t.Fatalf("DELETE: got %d %s", code, body)
		}
		if got := ta.limitOf(t, "100"); got != "4/4/1h0m0s override" {
			t.Errorf("after DELETE: got %s, want the file's 4/4/1h0m0s override", got)
		}
	})
	t.Run("removing the override of an id without a file override brings the default back", func(t *testing.T) {
		if code, body := ta.call(t, http.MethodDelete, "/v1/overrides/NewOrdersPerAccount/7", "s3cret", ""); code != http.StatusOK {
			t.Fatalf("DELETE: got %d %s", code, body)
		}
		if got := ta.limitOf(t, "7"); got != "2/2/1h0m0s default" {
			t.Errorf("got %s, want the default 2/2/1h0m0s", got)
		}
	})
	t.Run("a bad limit is refused naming the field", func(t *testing.T) {
		code, body := ta.call(t, http.MethodPut, "/v1/overrides/NewOrdersPerAccount/7", "s3cret", `{"burst": 5, "count": 0, "period": "1h"}`)
		if code != http.StatusBadRequest || !strings.Contains(body, "runtime override: invalid count 0 for NewOrdersPerAccount, must be") {
			t.Errorf("got %d %s, want 400 naming the count", code, body)
		}
	})
}

func TestRuntimeOverridesRefuseUnauthenticatedCallers(t *testing.T) {
	for _, tc := range []struct {
		desc      string
		token     bool   // configured
		auth      string // sent
		wantError string
	}{
		{desc: "with no token configured, even a token is refused", token: false, auth: "s3cret", wantError: "none are configured"},
		{desc: "a call without the token is refused", token: true, auth: "", wantError: "need an administrator's credentials"},
		{desc: "a call with the wrong token is refused", token: true, auth: "s3cre", wantError: "need an administrator's credentials"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			ta := startRT(t, t.TempDir(), tc.token, nil)
			code, body := ta.call(t, http.MethodPut, "/v1/overrides/NewOrdersPerAccount/7", tc.auth, `{"burst": 50, "count": 50, "period": "1h"}`)
			if code != http.StatusForbidden || !strings.Contains(body, tc.wantError) {
				t.Errorf("PUT: got %d %s, want 403 with %q", code, body, tc.wantError)
			}
			if code, _ := ta.call(t, http.MethodGet, "/v1/overrides", tc.auth, ""); code != http.StatusForbidden {
				t.Errorf("GET: got %d, want 403", code)
			}
			if got := ta.limitOf(t, "7"); got != "2/2/1h0m0s default" {
				t.Errorf("got %s, want the default unchanged", got)
			}
		})
	}
}

func TestRuntimeOverridesSurviveARestartOnRedis(t *testing.T) {
	srv := redistest.StartSingle(t)
	onRedis := func(o *app.Options) {
		o.Store = "redis"
		o.Redis.Addrs = []string{srv.Addr}
		o.Redis.Timeout = 2 * time.Second
		o.Redis.KeyPrefix = "rt:"
	}
	dir := t.TempDir()
	first := startRT(t, dir, true, onRedis)
	first.put(t, "7", `{"burst": 6, "count": 6, "period": "1h", "comment": "kept"}`)
	first.stop()
	if got := srv.MustDo("HEXISTS", "rt:sluice_kv_overrides", "3:7"); got != int64(1) {
		t.Fatalf("HEXISTS rt:sluice_kv_overrides 3:7: got %v, want 1", got)
	}

	second := startRT(t, dir, true, onRedis)
	if got := second.limitOf(t, "7"); got != "6/6/1h0m0s override" {
		t.Errorf("after the restart: got %s, want the runtime override 6/6/1h0m0s", got)
	}
	code, body := second.call(t, http.MethodGet, "/v1/overrides/NewOrdersPerAccount/7", "s3cret", "")
	if code != http.StatusOK || !strings.Contains(body, `"comment":"kept"`) {
		t.Errorf("GET after the restart: got %d %s, want the override", code, body)
	}
}

// A store that does not answer at start: the service starts with the
// files, logs a warning, and reads the overrides on a later refresh.
func TestRuntimeOverridesAreReadOnceTheStoreComesBack(t *testing.T) {
	srv := redistest.StartSingle(t, redistest.WithConfig("appendonly yes"))
	srv.MustDo("HSET", "sluice_kv_overrides", "3:7",
		`{"name":"NewOrdersPerAccount","id":"7","burst":8,"count":8,"period":"1h0m0s","updated":"2026-11-23T15:00:00Z"}`)
	st, err := redis.New(context.Background(), redis.Options{Addrs: []string{srv.Addr}, Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	fb, err := fallback.New(st, fallback.Allow, nil, fallback.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	var logs syncBuffer
	ta := startRTWith(t, t.TempDir(), true, func(o *app.Options) {
		o.Store, o.Redis.Addrs = "redis", []string{srv.Addr} // the store is fb
		o.LogLevel = "warn"
		o.KVOverridesRefresh = 50 * time.Millisecond
	}, app.Deps{Store: fb, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if got := ta.limitOf(t, "7"); got != "2/2/1h0m0s default" {
		t.Errorf("with Redis down: got %s, want the files' default", got)
	}
	if !strings.Contains(logs.String(), "key-value runtime overrides not read from the store") {
		t.Errorf("got log %q, want a warning that the overrides were not read", logs.String())
	}
	srv.Restart()
	eventually(t, "the stored override applies once Redis is back", func() bool { return ta.limitOf(t, "7") == "8/8/1h0m0s override" })
}

// syncBuffer is a bytes.Buffer safe for concurrent use, for logs.
type syncBuffer struct {
	mu sync.Mutex // protects b
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRuntimeOverridesConvergeAcrossServicesOnRedis(t *testing.T) {
	srv := redistest.StartSingle(t)
	onRedis := func(o *app.Options) {
		o.Store = "redis"
		o.Redis.Addrs = []string{srv.Addr}
		o.Redis.Timeout = 2 * time.Second
		o.KVOverridesRefresh = 50 * time.Millisecond
	}
	a := startRT(t, t.TempDir(), true, onRedis)
	b := startRT(t, t.TempDir(), true, onRedis)
	a.put(t, "8", `{"burst": 3, "count": 3, "period": "1m"}`)
	eventually(t, "b sees the override set on a", func() bool { return b.limitOf(t, "8") == "3/3/1m0s override" })
	if code, body := b.call(t, http.MethodDelete, "/v1/overrides/NewOrdersPerAccount/8", "s3cret", ""); code != http.StatusOK {
		t.Fatalf("DELETE on b: got %d %s", code, body)
	}
	eventually(t, "a sees the override removed on b", func() bool { return a.limitOf(t, "8") == "2/2/1h0m0s default" })
}

func TestRuntimeOverridesOnMemcacheAnswerNotImplemented(t *testing.T) {
	srv := memcachetest.Start(t)
	ta := startRT(t, t.TempDir(), true, func(o *app.Options) {
		o.Store = "memcache"
		o.Memcache.Addrs = []string{srv.Addr}
		o.Memcache.Timeout = 2 * time.Second
	})
	want := "the memcache store does not"
	for _, c := range []struct{ method, path, body string }{
		{http.MethodPut, "/v1/overrides/NewOrdersPerAccount/7", `{"burst": 5, "count": 5, "period": "1h"}`},
		{http.MethodGet, "/v1/overrides", ""},
		{http.MethodDelete, "/v1/overrides/NewOrdersPerAccount/7", ""},
	} {
		if code, body := ta.call(t, c.method, c.path, "s3cret", c.body); code != http.StatusNotImplemented || !strings.Contains(body, want) {
			t.Errorf("%s %s: got %d %s, want 501 with %q", c.method, c.path, code, body, want)
		}
	}
}

func TestKVOverridesRefreshIsAFlagAndAVariable(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		env     map[string]string
		want    time.Duration
		wantErr string
	}{
		{want: 10 * time.Second},
		{args: []string{"--kv-overrides-refresh", "0"}, want: 0},
		{env: map[string]string{"SLUICE_KV_OVERRIDES_REFRESH": "1m"}, want: time.Minute},
		{args: []string{"--kv-overrides-refresh", "-1s"}, wantErr: "--kv-overrides-refresh: -1s is negative"},
	} {
		o, err := app.ParseServe(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
		if err == nil {
			err = o.Validate()
		}
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: got %v, want %q", tc.args, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("%v %v: %v", tc.args, tc.env, err)
		case o.KVOverridesRefresh != tc.want:
			t.Errorf("%v %v: got %s, want %s", tc.args, tc.env, o.KVOverridesRefresh, tc.want)
		}
	}
}

func TestRuntimeOverridesOverGRPC(t *testing.T) {
	ta := startRT(t, t.TempDir(), true, nil)
	c, err := client.Dial(ta.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	o := client.Override{Name: "NewOrdersPerAccount", ID: "7", Burst: 5, Count: 5, Period: time.Hour}
	if _, err := c.PutOverride(ctx, o); !client.IsForbidden(err) {
		t.Errorf("PutOverride without the token: got %v, want PermissionDenied", err)
	}
	if _, err := c.PutOverride(client.WithAdminToken(ctx, "s3cret"), o); err != nil {
		t.Fatalf("PutOverride: %v", err)
	}
	if got := ta.limitOf(t, "7"); got != "5/5/1h0m0s override" {
		t.Errorf("over HTTP after a gRPC PutOverride: got %s, want 5/5/1h0m0s override", got)
	}
}
