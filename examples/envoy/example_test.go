// The Envoy example's tests: envoy.yaml is a valid Envoy bootstrap, every
// descriptor its routes can send is limited by config/, and the
// walk-through in docs/envoy.md gives the status codes it shows.
package envoy_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3" // the router's typed_config
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3" // the ratelimit cluster's HTTP/2 options
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/descriptors"
	"github.com/sluice-rl/sluice/internal/apptest"
	"github.com/sluice-rl/sluice/internal/yamlconf"
)

// clientIP is the client address of every simulated request.
const clientIP = "203.0.113.9"

// readYAML decodes a YAML file to plain Go values.
func readYAML(t *testing.T, path string) any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := yamlconf.Parse(path, data, yamlconf.Options{OneDocument: true})
	if err != nil {
		t.Fatal(err)
	}
	return doc.Root().Value()
}

// loadBootstrap decodes envoy.yaml strictly, unknown fields and types
// being errors, and runs its proto validation.
func loadBootstrap(t *testing.T) *bootstrapv3.Bootstrap {
	t.Helper()
	js, err := json.Marshal(readYAML(t, "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var b bootstrapv3.Bootstrap
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(js, &b); err != nil {
		t.Fatalf("envoy.yaml is not a Bootstrap: %v", err)
	}
	if err := b.ValidateAll(); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}
	return &b
}

// frontProxy is what the test needs of the front listener: its rate limit
// filter and its routes.
type frontProxy struct {
	filter *ratelimitv3.RateLimit
	routes []*routev3.Route // in match order
	vhost  *routev3.VirtualHost
}

// front finds the listener named "front" and decodes its HTTP connection
// manager and rate limit filter, validating both.
func front(t *testing.T, b *bootstrapv3.Bootstrap) frontProxy {
	t.Helper()
	for _, l := range b.GetStaticResources().GetListeners() {
		if l.GetName() != "front" {
			continue
		}
		var hcm hcmv3.HttpConnectionManager
		if err := l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
			t.Fatalf("front listener: %v", err)
		}
		if err := hcm.ValidateAll(); err != nil {
			t.Fatalf("front listener: %v", err)
		}
		var fp frontProxy
		for _, f := range hcm.GetHttpFilters() {
			if f.GetName() != "envoy.filters.http.ratelimit" {
				continue
			}
			fp.filter = &ratelimitv3.RateLimit{}
			if err := f.GetTypedConfig().UnmarshalTo(fp.filter); err != nil {
				t.Fatalf("ratelimit filter: %v", err)
			}
		}
		if fp.filter == nil {
			t.Fatal("the front listener has no envoy.filters.http.ratelimit filter")
		}
		vhs := hcm.GetRouteConfig().GetVirtualHosts()
		if len(vhs) != 1 {
			t.Fatalf("got %d virtual hosts, want 1", len(vhs))
		}
		fp.vhost, fp.routes = vhs[0], vhs[0].GetRoutes()
		return fp
	}
	t.Fatal(`envoy.yaml has no listener named "front"`)
	return frontProxy{}
}

func TestBootstrapIsValid(t *testing.T) {
	b := loadBootstrap(t)
	fp := front(t, b)
	if got, want := fp.filter.GetDomain(), "front_proxy"; got != want {
		t.Errorf("got domain %q, want %q", got, want)
	}
	rls := fp.filter.GetRateLimitService()
	if got := rls.GetTransportApiVersion(); got != corev3.ApiVersion_V3 {
		t.Errorf("got transport_api_version %s, want V3", got)
	}
	cluster := rls.GetGrpcService().GetEnvoyGrpc().GetClusterName()
	found := false
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() != cluster {
			continue
		}
		found = true
		if _, ok := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]; !ok {
			t.Errorf("cluster %q: no HttpProtocolOptions; gRPC needs HTTP/2", cluster)
		}
		addr := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
		if got := addr.GetAddress() + ":" + strconv.Itoa(int(addr.GetPortValue())); got != "sluice:8081" {
			t.Errorf("cluster %q: got address %s, want sluice:8081 (compose.yaml's service)", cluster, got)
		}
	}
	if !found {
		t.Errorf("the ratelimit filter names cluster %q, which envoy.yaml does not define", cluster)
	}
}

// option is one thing an action may contribute: an entry, or nothing
// (absent), which drops the whole descriptor as Envoy does.
type option struct {
	entry  descriptors.Entry
	absent bool
}

// request is one simulated HTTP request to the front proxy.
type request struct {
	path    string
	headers map[string]string // lowercase names
}

