package server_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/server"
	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/memory"
)

const overridesDefaults = `
NewOrdersPerAccount: {burst: 3, count: 3, period: 1h}
NewRegistrationsPerIPv6Range: {burst: 2, count: 2, period: 1h}
`

const overridesFile = `
- NewOrdersPerAccount:
    burst: 5
    count: 5
    period: 1h
    ids: [{id: "100", comment: from the file}]
`

// overridesServer is a key-value API with runtime overrides over st, its
// files the defaults and overrides above, admin token "s3cret" unless
// token is empty.
type overridesServer struct {
	url string
	ov  *server.Overrides
}

func startOverrides(t *testing.T, st store.Store, token, storeKind string) *overridesServer {
	t.Helper()
	return startOverridesLogging(t, st, token, storeKind, slog.New(slog.DiscardHandler))
}

// startOverridesLogging is startOverrides logging to log.
func startOverridesLogging(t *testing.T, st store.Store, token, storeKind string, log *slog.Logger) *overridesServer {
	t.Helper()
	d, err := limits.ParseDefaults("defaults.yaml", []byte(overridesDefaults))
	if err != nil {
		t.Fatal(err)
	}
	o, err := limits.ParseOverrides("overrides.yaml", []byte(overridesFile))
	if err != nil {
		t.Fatal(err)
	}
	files, err := limits.New(d, o)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 11, 23, 15, 0, 0, 0, time.UTC))
	lim := limiter.New(st, clk)
	ov := server.NewOverrides(server.OverridesOptions{Limiter: lim, Files: func() *limits.Set { return files }, Clock: clk, StoreKind: storeKind,
		Logger: log})
	kv := server.NewKV(server.KVOptions{Limiter: lim, Clock: clk, Limits: ov.Limits, Overrides: ov, Admin: server.AdminAuth{Token: token},
		Logger: log})
	srv := httptest.NewServer(server.KVHTTPHandler(kv))
	t.Cleanup(srv.Close)
	return &overridesServer{url: srv.URL, ov: ov}
}

// call makes an HTTP call with the admin token auth (none when empty) and
// returns the status and body.
func (s *overridesServer) call(t *testing.T, method, path, auth, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	resp, err := http.DefaultClient.Do(req)
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

// spends spends 1 on NewOrdersPerAccount id n times and returns how many
// were allowed.
func (s *overridesServer) spends(t *testing.T, name, id string, n int) int {
	t.Helper()
	allowed := 0
	for range n {
		code, body := s.call(t, http.MethodPost, "/v1/spend", "", `{"name": "`+name+`", "id": "`+id+`"}`)
		if code != http.StatusOK {
			t.Fatalf("spend: got %d %s, want 200", code, body)
		}
		var d struct{ Allowed bool }
		if err := json.Unmarshal([]byte(body), &d); err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			allowed++
		}
	}
	return allowed
}

func TestRuntimeOverridesNeedCredentials(t *testing.T) {
	t.Parallel()
	calls := []struct{ method, path, body string }{
		{http.MethodGet, "/v1/overrides", ""},
		{http.MethodGet, "/v1/overrides/NewOrdersPerAccount/1", ""},
		{http.MethodPut, "/v1/overrides/NewOrdersPerAccount/1", `{"burst": 100, "count": 100, "period": "1h"}`},
		{http.MethodDelete, "/v1/overrides/NewOrdersPerAccount/1", ""},
	}
	tests := []struct {
		desc      string
		token     string // configured
		auth      string // sent
		wantError string
	}{
		{desc: "with no credentials configured every call is refused, even with a token",
			token: "", auth: "s3cret", wantError: "none are configured: set --kv-admin-token-file or --kv-admin-client-san"},
		{desc: "a call without the token is refused",
			token: "s3cret", auth: "", wantError: "runtime overrides need an administrator's credentials: the bearer token of --kv-admin-token-file"},
		{desc: "a call with the wrong token is refused",
			token: "s3cret", auth: "guess", wantError: "runtime overrides need an administrator's credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			s := startOverrides(t, memory.New(memory.Options{}), tt.token, "memory")
			for _, c := range calls {
				code, body := s.call(t, c.method, c.path, tt.auth, c.body)
				if code != http.StatusForbidden || !strings.Contains(body, tt.wantError) {
					t.Errorf("%s %s: got %d %s, want 403 with %q", c.method, c.path, code, body, tt.wantError)
				}
			}
			if got := s.spends(t, limits.NewOrdersPerAccount, "1", 4); got != 3 {
				t.Errorf("got %d spends allowed, want the default's 3: the refused PUT must change nothing", got)
			}
		})
	}
}

