package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/server"
	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/memory"
)

// start is when every test's fake clock begins.
var start = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// seedLimits loads the Boulder README's defaults and overrides (plus a
// NewRegistrationsPerIPv6Range default of 10 per second) from testdata.
func seedLimits(t testing.TB) *limits.Set {
	t.Helper()
	set, err := limits.Load("testdata/limits_defaults.yaml", "testdata/limits_overrides.yaml")
	if err != nil {
		t.Fatalf("load limits: %v", err)
	}
	return set
}

// newKV returns a KV over s with the seed's limits and a fake clock.
func newKV(t testing.TB, s store.Store) (*server.KV, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(start)
	set := seedLimits(t)
	kv := server.NewKV(server.KVOptions{
		Limiter: limiter.New(s, clk),
		Limits:  func() *limits.Set { return set },
	})
	return kv, clk
}

// txn is one transaction of a call, as either transport sends it.
type txn struct {
	name, id string
	cost     *int64 // nil: left out
	kind     string // HTTP spelling; "" is the default
}

// call is one API call.
type call struct {
	method string // check, spend, refund, reset or batch
	txn           // for the single-transaction methods
	batch  []txn
}

// decision is a decision as either transport reports it.
type decision struct {
	Allowed          bool
	Remaining        int64
	RetryIn, ResetIn time.Duration
	Burst, Count     int64
	Period           time.Duration
	Source           string // default, override or none
	Bucket           string
}

// answer is what a call got back.
type answer struct {
	code     codes.Code
	msg      string // the error message, when code is not OK
	decision decision
	results  []decision
}

// transport sends calls to a KV over the network.
type transport interface {
	do(t *testing.T, c call) answer
}

var transports = []struct {
	name  string
	start func(t *testing.T, kv *server.KV) transport
}{
	{"over gRPC", startGRPC},
	{"over HTTP", startHTTP},
}

// grpcTransport talks to a real gRPC server on a loopback port.
type grpcTransport struct{ client sluicev1.LimitsClient }

func startGRPC(t *testing.T, kv *server.KV) transport {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := grpc.NewServer()
	sluicev1.RegisterLimitsServer(srv, kv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return grpcTransport{client: sluicev1.NewLimitsClient(conn)}
}

var grpcKinds = map[string]sluicev1.Transaction_Kind{
	"":                sluicev1.Transaction_CHECK_AND_SPEND,
	"check_and_spend": sluicev1.Transaction_CHECK_AND_SPEND,
	"check_only":      sluicev1.Transaction_CHECK_ONLY,
	"spend_only":      sluicev1.Transaction_SPEND_ONLY,
}

func (g grpcTransport) do(t *testing.T, c call) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := &sluicev1.Request{Name: c.name, Id: c.id, Cost: c.cost}
	var (
		d    *sluicev1.Decision
		resp *sluicev1.BatchResponse
		err  error
	)
	switch c.method {
	case "check":
		d, err = g.client.Check(ctx, req)
	case "spend":
		d, err = g.client.Spend(ctx, req)
	case "refund":
		d, err = g.client.Refund(ctx, req)
	case "reset":
		d, err = g.client.Reset(ctx, req)
	case "batch":
		in := &sluicev1.BatchRequest{}
		for _, x := range c.batch {
			kind, ok := grpcKinds[x.kind]
			if !ok {
				t.Fatalf("no gRPC kind for %q", x.kind)
			}
			in.Transactions = append(in.Transactions, &sluicev1.Transaction{Name: x.name, Id: x.id, Cost: x.cost, Kind: kind})
		}
		resp, err = g.client.Batch(ctx, in)
		d = resp.GetDecision()
	default:
		t.Fatalf("unknown method %q", c.method)
	}
	if err != nil {
		st := status.Convert(err)
		return answer{code: st.Code(), msg: st.Message()}
	}
	a := answer{code: codes.OK, decision: fromProto(d)}
	for _, r := range resp.GetResults() {
		a.results = append(a.results, fromProto(r))
	}
	return a
}