// actionOptions lists what an action can produce. samples gives the
// request header values to try for a request_headers action's key, on top
// of one that no rule names. With
// req non-nil it returns the one thing that request produces.
func actionOptions(t *testing.T, a *routev3.RateLimit_Action, samples map[string][]string, req *request) []option {
	t.Helper()
	orDefault := func(s, d string) string {
		if s == "" {
			return d
		}
		return s
	}
	switch a := a.GetActionSpecifier().(type) {
	case *routev3.RateLimit_Action_GenericKey_:
		return []option{{entry: descriptors.Entry{Key: orDefault(a.GenericKey.GetDescriptorKey(), "generic_key"), Value: a.GenericKey.GetDescriptorValue()}}}
	case *routev3.RateLimit_Action_RemoteAddress_:
		return []option{{entry: descriptors.Entry{Key: "remote_address", Value: clientIP}}}
	case *routev3.RateLimit_Action_RequestHeaders_:
		rh := a.RequestHeaders
		if rh.GetSkipIfAbsent() {
			t.Fatalf("request_headers %s: skip_if_absent is not simulated", rh.GetHeaderName())
		}
		key := rh.GetDescriptorKey()
		if req != nil {
			v, ok := req.headers[strings.ToLower(rh.GetHeaderName())]
			if !ok {
				return []option{{absent: true}}
			}
			return []option{{entry: descriptors.Entry{Key: key, Value: v}}}
		}
		opts := []option{{absent: true}, {entry: descriptors.Entry{Key: key, Value: "some-value-no-rule-names"}}}
		for _, v := range samples[key] {
			opts = append(opts, option{entry: descriptors.Entry{Key: key, Value: v}})
		}
		return opts
	case *routev3.RateLimit_Action_HeaderValueMatch_:
		hv := a.HeaderValueMatch
		e := option{entry: descriptors.Entry{Key: orDefault(hv.GetDescriptorKey(), "header_match"), Value: hv.GetDescriptorValue()}}
		if req == nil {
			return []option{e, {absent: true}}
		}
		matched := true
		for _, h := range hv.GetHeaders() {
			v, ok := req.headers[strings.ToLower(h.GetName())]
			sm := h.GetStringMatch()
			if sm == nil || sm.GetContains() == "" {
				t.Fatalf("header_value_match %s: only string_match contains is simulated", h.GetName())
			}
			if sm.GetIgnoreCase() {
				v = strings.ToLower(v)
			}
			matched = matched && ok && strings.Contains(v, strings.ToLower(sm.GetContains()))
		}
		if matched != (hv.GetExpectMatch() == nil || hv.GetExpectMatch().GetValue()) {
			return []option{{absent: true}}
		}
		return []option{e}
	}
	t.Fatalf("action %T is not simulated: extend the test with it", a.GetActionSpecifier())
	return nil
}

// produce lists the descriptors a rate_limits entry can produce: every
// combination of its actions' options with none absent.
func produce(t *testing.T, rl *routev3.RateLimit, samples map[string][]string, req *request) [][]descriptors.Entry {
	t.Helper()
	out := [][]descriptors.Entry{nil}
	for _, a := range rl.GetActions() {
		var next [][]descriptors.Entry
		for _, o := range actionOptions(t, a, samples, req) {
			if o.absent {
				continue
			}
			for _, prefix := range out {
				next = append(next, append(append([]descriptors.Entry(nil), prefix...), o.entry))
			}
		}
		out = next
	}
	return out
}

// rateLimitsOf is the rate_limits Envoy applies for a route: the route's
// own, else the virtual host's (the filter's default vh_rate_limits).
func rateLimitsOf(fp frontProxy, r *routev3.Route) []*routev3.RateLimit {
	if rls := r.GetRoute().GetRateLimits(); len(rls) > 0 {
		return rls
	}
	return fp.vhost.GetRateLimits()
}

func TestEveryDescriptorTheRoutesProduceIsLimited(t *testing.T) {
	fp := front(t, loadBootstrap(t))
	cfg, err := descriptors.Load("config") // what sluice check --config does
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	domain := fp.filter.GetDomain()
	if cfg.Domain(domain) == nil {
		t.Fatalf("config/ has no domain %q, the ratelimit filter's; it has %v", domain, cfg.Domains())
	}
	// Header values to try, besides one no rule names: every exact value
	// config/ names for the key.
	samples := map[string][]string{}
	for _, r := range cfg.Rules() {
		if r.Value != "" && r.Pattern == "" {
			samples[r.Key] = append(samples[r.Key], r.Value)
		}
	}
	seen := 0
	for _, route := range fp.routes {
		for _, rl := range rateLimitsOf(fp, route) {
			for _, entries := range produce(t, rl, samples, nil) {
				seen++
				if cfg.Match(domain, entries) == nil {
					t.Errorf("route %s produces %v, which no rule of config/ limits", route.GetMatch().GetPrefix(), entries)
				}
			}
		}
	}
	if seen < 5 {
		t.Errorf("the routes produce %d descriptors, want at least 5", seen)
	}
}

// walkStep is one line of the walk-through: a curl command run n times
// and the status codes it prints.
type walkStep struct {
	cmd  string
	req  request
	want []int
}

var (
	loopRe   = regexp.MustCompile(`^for i in \$\(seq (\d+)\); do curl (.*?)\s*localhost:10000(\S*); done`)
	headerRe = regexp.MustCompile(`(?:-H|-A) '([^']*)'`)
)