func TestRuntimeOverridesChangeTheLimitAtOnce(t *testing.T) {
	t.Parallel()
	s := startOverrides(t, memory.New(memory.Options{}), "s3cret", "memory")
	const tok = "s3cret"

	t.Run("an override above the default lets more spends through", func(t *testing.T) {
		code, body := s.call(t, http.MethodPut, "/v1/overrides/NewOrdersPerAccount/7", tok, `{"burst": 10, "count": 10, "period": "1h", "comment": "ticket 42"}`)
		want := `{"name":"NewOrdersPerAccount","id":"7","key":"3:7","burst":10,"count":10,"period":"1h0m0s","comment":"ticket 42","updated":"2026-11-23T15:00:00Z"}` + "\n"
		if code != http.StatusOK || body != want {
			t.Fatalf("PUT: got %d %s, want 200 %s", code, body, want)
		}
		if got := s.spends(t, limits.NewOrdersPerAccount, "7", 12); got != 10 {
			t.Errorf("got %d spends allowed, want 10", got)
		}
	})
	t.Run("the override is listed and read back", func(t *testing.T) {
		code, body := s.call(t, http.MethodGet, "/v1/overrides", tok, "")
		if code != http.StatusOK || !strings.Contains(body, `"key":"3:7"`) || !strings.HasPrefix(body, `{"overrides":[`) {
			t.Errorf("GET list: got %d %s, want 200 listing 3:7", code, body)
		}
		code, body = s.call(t, http.MethodGet, "/v1/overrides/NewOrdersPerAccount/7", tok, "")
		if code != http.StatusOK || !strings.Contains(body, `"burst":10`) {
			t.Errorf("GET: got %d %s, want 200 with burst 10", code, body)
		}
	})
	t.Run("removing the override falls back to the default", func(t *testing.T) {
		code, body := s.call(t, http.MethodDelete, "/v1/overrides/NewOrdersPerAccount/7", tok, "")
		if code != http.StatusOK {
			t.Fatalf("DELETE: got %d %s, want 200", code, body)
		}
		code, body = s.call(t, http.MethodPost, "/v1/check", "", `{"name": "NewOrdersPerAccount", "id": "7", "cost": 0}`)
		if code != http.StatusOK || !strings.Contains(body, `"limit":{"burst":3,"count":3,"period":"1h0m0s","source":"default"}`) {
			t.Errorf("check: got %d %s, want the default 3/3/1h", code, body)
		}
		code, body = s.call(t, http.MethodGet, "/v1/overrides/NewOrdersPerAccount/7", tok, "")
		if code != http.StatusNotFound || !strings.Contains(body, `no runtime override for NewOrdersPerAccount id \"7\" (key 3:7)`) {
			t.Errorf("GET after DELETE: got %d %s, want 404", code, body)
		}
		code, _ = s.call(t, http.MethodDelete, "/v1/overrides/NewOrdersPerAccount/7", tok, "")
		if code != http.StatusNotFound {
			t.Errorf("second DELETE: got %d, want 404", code)
		}
	})
	t.Run("removing an override of an id the file overrides falls back to the file's", func(t *testing.T) {
		if code, body := s.call(t, http.MethodPut, "/v1/overrides/NewOrdersPerAccount/100", tok, `{"burst": 1, "count": 1, "period": "1h"}`); code != http.StatusOK {
			t.Fatalf("PUT: got %d %s", code, body)
		}
		if got := s.spends(t, limits.NewOrdersPerAccount, "100", 2); got != 1 {
			t.Errorf("got %d spends allowed under the runtime override, want 1", got)
		}
		if code, body := s.call(t, http.MethodDelete, "/v1/overrides/NewOrdersPerAccount/100", tok, ""); code != http.StatusOK {
			t.Fatalf("DELETE: got %d %s", code, body)
		}
		_, body := s.call(t, http.MethodPost, "/v1/check", "", `{"name": "NewOrdersPerAccount", "id": "100", "cost": 0}`)
		if !strings.Contains(body, `"limit":{"burst":5,"count":5,"period":"1h0m0s","source":"override"}`) {
			t.Errorf("check: got %s, want the file's override 5/5/1h", body)
		}
	})
	t.Run("an IPv6 range id works written as it is and percent-encoded", func(t *testing.T) {
		code, body := s.call(t, http.MethodPut, "/v1/overrides/NewRegistrationsPerIPv6Range/2001:db8::/48", tok, `{"burst": 4, "count": 4, "period": "1h"}`)
		if code != http.StatusOK || !strings.Contains(body, `"key":"2:2001:db8::/48"`) {
			t.Fatalf("PUT: got %d %s", code, body)
		}
		if got := s.spends(t, limits.NewRegistrationsPerIPv6Range, "2001:db8::1", 5); got != 4 {
			t.Errorf("got %d spends allowed, want 4", got)
		}
		code, body = s.call(t, http.MethodGet, "/v1/overrides/NewRegistrationsPerIPv6Range/2001:db8::%2F48", tok, "")
		if code != http.StatusOK || !strings.Contains(body, `"burst":4`) {
			t.Errorf("GET percent-encoded: got %d %s, want 200", code, body)
		}
	})
}