func fromProto(d *sluicev1.Decision) decision {
	return decision{
		Allowed:   d.GetAllowed(),
		Remaining: d.GetRemaining(),
		RetryIn:   d.GetRetryIn().AsDuration(),
		ResetIn:   d.GetResetIn().AsDuration(),
		Burst:     d.GetLimit().GetBurst(),
		Count:     d.GetLimit().GetCount(),
		Period:    d.GetLimit().GetPeriod().AsDuration(),
		Source:    strings.ToLower(d.GetLimit().GetSource().String()),
		Bucket:    d.GetBucket(),
	}
}

// httpTransport talks to KVHTTPHandler on an httptest server.
type httpTransport struct{ url string }

func startHTTP(t *testing.T, kv *server.KV) transport {
	t.Helper()
	srv := httptest.NewServer(server.KVHTTPHandler(kv))
	t.Cleanup(srv.Close)
	return httpTransport{url: srv.URL}
}

// httpDecision is a decision as JSON.
type httpDecision struct {
	Allowed   bool   `json:"allowed"`
	Remaining int64  `json:"remaining"`
	RetryIn   string `json:"retry_in"`
	ResetIn   string `json:"reset_in"`
	Limit     struct {
		Burst  int64  `json:"burst"`
		Count  int64  `json:"count"`
		Period string `json:"period"`
		Source string `json:"source"`
	} `json:"limit"`
	Bucket string `json:"bucket"`
}

func (h httpDecision) decision(t *testing.T) decision {
	t.Helper()
	dur := func(s string) time.Duration {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("duration %q: %v", s, err)
		}
		return d
	}
	return decision{
		Allowed: h.Allowed, Remaining: h.Remaining, RetryIn: dur(h.RetryIn), ResetIn: dur(h.ResetIn),
		Burst: h.Limit.Burst, Count: h.Limit.Count, Period: dur(h.Limit.Period), Source: h.Limit.Source, Bucket: h.Bucket,
	}
}

func jsonTxn(x txn, withKind bool) map[string]any {
	m := map[string]any{"name": x.name, "id": x.id}
	if x.cost != nil {
		m["cost"] = *x.cost
	}
	if withKind && x.kind != "" {
		m["kind"] = x.kind
	}
	return m
}

func (h httpTransport) do(t *testing.T, c call) answer {
	t.Helper()
	var body any = jsonTxn(c.txn, false)
	if c.method == "batch" {
		list := make([]map[string]any, len(c.batch))
		for i, x := range c.batch {
			list[i] = jsonTxn(x, true)
		}
		body = map[string]any{"transactions": list}
	}
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	status, header, out := post(t, h.url+"/v1/"+c.method, string(data))
	if ct := header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("POST /v1/%s: got Content-Type %q, want application/json", c.method, ct)
	}
	if status != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(out, &e); err != nil || e.Error == "" {
			t.Fatalf("POST /v1/%s: status %d with body %q, want {\"error\": ...}", c.method, status, out)
		}
		return answer{code: httpCode(t, status), msg: e.Error}
	}
	var resp struct {
		httpDecision
		Results []httpDecision `json:"results"`
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&resp); err != nil {
		t.Fatalf("POST /v1/%s: decode %q: %v", c.method, out, err)
	}
	a := answer{code: codes.OK, decision: resp.decision(t)}
	for _, r := range resp.Results {
		a.results = append(a.results, r.decision(t))
	}
	checkRetryAfter(t, c.method, header, a.decision)
	return a
}

// checkRetryAfter checks that a denied check, spend or batch carries a
// Retry-After of its retry_in in whole seconds, rounded up, at least 1, and
// that an allowed one carries none.
func checkRetryAfter(t *testing.T, method string, h http.Header, d decision) {
	t.Helper()
	got := h.Get("Retry-After")
	want := ""
	if !d.Allowed && (method == "check" || method == "spend" || method == "batch") {
		want = strconv.FormatInt(max(int64(math.Ceil(d.RetryIn.Seconds())), 1), 10)
	}
	if got != want {
		t.Errorf("POST /v1/%s answered allowed=%v retry_in=%s: got Retry-After %q, want %q", method, d.Allowed, d.RetryIn, got, want)
	}
}

func httpCode(t *testing.T, status int) codes.Code {
	t.Helper()
	switch status {
	case http.StatusBadRequest:
		return codes.InvalidArgument
	case http.StatusServiceUnavailable:
		return codes.Unavailable
	}
	t.Fatalf("unexpected HTTP status %d", status)
	return codes.Unknown
}