// walkThrough reads the walk-through's loops from docs/envoy.md: a line
// `for i in $(seq N); do curl ... localhost:10000/PATH; done; echo`
// followed by a line `# CODE CODE ...`.
func walkThrough(t *testing.T) []walkStep {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "envoy.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var steps []walkStep
	for i, line := range lines {
		m := loopRe.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		st := walkStep{cmd: line, req: request{path: m[3], headers: map[string]string{}}}
		for _, h := range headerRe.FindAllStringSubmatch(m[2], -1) {
			if strings.Contains(m[2], "-A '"+h[1]+"'") {
				st.req.headers["user-agent"] = h[1]
				continue
			}
			name, value, ok := strings.Cut(h[1], ":")
			if !ok {
				t.Fatalf("docs/envoy.md:%d: header %q has no colon", i+1, h[1])
			}
			st.req.headers[strings.ToLower(strings.TrimSpace(name))] = strings.TrimSpace(value)
		}
		if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "# ") {
			t.Fatalf("docs/envoy.md:%d: the loop is not followed by a # line of status codes", i+1)
		}
		for _, f := range strings.Fields(strings.TrimPrefix(lines[i+1], "# ")) {
			code, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("docs/envoy.md:%d: %q is not a status code", i+2, f)
			}
			st.want = append(st.want, code)
		}
		if len(st.want) != n {
			t.Fatalf("docs/envoy.md:%d: %d runs but %d status codes", i+1, n, len(st.want))
		}
		steps = append(steps, st)
	}
	if len(steps) < 3 {
		t.Fatalf("docs/envoy.md: found %d walk-through loops, want at least 3", len(steps))
	}
	return steps
}

// TestWalkThrough plays the walk-through of docs/envoy.md: each request
// goes to the route Envoy would pick, its descriptors go to a Sluice
// serving config/ (on the memory store, with a clock that stands still),
// and OVER_LIMIT is the 429 Envoy would answer.
func TestWalkThrough(t *testing.T) {
	fp := front(t, loadBootstrap(t))
	o := apptest.Options()
	o.ConfigPath = "config"
	a := apptest.Run(t, o, clock.NewFake(time.Unix(1_800_000_000, 0)))
	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)

	status := func(req request) int {
		var route *routev3.Route
		for _, r := range fp.routes {
			if strings.HasPrefix(req.path, r.GetMatch().GetPrefix()) {
				route = r
				break
			}
		}
		if route == nil {
			t.Fatalf("no route for %s", req.path)
		}
		call := &rlsv3.RateLimitRequest{Domain: fp.filter.GetDomain()}
		for _, rl := range rateLimitsOf(fp, route) {
			for _, entries := range produce(t, rl, nil, &req) {
				d := &rlcommon.RateLimitDescriptor{}
				for _, e := range entries {
					d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
				}
				call.Descriptors = append(call.Descriptors, d)
			}
		}
		if len(call.Descriptors) == 0 {
			return 200 // Envoy makes no call
		}
		resp, err := client.ShouldRateLimit(context.Background(), call)
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			return 429
		}
		return 200
	}
	for _, st := range walkThrough(t) {
		var got []int
		for range st.want {
			got = append(got, status(st.req))
		}
		if !equal(got, st.want) {
			t.Errorf("%s\ngot %v, want %v", st.cmd, got, st.want)
		}
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestComposeMountsTheExample checks compose.yaml against the files it
// mounts and the environment Sluice reads.
func TestComposeMountsTheExample(t *testing.T) {
	compose, ok := readYAML(t, "compose.yaml").(map[string]any)
	if !ok {
		t.Fatal("compose.yaml is not a mapping")
	}
	services, _ := compose["services"].(map[string]any)
	for _, name := range []string{"envoy", "sluice", "redis"} {
		if _, ok := services[name]; !ok {
			t.Errorf("compose.yaml: no service %q", name)
		}
	}
	sluice, _ := services["sluice"].(map[string]any)
	env, _ := sluice["environment"].(map[string]any)
	for k, want := range map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379", "USE_STATSD": "false"} {
		if got := env[k]; got != want {
			t.Errorf("sluice environment %s: got %v, want %q", k, got, want)
		}
	}
	configDir := filepath.Join(env["RUNTIME_ROOT"].(string), env["RUNTIME_SUBDIRECTORY"].(string), "config")
	mounted := map[string]string{} // container path → host path
	for _, svc := range []string{"sluice", "envoy"} {
		s, _ := services[svc].(map[string]any)
		vols, _ := s["volumes"].([]any)
		for _, v := range vols {
			parts := strings.Split(v.(string), ":")
			mounted[parts[1]] = parts[0]
			if _, err := os.Stat(parts[0]); err != nil {
				t.Errorf("compose.yaml %s mounts %s: %v", svc, parts[0], err)
			}
		}
	}
	if got := mounted[configDir]; got != "./config" {
		t.Errorf("compose.yaml: got %q mounted at RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config (%s), want ./config", got, configDir)
	}
	if got := mounted["/etc/envoy/envoy.yaml"]; got != "./envoy.yaml" {
		t.Errorf("compose.yaml: got %q mounted at /etc/envoy/envoy.yaml, want ./envoy.yaml", got)
	}
}