func TestRuntimeOverridesRefuseBadInput(t *testing.T) {
	t.Parallel()
	s := startOverrides(t, memory.New(memory.Options{}), "s3cret", "memory")
	tests := []struct {
		desc       string
		method     string
		path, body string
		wantStatus int
		wantError  string
	}{
		{desc: "an unknown name", method: http.MethodPut, path: "/v1/overrides/NewWidgetsPerAccount/1", body: `{"burst": 1, "count": 1, "period": "1s"}`,
			wantStatus: 400, wantError: `runtime override: unknown limit name "NewWidgetsPerAccount"`},
		{desc: "an id not in canonical form", method: http.MethodPut, path: "/v1/overrides/NewOrdersPerAccount/007", body: `{"burst": 1, "count": 1, "period": "1s"}`,
			wantStatus: 400, wantError: `runtime override: invalid id "007" for NewOrdersPerAccount: must not have leading zeros`},
		{desc: "an IPv6 range that is not a /48", method: http.MethodPut, path: "/v1/overrides/NewRegistrationsPerIPv6Range/2001:db8::/64", body: `{"burst": 1, "count": 1, "period": "1s"}`,
			wantStatus: 400, wantError: `invalid id "2001:db8::/64" for NewRegistrationsPerIPv6Range`},
		{desc: "a zero burst", method: http.MethodPut, path: "/v1/overrides/NewOrdersPerAccount/1", body: `{"burst": 0, "count": 1, "period": "1s"}`,
			wantStatus: 400, wantError: "runtime override: invalid burst 0 for NewOrdersPerAccount, must be > 0"},
		{desc: "a missing count", method: http.MethodPut, path: "/v1/overrides/NewOrdersPerAccount/1", body: `{"burst": 1, "period": "1s"}`,
			wantStatus: 400, wantError: "runtime override: missing count for NewOrdersPerAccount"},
		{desc: "a period that is not a duration", method: http.MethodPut, path: "/v1/overrides/NewOrdersPerAccount/1", body: `{"burst": 1, "count": 1, "period": "daily"}`,
			wantStatus: 400, wantError: `runtime override: invalid period "daily" for NewOrdersPerAccount, must be a duration such as 1s or 180m`},
		{desc: "a burst that is a string", method: http.MethodPut, path: "/v1/overrides/NewOrdersPerAccount/1", body: `{"burst": "1", "count": 1, "period": "1s"}`,
			wantStatus: 400, wantError: `invalid JSON: field "burst" must be an integer, got string`},
		{desc: "an unknown field", method: http.MethodPut, path: "/v1/overrides/NewOrdersPerAccount/1", body: `{"burst": 1, "count": 1, "period": "1s", "ids": []}`,
			wantStatus: 400, wantError: `invalid JSON: unknown field "ids"`},
		{desc: "a path without an id", method: http.MethodGet, path: "/v1/overrides/NewOrdersPerAccount",
			wantStatus: 404, wantError: "no such endpoint /v1/overrides/NewOrdersPerAccount; use /v1/overrides or /v1/overrides/{name}/{id}"},
		{desc: "a POST", method: http.MethodPost, path: "/v1/overrides/NewOrdersPerAccount/1", body: `{}`,
			wantStatus: 405, wantError: "method POST not allowed on /v1/overrides/{name}/{id}, use GET, PUT or DELETE"},
	}
	for _, tt := range tests {
		t.Run(tt.desc+" is answered "+http.StatusText(tt.wantStatus), func(t *testing.T) {
			code, body := s.call(t, tt.method, tt.path, "s3cret", tt.body)
			var e struct{ Error string }
			_ = json.Unmarshal([]byte(body), &e)
			if code != tt.wantStatus || !strings.Contains(e.Error, tt.wantError) {
				t.Errorf("got %d %s, want %d with %q", code, body, tt.wantStatus, tt.wantError)
			}
		})
	}
	if list, err := s.ov.List(); len(list) != 0 || err != nil {
		t.Errorf("got %d runtime overrides, %v after bad calls, want none", len(list), err)
	}
}

// bucketsOnly is a store that keeps buckets and no runtime overrides, as
// memcache does.
type bucketsOnly struct{ store.Store }