func post(t *testing.T, url, body string) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	return resp.StatusCode, resp.Header, out
}

func cost(n int64) *int64 { return &n }

// step is one call of a scenario and what it must answer. The decision's
// fields are all checked; Source and Bucket only when not empty.
type step struct {
	advance time.Duration // move the fake clock first
	call
	want answer
}

// allowed and denied build expected decisions.
func allowed(remaining int64, retryIn, resetIn time.Duration) answer {
	return answer{code: codes.OK, decision: decision{Allowed: true, Remaining: remaining, RetryIn: retryIn, ResetIn: resetIn}}
}

func denied(remaining int64, retryIn, resetIn time.Duration) answer {
	return answer{code: codes.OK, decision: decision{Remaining: remaining, RetryIn: retryIn, ResetIn: resetIn}}
}

func invalid(msg string) answer { return answer{code: codes.InvalidArgument, msg: msg} }

// with sets the limit and bucket an answer must report.
func (a answer) with(source string, burst, count int64, period time.Duration, bucket string) answer {
	a.decision.Source, a.decision.Burst, a.decision.Count, a.decision.Period, a.decision.Bucket = source, burst, count, period, bucket
	return a
}

// spends returns n spends of cost 1 on a fresh, full bucket of burst tokens
// filling at one token per every, all at one instant: each allowed, the
// last with nothing left.
func spends(name, id string, n, burst int64, every time.Duration) []step {
	var steps []step
	for i := int64(1); i <= n; i++ {
		var retry time.Duration
		if i == burst {
			retry = every // the next token comes in one emission interval
		}
		steps = append(steps, step{call: call{method: "spend", txn: txn{name: name, id: id, cost: cost(1)}},
			want: allowed(burst-i, retry, time.Duration(i)*every)})
	}
	return steps
}

func concat(parts ...[]step) []step {
	var all []step
	for _, p := range parts {
		all = append(all, p...)
	}
	return all
}

const (
	perIP   = "NewRegistrationsPerIPAddress"
	perV6   = "NewRegistrationsPerIPv6Range"
	orders  = "NewOrdersPerAccount"
	perCert = "CertificatesPerDomain"
	ms      = time.Millisecond
)

func one(method, name, id string, c *int64) call {
	return call{method: method, txn: txn{name: name, id: id, cost: c}}
}

