package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-rl/sluice/app"
	sluiceclient "github.com/sluice-rl/sluice/client"
	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/internal/apptest"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/server"
)

// chromiumPath finds a headless-capable Chromium, skipping the test
// without one, or failing it when SLUICE_REQUIRE_REDIS=1 (CI installs
// chromium).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("SLUICE_REQUIRE_REDIS") == "1" {
		t.Fatal("chromium not found on PATH (apt-get install chromium), and SLUICE_REQUIRE_REDIS=1 requires it")
	}
	t.Skip("chromium not found on PATH; apt-get install chromium to run the dashboard's browser test")
	return ""
}

// startExamples starts the service on the example configuration, on the
// real clock (the dashboard's rates are per real second) and the memory
// store.
func startExamples(t *testing.T) *app.App {
	t.Helper()
	o := apptest.Options()
	o.ConfigPath = "../examples/config"
	return apptest.Run(t, o, nil)
}

// blockedRule is the example rule every call of the blocked address is
// over: edge_proxy's remote_address 198.51.100.7 at 0 a second.
const blockedRule = "edge_proxy.remote_address_198.51.100.7"

// load calls ShouldRateLimit until ctx ends: the blocked address (always
// over the limit), another address (50 a second, sometimes over) and a
// database; and spends on a key-value limit.
func load(ctx context.Context, t *testing.T, addr string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	client := rlsv3.NewRateLimitServiceClient(conn)
	kv, err := sluiceclient.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer conn.Close()
		defer kv.Close()
		reqs := []*rlsv3.RateLimitRequest{
			{Domain: "edge_proxy", Descriptors: []*rlcommon.RateLimitDescriptor{desc("remote_address", "198.51.100.7")}},
			{Domain: "edge_proxy", Descriptors: []*rlcommon.RateLimitDescriptor{desc("remote_address", "203.0.113.5")}},
			{Domain: "mongo_cps", Descriptors: []*rlcommon.RateLimitDescriptor{desc("database", "users")}},
		}
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, _ = client.ShouldRateLimit(cctx, reqs[i%len(reqs)])
			if i%4 == 0 {
				_, _ = kv.Spend(cctx, limits.NewRegistrationsPerIPAddress, "192.0.2.7", 1)
			}
			cancel()
		}
	}()
}

func TestDashboardStateJSONShowsRulesStoreAndConfig(t *testing.T) {
	a := startExamples(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	load(ctx, t, a.GRPCAddr())
	var st struct {
		Domains []string `json:"domains"`
		Rules   []struct {
			Key   string `json:"key"`
			Limit string `json:"limit"`
			Over  uint64 `json:"over_limit"`
		} `json:"rules"`
		Store struct{ Kind string } `json:"store"`
		KV    []struct {
			Limit                  string `json:"limit"`
			Allowed, Denied, Error uint64
		} `json:"kv"`
		Config struct {
			Source string `json:"source"`
			Hash   string `json:"hash"`
			OK     bool   `json:"last_reload_ok"`
		} `json:"config"`
		Listeners *struct {
			GRPCConnections uint64            `json:"grpc_connections"`
			Refused         map[string]uint64 `json:"grpc_calls_refused"`
		} `json:"listeners"`
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + a.DebugAddr() + "/dashboard/state.json")
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("decode state.json: %v", err)
		}
		if len(st.Rules) > 0 && st.Rules[0].Key == blockedRule && st.Rules[0].Over > 0 && len(st.KV) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	checks := []struct {
		name      string
		got, want string
	}{
		{"the most pressed rule is the blocked address", st.Rules[0].Key, blockedRule},
		{"its limit is written for people", st.Rules[0].Limit, "0/second"},
		{"the store is the memory store", st.Store.Kind, "memory"},
		{"the config came from files", st.Config.Source, "files"},
		{"the last load succeeded", strconv.FormatBool(st.Config.OK), "true"},
		{"the example domains are listed", strings.Join(st.Domains, ","), "bench,edge_proxy,messaging,mongo_cps"},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if c.got != c.want {
				t.Errorf("got %q, want %q", c.got, c.want)
			}
		})
	}
	if len(st.KV) != 1 || st.KV[0].Limit != limits.NewRegistrationsPerIPAddress || st.KV[0].Allowed+st.KV[0].Denied+st.KV[0].Error == 0 {
		t.Errorf("key-value decisions: got %+v, want counts for %s", st.KV, limits.NewRegistrationsPerIPAddress)
	}
	if len(st.Config.Hash) != 12 {
		t.Errorf("config hash: got %q, want 12 hex digits", st.Config.Hash)
	}
	// The load's connection, and a count for every reason a call may be
	// refused (none refused).
	if l := st.Listeners; l == nil || l.GRPCConnections < 1 || len(l.Refused) != 4 || l.Refused["max_streams"] != 0 {
		t.Errorf("listeners: got %+v, want at least 1 gRPC connection and 4 refusal reasons at 0", l)
	}
}