func TestRuntimeOverridesOnAStoreWithoutThemAnswerNotImplemented(t *testing.T) {
	t.Parallel()
	s := startOverrides(t, bucketsOnly{memory.New(memory.Options{})}, "s3cret", "memcache")
	code, body := s.call(t, http.MethodPut, "/v1/overrides/NewOrdersPerAccount/1", "s3cret", `{"burst": 1, "count": 1, "period": "1s"}`)
	want := "runtime overrides need a store that keeps them (--store memory or redis); the memcache store does not"
	if code != http.StatusNotImplemented || !strings.Contains(body, want) {
		t.Errorf("got %d %s, want 501 with %q", code, body, want)
	}
	if err := s.ov.Refresh(context.Background()); limiter.KindOf(err) != limiter.Unsupported {
		t.Errorf("Refresh: got %v, want Unsupported", err)
	}
	for _, path := range []string{"/v1/overrides", "/v1/overrides/NewOrdersPerAccount/1"} {
		if code, body := s.call(t, http.MethodGet, path, "s3cret", ""); code != http.StatusNotImplemented || !strings.Contains(body, want) {
			t.Errorf("GET %s: got %d %s, want 501 with %q", path, code, body, want)
		}
	}
}

func TestRuntimeOverridesConvergeOnRefresh(t *testing.T) {
	t.Parallel()
	shared := memory.New(memory.Options{}) // two services, one store
	a := startOverrides(t, shared, "s3cret", "memory")
	b := startOverrides(t, shared, "s3cret", "memory")
	if code, body := a.call(t, http.MethodPut, "/v1/overrides/NewOrdersPerAccount/9", "s3cret", `{"burst": 1, "count": 1, "period": "1h"}`); code != http.StatusOK {
		t.Fatalf("PUT on a: got %d %s", code, body)
	}
	if list, _ := b.ov.List(); len(list) != 0 {
		t.Fatalf("b before its refresh: got %d runtime overrides, want 0", len(list))
	}
	if err := b.ov.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.ov.List(); len(got) != 1 || got[0].Key != "3:9" {
		t.Fatalf("b after its refresh: got %+v, want 3:9", got)
	}
	if code, body := a.call(t, http.MethodPut, "/v1/overrides/NewOrdersPerAccount/10", "s3cret", `{"burst": 2, "count": 2, "period": "1h"}`); code != http.StatusOK {
		t.Fatalf("PUT on a: got %d %s", code, body)
	}
	if code, body := b.call(t, http.MethodDelete, "/v1/overrides/NewOrdersPerAccount/10", "s3cret", ""); code != http.StatusOK || !strings.Contains(body, `"burst":2,"count":2,"period":"1h0m0s"`) {
		t.Errorf("DELETE on b of an override b has not read yet: got %d %s, want 200 with the override as stored", code, body)
	}
	if code, _ := b.call(t, http.MethodDelete, "/v1/overrides/NewOrdersPerAccount/9", "s3cret", ""); code != http.StatusOK {
		t.Fatalf("DELETE on b: got %d", code)
	}
	if err := a.ov.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if list, _ := a.ov.List(); len(list) != 0 {
		t.Errorf("a after its refresh: got %d runtime overrides, want 0", len(list))
	}
}

func TestRuntimeOverrideChangesAreLoggedWithWhoAndWhat(t *testing.T) {
	t.Parallel()
	var buf strings.Builder // written by the handler goroutines one call at a time
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), nil))
	s := startOverridesLogging(t, memory.New(memory.Options{}), "s3cret", "memory", log)
	s.call(t, http.MethodPut, "/v1/overrides/NewOrdersPerAccount/7", "s3cret", `{"burst": 10, "count": 10, "period": "1h", "comment": "ticket 42"}`)
	s.call(t, http.MethodDelete, "/v1/overrides/NewOrdersPerAccount/7", "s3cret", "")
	s.call(t, http.MethodPut, "/v1/overrides/NewOrdersPerAccount/7", "guess", `{"burst": 10, "count": 10, "period": "1h"}`)
	mu.Lock()
	got := buf.String()
	mu.Unlock()
	for _, want := range []string{
		`level=INFO msg="key-value runtime override set" by=token name=NewOrdersPerAccount id=7 key=3:7 burst=10 count=10 period=1h0m0s comment="ticket 42"`,
		`level=INFO msg="key-value runtime override removed" by=token name=NewOrdersPerAccount id=7 key=3:7`,
		`level=WARN msg="key-value runtime override call refused" method=PUT path=/v1/overrides/NewOrdersPerAccount/7`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("got log\n%s\nwant a line with %s", got, want)
		}
	}
}

// writerFunc is an io.Writer that calls itself.
type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