var scenarios = []struct {
	name  string
	steps []step
}{
	{
		name: "twenty spends for one IP are allowed and the twenty-first is denied for 50ms",
		steps: concat(
			[]step{{call: one("spend", perIP, "10.0.0.1", cost(1)),
				want: allowed(19, 0, 50*ms).with("default", 20, 20, time.Second, "1:10.0.0.1")}},
			spends(perIP, "10.0.0.1", 20, 20, 50*ms)[1:], // continues from the first
			[]step{
				{call: one("spend", perIP, "10.0.0.1", cost(1)), want: denied(0, 50*ms, time.Second).with("default", 20, 20, time.Second, "1:10.0.0.1")},
				// Denied requests spend nothing: 50ms later exactly one token is back.
				{advance: 50 * ms, call: one("spend", perIP, "10.0.0.1", cost(1)), want: allowed(0, 50*ms, time.Second)},
				{call: one("spend", perIP, "10.0.0.1", cost(1)), want: denied(0, 50*ms, time.Second)},
				// Another address has a bucket of its own.
				{call: one("spend", perIP, "10.0.0.3", cost(1)), want: allowed(19, 0, 50*ms).with("default", 20, 20, time.Second, "1:10.0.0.3")},
			},
		),
	},
	{
		name: "an absent cost spends one token",
		steps: []step{
			{call: one("spend", perIP, "10.0.0.1", nil), want: allowed(19, 0, 50*ms)},
			{call: one("check", perIP, "10.0.0.1", nil), want: allowed(18, 0, 100*ms)},
		},
	},
	{
		name: "an overridden address gets its own limit",
		steps: concat(
			[]step{{call: one("spend", perIP, "10.0.0.2", cost(1)),
				want: allowed(19, 0, 25*ms).with("override", 20, 40, time.Second, "1:10.0.0.2")}},
			spends(perIP, "10.0.0.2", 20, 20, 25*ms)[1:],
			[]step{
				{call: one("spend", perIP, "10.0.0.2", cost(1)), want: denied(0, 25*ms, 500*ms).with("override", 20, 40, time.Second, "1:10.0.0.2")},
				{call: one("spend", orders, "12345678", cost(1)), want: allowed(299, 0, 18*time.Second).with("override", 300, 600, 180*time.Minute, "3:12345678")},
				{call: one("spend", orders, "11111111", cost(1)), want: allowed(299, 0, 36*time.Second).with("default", 300, 300, 180*time.Minute, "3:11111111")},
			},
		),
	},
	{
		name: "a peek with cost 0 spends nothing",
		steps: []step{
			{call: one("check", perIP, "10.0.0.1", cost(0)), want: allowed(20, 0, 0)},
			{call: one("spend", perIP, "10.0.0.1", cost(0)), want: allowed(20, 0, 0)},
			{call: one("spend", perIP, "10.0.0.1", cost(5)), want: allowed(15, 0, 250*ms)},
			{call: one("check", perIP, "10.0.0.1", cost(0)), want: allowed(15, 0, 250*ms)},
			// A check answers as the spend would: all 15 would fit...
			{call: one("check", perIP, "10.0.0.1", cost(15)), want: allowed(0, 750*ms, time.Second)},
			// ...16 would not, and the check spent nothing.
			{call: one("check", perIP, "10.0.0.1", cost(16)), want: denied(15, 50*ms, 250*ms)},
			{call: one("spend", perIP, "10.0.0.1", cost(15)), want: allowed(0, 750*ms, time.Second)},
			{call: one("check", perIP, "10.0.0.1", cost(0)), want: allowed(0, 0, time.Second)},
			{call: one("check", perIP, "10.0.0.1", cost(1)), want: denied(0, 50*ms, time.Second)},
		},
	},
	{
		name: "a refund gives tokens back but never past full",
		steps: []step{
			// Nothing to give back to a bucket never used.
			{call: one("refund", perIP, "10.0.0.1", cost(1)), want: denied(20, 0, 0).with("default", 20, 20, time.Second, "1:10.0.0.1")},
			{call: one("spend", perIP, "10.0.0.1", cost(5)), want: allowed(15, 0, 250*ms)},
			{call: one("refund", perIP, "10.0.0.1", cost(2)), want: allowed(17, 0, 150*ms)},
			{call: one("refund", perIP, "10.0.0.1", cost(10)), want: allowed(20, 0, 0)},
			{call: one("refund", perIP, "10.0.0.1", cost(1)), want: denied(20, 0, 0)},
			{call: one("spend", perIP, "10.0.0.1", cost(20)), want: allowed(0, time.Second, time.Second)},
			{call: one("refund", perIP, "10.0.0.1", cost(1)), want: allowed(1, 0, 950*ms)},
			{call: one("spend", perIP, "10.0.0.1", cost(1)), want: allowed(0, 50*ms, time.Second)},
		},
	},
	{
		name: "a reset makes the bucket full again",
		steps: []step{
			{call: one("spend", perIP, "10.0.0.1", cost(20)), want: allowed(0, time.Second, time.Second)},
			{call: one("spend", perIP, "10.0.0.1", cost(1)), want: denied(0, 50*ms, time.Second)},
			{call: one("reset", perIP, "10.0.0.1", nil), want: allowed(20, 0, 0).with("default", 20, 20, time.Second, "1:10.0.0.1")},
			{call: one("spend", perIP, "10.0.0.1", cost(1)), want: allowed(19, 0, 50*ms)},
			// A reset ignores its cost, even one that would be invalid.
			{call: one("reset", perIP, "10.0.0.1", cost(-1)), want: allowed(20, 0, 0)},
		},
	},
	{
		name: "a batch with one denied transaction spends nothing",
		steps: []step{
			{call: one("spend", perIP, "10.0.0.1", cost(20)), want: allowed(0, time.Second, time.Second)},
			{call: call{method: "batch", batch: []txn{{name: perIP, id: "10.0.0.1", cost: cost(1)}, {name: orders, id: "12345678", cost: cost(1)}}},
				want: answer{code: codes.OK,
					decision: decision{Allowed: false, Remaining: 0, RetryIn: 50 * ms, ResetIn: time.Second, Source: "default", Burst: 20, Count: 20, Period: time.Second, Bucket: "1:10.0.0.1"},
					results: []decision{
						{Allowed: false, Remaining: 0, RetryIn: 50 * ms, ResetIn: time.Second, Source: "default", Burst: 20, Count: 20, Period: time.Second, Bucket: "1:10.0.0.1"},
						{Allowed: true, Remaining: 299, ResetIn: 18 * time.Second, Source: "override", Burst: 300, Count: 600, Period: 180 * time.Minute, Bucket: "3:12345678"},
					}}},
			{call: one("check", orders, "12345678", cost(0)), want: allowed(300, 0, 0)},
		},
	},
	{
		name: "a batch answers the strictest decision and spends only when allowed",
		steps: []step{
			{call: call{method: "batch", batch: []txn{{name: orders, id: "12345678", cost: cost(1)}, {name: perIP, id: "10.0.0.1", cost: cost(5), kind: "check_and_spend"}}},
				want: answer{code: codes.OK,
					decision: decision{Allowed: true, Remaining: 15, ResetIn: 250 * ms, Source: "default", Burst: 20, Count: 20, Period: time.Second, Bucket: "1:10.0.0.1"},
					results: []decision{
						{Allowed: true, Remaining: 299, ResetIn: 18 * time.Second, Source: "override", Burst: 300, Count: 600, Period: 180 * time.Minute, Bucket: "3:12345678"},
						{Allowed: true, Remaining: 15, ResetIn: 250 * ms, Source: "default", Burst: 20, Count: 20, Period: time.Second, Bucket: "1:10.0.0.1"},
					}}},
			{call: one("check", orders, "12345678", cost(0)), want: allowed(299, 0, 18*time.Second)},
			{call: one("check", perIP, "10.0.0.1", cost(0)), want: allowed(15, 0, 250*ms)},
		},
	},
	{
		name: "check-only transactions decide but never spend, spend-only ones spend but never decide",
		steps: []step{
			{call: one("spend", perIP, "10.0.0.1", cost(20)), want: allowed(0, time.Second, time.Second)},
			// The empty bucket is only spent from: the batch is allowed and
			// its decision is the account's.
			{call: call{method: "batch", batch: []txn{{name: perIP, id: "10.0.0.1", cost: cost(1), kind: "spend_only"}, {name: orders, id: "12345678", cost: cost(1)}}},
				want: answer{code: codes.OK,
					decision: decision{Allowed: true, Remaining: 299, ResetIn: 18 * time.Second, Source: "override", Burst: 300, Count: 600, Period: 180 * time.Minute, Bucket: "3:12345678"},
					results: []decision{
						{Allowed: false, Remaining: 0, RetryIn: 50 * ms, ResetIn: time.Second, Source: "default", Burst: 20, Count: 20, Period: time.Second, Bucket: "1:10.0.0.1"},
						{Allowed: true, Remaining: 299, ResetIn: 18 * time.Second, Source: "override", Burst: 300, Count: 600, Period: 180 * time.Minute, Bucket: "3:12345678"},
					}}},
			{call: call{method: "batch", batch: []txn{{name: perIP, id: "10.0.0.9", cost: cost(2), kind: "check_only"}, {name: orders, id: "12345678", cost: cost(1)}}},
				want: answer{code: codes.OK,
					decision: decision{Allowed: true, Remaining: 18, ResetIn: 100 * ms, Source: "default", Burst: 20, Count: 20, Period: time.Second, Bucket: "1:10.0.0.9"},
					results: []decision{
						{Allowed: true, Remaining: 18, ResetIn: 100 * ms, Source: "default", Burst: 20, Count: 20, Period: time.Second, Bucket: "1:10.0.0.9"},
						{Allowed: true, Remaining: 298, ResetIn: 36 * time.Second, Source: "override", Burst: 300, Count: 600, Period: 180 * time.Minute, Bucket: "3:12345678"},
					}}},
			{call: one("check", perIP, "10.0.0.9", cost(0)), want: allowed(20, 0, 0)},
			{call: call{method: "batch", batch: []txn{{name: perIP, id: "10.0.0.1", cost: cost(1), kind: "check_only"}}},
				want: answer{code: codes.OK,
					decision: decision{Allowed: false, Remaining: 0, RetryIn: 50 * ms, ResetIn: time.Second, Source: "default", Burst: 20, Count: 20, Period: time.Second, Bucket: "1:10.0.0.1"},
					results: []decision{
						{Allowed: false, Remaining: 0, RetryIn: 50 * ms, ResetIn: time.Second, Source: "default", Burst: 20, Count: 20, Period: time.Second, Bucket: "1:10.0.0.1"},
					}}},
		},
	},
	{
		name: "an IPv6 address is limited together with the rest of its /48",
		steps: []step{
			{call: one("spend", perV6, "2001:db8:1:2::1", cost(10)), want: allowed(0, time.Second, time.Second).with("default", 10, 10, time.Second, "2:2001:db8:1::/48")},
			{call: one("spend", perV6, "2001:db8:1:ffff::9", cost(1)), want: denied(0, 100*ms, time.Second).with("default", 10, 10, time.Second, "2:2001:db8:1::/48")},
			{call: one("spend", perV6, "2001:0db8:0001::", cost(1)), want: denied(0, 100*ms, time.Second)},
			{call: one("spend", perV6, "2001:db8:2::1", cost(1)), want: allowed(9, 0, 100*ms).with("default", 10, 10, time.Second, "2:2001:db8:2::/48")},
			// The per-address limit counts each address on its own.
			{call: one("spend", perIP, "2001:db8:1:2::1", cost(1)), want: allowed(19, 0, 50*ms).with("default", 20, 20, time.Second, "1:2001:db8:1:2::1")},
		},
	},
	{
		name: "a name with neither default nor override is allowed without a check",
		steps: []step{
			{call: one("spend", perCert, "www.example.com", cost(1000)),
				want: allowed(math.MaxInt64, 0, 0).with("none", 0, 0, 0, "5:example.com")},
			{call: call{method: "batch", batch: []txn{{name: perCert, id: "example.com", cost: cost(1)}}},
				want: answer{code: codes.OK,
					decision: decision{Allowed: true, Remaining: math.MaxInt64, Source: "none"},
					results:  []decision{{Allowed: true, Remaining: math.MaxInt64, Source: "none", Bucket: "5:example.com"}}}},
		},
	},
	{
		name: "each invalid request is refused with a message naming the problem, and spends nothing",
		steps: []step{
			{call: one("spend", "NewRegistrationPerIP", "10.0.0.1", cost(1)), want: invalid(`unknown limit name "NewRegistrationPerIP"`)},
			{call: one("spend", "", "10.0.0.1", cost(1)), want: invalid("missing limit name")},
			{call: one("spend", perIP, "", cost(1)), want: invalid(`invalid id "" for NewRegistrationsPerIPAddress: must not be empty`)},
			{call: one("spend", perIP, "10.0.0", cost(1)), want: invalid(`invalid id "10.0.0" for NewRegistrationsPerIPAddress`)},
			{call: one("check", perV6, "10.0.0.1", cost(1)), want: invalid(`invalid id "10.0.0.1" for NewRegistrationsPerIPv6Range: must be an IPv6 address, not IPv4`)},
			{call: one("spend", orders, "acct-1", cost(1)), want: invalid(`invalid id "acct-1" for NewOrdersPerAccount`)},
			{call: one("spend", perIP, "10.0.0.1", cost(-1)), want: invalid("invalid cost -1 for NewRegistrationsPerIPAddress, must be >= 0")},
			{call: one("check", perIP, "10.0.0.1", cost(21)), want: invalid(`invalid cost 21 for NewRegistrationsPerIPAddress "10.0.0.1", must be at most the burst 20`)},
			{call: one("refund", perIP, "10.0.0.1", cost(21)), want: invalid(`invalid cost 21 for NewRegistrationsPerIPAddress "10.0.0.1", must be at most the burst 20`)},
			{call: one("spend", orders, "12345678", cost(301)), want: invalid(`invalid cost 301 for NewOrdersPerAccount "12345678", must be at most the burst 300`)},
			{call: one("reset", "Nonsense", "1", nil), want: invalid(`unknown limit name "Nonsense"`)},
			{call: call{method: "batch"}, want: invalid("empty batch, want 1 to 100 transactions")},
			{call: call{method: "batch", batch: manyTxns(101)}, want: invalid("batch has 101 transactions, at most 100 allowed")},
			{call: call{method: "batch", batch: []txn{{name: perIP, id: "10.0.0.1", cost: cost(1)}, {name: orders, id: "x", cost: cost(1)}}},
				want: invalid(`transaction 1: invalid id "x" for NewOrdersPerAccount`)},
			{call: call{method: "batch", batch: []txn{{name: perIP, id: "10.0.0.1", cost: cost(1)}, {name: perIP, id: "10.0.0.2", cost: cost(30)}}},
				want: invalid(`transaction 1: invalid cost 30 for NewRegistrationsPerIPAddress "10.0.0.2", must be at most the burst 20`)},
			{call: call{method: "batch", batch: []txn{{name: perV6, id: "2001:db8:1::1", cost: cost(1)}, {name: perIP, id: "10.0.0.1", cost: cost(1)}, {name: perV6, id: "2001:db8:1:2::2", cost: cost(1)}}},
				want: invalid(`duplicate bucket: transactions 0 and 2 (NewRegistrationsPerIPv6Range "2001:db8:1::1" and "2001:db8:1:2::2") are both for bucket 2:2001:db8:1::/48`)},
			{call: call{method: "batch", batch: []txn{{name: perIP, id: "10.0.0.1", cost: cost(1)}, {name: perIP, id: "10.0.0.1", cost: cost(1), kind: "check_only"}}},
				want: invalid(`duplicate bucket: transactions 0 and 1`)},
			// None of the above spent anything.
			{call: one("check", perIP, "10.0.0.1", cost(0)), want: allowed(20, 0, 0)},
			{call: one("check", perV6, "2001:db8:1::1", cost(0)), want: allowed(10, 0, 0)},
		},
	},
}