// TestDashboardInHeadlessChromium opens the debug port's page in a real
// browser while load runs: the example domains and their over-limit
// figures appear, the figures change between two reads, and every request
// the page makes stays on the loopback host. With SLUICE_DASHBOARD_PNG set
// the screenshot is written there (docs/dashboard.png was made so).
func TestDashboardInHeadlessChromium(t *testing.T) {
	chromium := chromiumPath(t)
	a := startExamples(t)
	// The whole test's bound: the browser's start, then the waits below
	// (10 s for the row, 15 s for a rate, 3 s between two reads), with
	// room to spare on a loaded 2-core CI machine. It was 28 s, the waits'
	// sum with none for the start, and a fresh-clone CI run ran out of it
	// during the last wait (2026-11-26).
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	load(ctx, t, a.GRPCAddr())

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.Headless, chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900), chromedp.Flag("no-proxy-server", true))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	var mu sync.Mutex
	var requested []string // every URL the page asked for; guarded by mu
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithListener(func(ev any) {
		var u string
		switch ev := ev.(type) {
		case *network.EventRequestWillBeSent:
			u = ev.Request.URL
		case network.EventRequestWillBeSent:
			u = ev.Request.URL
		default:
			return
		}
		mu.Lock()
		requested = append(requested, u)
		mu.Unlock()
	}))
	defer bcancel()

	page := "http://" + a.DebugAddr() + "/"
	row := `#rules tbody tr[data-key="` + blockedRule + `"]`
	if err := chromedp.Do(bctx, chromedp.Navigate(page)); err != nil {
		t.Fatalf("open %s: %v", page, err)
	}
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](`document.querySelector('`+row+`') !== null`,
		chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("wait for the blocked address's row: %v", err)
	}
	// The over-limit rate needs two reads a second apart.
	overRate, err := chromedp.Run(bctx, chromedp.Poll[float64](`(function () {
		var td = document.querySelector('`+row+` td.over-rate');
		var v = td ? parseFloat(td.textContent.replace(/,/g, "")) : 0;
		return v > 0 ? v : 0;
	})()`, chromedp.WithPollingTimeout(15*time.Second)))
	if err != nil {
		t.Fatalf("wait for a non-zero over-limit rate on %s: %v", blockedRule, err)
	}
	body, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil {
		t.Fatal(err)
	}
	for _, domain := range []string{"edge_proxy", "mongo_cps", "messaging", "bench"} {
		if !strings.Contains(body, domain) {
			t.Errorf("page text has no domain %q", domain)
		}
	}
	for _, line := range []string{"gRPC connections", "gRPC calls refused", "HTTP bodies refused (503)"} {
		if !strings.Contains(body, line) {
			t.Errorf("page text has no %q (the listeners' panel)", line)
		}
	}
	t.Logf("over-limit/s of %s: %v", blockedRule, overRate)

	overTotal := func() uint64 {
		t.Helper()
		// One evaluation reads the cell: the page rebuilds its table every
		// second, so a query and a later read of the node could race.
		s, err := chromedp.Run(bctx, chromedp.Evaluate[string](`(function () {
			var td = document.querySelector('`+row+` td.over-total');
			return td ? td.textContent : "";
		})()`))
		if err != nil {
			t.Fatalf("read the over-limit total: %v", err)
		}
		n, err := strconv.ParseUint(strings.ReplaceAll(strings.TrimSpace(s), ",", ""), 10, 64)
		if err != nil {
			t.Fatalf("over-limit total %q is not a number: %v", s, err)
		}
		return n
	}
	first := overTotal()
	if err := chromedp.Do(bctx, chromedp.Sleep(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	second := overTotal()
	if first == 0 || second <= first {
		t.Errorf("over-limit total read 3s apart: got %d then %d, want a non-zero, growing count", first, second)
	}

	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if !strings.HasPrefix(string(png), "\x89PNG") {
		t.Errorf("screenshot is not a PNG")
	}
	if out := os.Getenv("SLUICE_DASHBOARD_PNG"); out != "" {
		if err := os.WriteFile(out, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	if len(requested) < 3 {
		t.Errorf("the browser reported %d requests, want the page, its assets and state.json", len(requested))
	}
	for _, raw := range requested {
		u, err := url.Parse(raw)
		if err != nil {
			t.Errorf("request to unparsable URL %q", raw)
			continue
		}
		if u.Scheme == "data" {
			continue
		}
		if h := u.Hostname(); h != "127.0.0.1" && h != "localhost" {
			t.Errorf("request left for another host: %s", raw)
		}
	}
}

func TestProxyDashboardShowsAdaptiveState(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	defer upstream.Close()
	cfgPath := filepath.Join(t.TempDir(), "adaptive.yaml")
	if err := os.WriteFile(cfgPath, []byte("maxRate: 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := app.ParseProxy([]string{"--upstream", upstream.URL, "--config", cfgPath}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	x, err := app.NewProxy(p, app.Deps{Clock: clock.NewFake(time.Unix(1_800_000_000, 0))})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Start("127.0.0.1:0", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := x.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	}()
	c := &http.Client{Timeout: 5 * time.Second}
	for range 7 { // 5 admitted, 2 answered 429
		resp, err := c.Get("http://" + x.Addr() + "/page")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	resp, err := c.Get("http://" + x.DebugAddr() + "/dashboard/state.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st server.DashboardState
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("decode state.json: %v", err)
	}
	if st.Adaptive == nil {
		t.Fatal("state.json has no adaptive part")
	}
	var page *server.AdaptiveKey
	for i, k := range st.Adaptive.Keys {
		if k.Key == "/page" {
			page = &st.Adaptive.Keys[i]
		}
	}
	curves := map[string]server.AdaptiveCurve{}
	for _, c := range st.Adaptive.Curves {
		curves[c.Rule] = c
	}
	tests := []struct {
		name      string
		got, want any
	}{
		{"the URL is tracked", page != nil, true},
		{"its admitted calls are counted", func() int64 {
			if page == nil {
				return -1
			}
			return page.Calls
		}(), int64(5)},
		{"both rules have a curve", len(curves), 2},
		{"the html curve starts at maxRate", func() float64 {
			if len(curves["html"].Points) == 0 {
				return -1
			}
			return curves["html"].Points[0][1]
		}(), 5.0},
		{"the html rule's 429s are counted", curves["html"].Denied, uint64(2)},
		{"a proxy has no store to show", st.Store == nil, true},
		{"a proxy has no descriptor config to show", st.Config == nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %v, want %v", tt.got, tt.want)
			}
		})
	}
}

func TestDashboardShowsAFailedReload(t *testing.T) {
	ta := start(t, map[string]string{"shop.yaml": "domain: shop\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"}, nil)
	state := func() server.DashboardState {
		t.Helper()
		resp, err := ta.http.Get("http://" + ta.DebugAddr() + "/dashboard/state.json")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st server.DashboardState
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatalf("decode state.json: %v", err)
		}
		if st.Config == nil {
			t.Fatal("state.json has no config part")
		}
		return st
	}
	before := state()
	if !before.Config.LastOK || before.Config.Loads != 1 || before.Config.Source != "files" || before.Config.Location != ta.dir {
		t.Fatalf("after start: got %+v, want one successful load from files in %s", before.Config.ConfigStatus, ta.dir)
	}
	if err := os.WriteFile(filepath.Join(ta.dir, "shop.yaml"), []byte("domain: shop\ndescriptors: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ta.clock.Add(time.Minute)
	if err := ta.Reload(); err == nil {
		t.Fatal("Reload of a broken file: got nil, want an error")
	}
	after := state()
	if after.Config.LastOK || !strings.Contains(after.Config.LastError, "shop.yaml") || after.Config.Failures < 1 { // the file watcher may reload it too
		t.Errorf("after a failed reload: got %+v, want it failed with an error naming shop.yaml", after.Config.ConfigStatus)
	}
	if !after.Config.LastReload.Equal(ta.clock.Now()) {
		t.Errorf("last reload at %v, want %v", after.Config.LastReload, ta.clock.Now())
	}
	if after.Config.Hash != before.Config.Hash {
		t.Errorf("hash changed from %s to %s, want the running rules kept", before.Config.Hash, after.Config.Hash)
	}
}