// manyTxns returns n transactions on n different buckets.
func manyTxns(n int) []txn {
	list := make([]txn, n)
	for i := range list {
		list[i] = txn{name: perIP, id: fmt.Sprintf("10.1.%d.%d", i/250, i%250+1), cost: cost(1)}
	}
	return list
}

func TestKVScenarios(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			for _, sc := range scenarios {
				t.Run(sc.name, func(t *testing.T) {
					t.Parallel()
					kv, clk := newKV(t, memory.New(memory.Options{}))
					api := tr.start(t, kv)
					for i, st := range sc.steps {
						clk.Add(st.advance)
						got := api.do(t, st.call)
						checkAnswer(t, fmt.Sprintf("step %d (%s %s %q)", i, st.method, st.name, st.id), got, st.want)
					}
				})
			}
		})
	}
}

// checkAnswer compares got with want: the code, the error message (want's
// is a prefix), and the decisions (Source and Bucket only when want sets
// them, the limit only with Source).
func checkAnswer(t *testing.T, what string, got, want answer) {
	t.Helper()
	if got.code != want.code {
		t.Fatalf("%s: got code %s (%q), want %s", what, got.code, got.msg, want.code)
	}
	if want.code != codes.OK {
		if !strings.HasPrefix(got.msg, want.msg) {
			t.Errorf("%s: got message %q, want it to start with %q", what, got.msg, want.msg)
		}
		return
	}
	checkDecision(t, what, got.decision, want.decision)
	if want.results == nil {
		return
	}
	if len(got.results) != len(want.results) {
		t.Fatalf("%s: got %d results, want %d", what, len(got.results), len(want.results))
	}
	for i := range want.results {
		checkDecision(t, fmt.Sprintf("%s, result %d", what, i), got.results[i], want.results[i])
	}
}

func checkDecision(t *testing.T, what string, got, want decision) {
	t.Helper()
	if want.Source == "" {
		got.Source, got.Burst, got.Count, got.Period = "", 0, 0, 0
	}
	if want.Bucket == "" {
		got.Bucket = ""
	}
	if got != want {
		t.Errorf("%s:\ngot  %+v\nwant %+v", what, got, want)
	}
}
