package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/server"
	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/memory"
)

func TestKVHTTPRefusesMalformedRequests(t *testing.T) {
	t.Parallel()
	kv, _ := newKV(t, memory.New(memory.Options{}))
	api := startHTTP(t, kv).(httpTransport)
	tests := []struct {
		name       string
		method     string // HTTP method; default POST
		path       string
		body       string
		wantStatus int
		wantError  string // prefix of the error message
	}{
		{name: "an empty body", path: "/v1/spend", body: "", wantStatus: 400, wantError: "empty request body"},
		{name: "a body of spaces", path: "/v1/check", body: "  \n", wantStatus: 400, wantError: "empty request body"},
		{name: "a body over 1 MiB", path: "/v1/spend", body: `{"name": "` + strings.Repeat("x", server.MaxBodyBytes) + `"}`, wantStatus: 400,
			wantError: "request body larger than 1048576 bytes"},
		{name: "malformed JSON", path: "/v1/spend", body: `{"name": "NewOrdersPerAccount", "id": }`, wantStatus: 400,
			wantError: "invalid JSON at byte 39: invalid character '}' looking for beginning of value"},
		{name: "a truncated object", path: "/v1/spend", body: `{"name": "NewOrdersPerAccount"`, wantStatus: 400, wantError: "invalid JSON: unexpected end of input"},
		{name: "an unknown field", path: "/v1/spend", body: `{"name": "NewOrdersPerAccount", "id": "1", "costs": 2}`, wantStatus: 400,
			wantError: `invalid JSON: unknown field "costs"`},
		{name: "a kind outside a batch", path: "/v1/spend", body: `{"name": "NewOrdersPerAccount", "id": "1", "kind": "check_only"}`, wantStatus: 400,
			wantError: `invalid JSON: unknown field "kind"`},
		{name: "a field name in the wrong case", path: "/v1/spend", body: `{"Name": "NewOrdersPerAccount", "id": "1"}`, wantStatus: 400,
			wantError: `invalid JSON: unknown field "Name"`},
		{name: "a field given twice", path: "/v1/spend", body: `{"name": "NewOrdersPerAccount", "id": "1", "id": "2"}`, wantStatus: 400,
			wantError: `invalid JSON: field "id" given twice`},
		{name: "a field twice inside a batch", path: "/v1/batch", body: `{"transactions": [{"name": "NewOrdersPerAccount", "cost": 1, "cost": 2, "id": "1"}]}`,
			wantStatus: 400, wantError: `invalid JSON: field "cost" given twice`},
		{name: "an unknown field inside a batch", path: "/v1/batch", body: `{"transactions": [{"name": "NewOrdersPerAccount", "id": "1", "weight": 1}]}`,
			wantStatus: 400, wantError: `invalid JSON: unknown field "weight"`},
		{name: "data after the object", path: "/v1/spend", body: `{"name": "NewOrdersPerAccount", "id": "1"} {}`, wantStatus: 400,
			wantError: "invalid JSON: data after the request object"},
		{name: "a cost that is a string", path: "/v1/spend", body: `{"name": "NewOrdersPerAccount", "id": "1", "cost": "1"}`, wantStatus: 400,
			wantError: `invalid JSON: field "cost" must be an integer, got string`},
		{name: "a fractional cost", path: "/v1/spend", body: `{"name": "NewOrdersPerAccount", "id": "1", "cost": 1.5}`, wantStatus: 400,
			wantError: `invalid JSON: field "cost" must be an integer, got number 1.5`},
		{name: "an id that is a number", path: "/v1/spend", body: `{"name": "NewOrdersPerAccount", "id": 12345678}`, wantStatus: 400,
			wantError: `invalid JSON: field "id" must be a string, got number`},
		{name: "a body that is an array", path: "/v1/spend", body: `[{"name": "NewOrdersPerAccount", "id": "1"}]`, wantStatus: 400,
			wantError: "invalid JSON: the request body must be an object"},
		{name: "transactions that are not a list", path: "/v1/batch", body: `{"transactions": {"name": "NewOrdersPerAccount", "id": "1"}}`, wantStatus: 400,
			wantError: `invalid JSON: field "transactions" must be an array, got object`},
		{name: "an unknown kind", path: "/v1/batch", body: `{"transactions": [{"name": "NewOrdersPerAccount", "id": "1", "kind": "reset"}]}`, wantStatus: 400,
			wantError: `transaction 0: invalid kind "reset", must be check_and_spend, check_only or spend_only`},
		{name: "a kind in capitals", path: "/v1/batch", body: `{"transactions": [{"name": "NewOrdersPerAccount", "id": "1", "kind": "CHECK_ONLY"}]}`, wantStatus: 400,
			wantError: `transaction 0: invalid kind "CHECK_ONLY"`},
		{name: "a batch without transactions", path: "/v1/batch", body: `{}`, wantStatus: 400, wantError: "empty batch, want 1 to 100 transactions"},
		{name: "a null request", path: "/v1/spend", body: `null`, wantStatus: 400, wantError: "missing limit name"},
		{name: "a GET", method: http.MethodGet, path: "/v1/spend", wantStatus: 405, wantError: "method GET not allowed, use POST"},
		{name: "a PUT", method: http.MethodPut, path: "/v1/batch", body: `{}`, wantStatus: 405, wantError: "method PUT not allowed, use POST"},
		{name: "an unknown endpoint", path: "/v1/spends", body: `{}`, wantStatus: 404, wantError: "no such endpoint /v1/spends"},
	}
	for _, tt := range tests {
		t.Run(tt.name+" is answered "+fmt.Sprint(tt.wantStatus), func(t *testing.T) {
			t.Parallel()
			method := tt.method
			if method == "" {
				method = http.MethodPost
			}
			req, err := http.NewRequest(method, api.url+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", method, tt.path, err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tt.wantStatus {
				t.Errorf("got status %d, want %d", resp.StatusCode, tt.wantStatus)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("got Content-Type %q, want application/json", ct)
			}
			if tt.wantStatus == 405 {
				if allow := resp.Header.Get("Allow"); allow != "POST" {
					t.Errorf("got Allow %q, want POST", allow)
				}
			}
			var e map[string]string
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatalf("decode error body: %v", err)
			}
			if len(e) != 1 || !strings.HasPrefix(e["error"], tt.wantError) {
				t.Errorf("got body %q, want {\"error\": %q...}", e, tt.wantError)
			}
		})
	}
}

func TestKVHTTPAnswersDecisionsAsDocumented(t *testing.T) {
	t.Parallel()
	kv, clk := newKV(t, memory.New(memory.Options{}))
	api := startHTTP(t, kv).(httpTransport)
	// 299 of 300 tokens spent, 36s per token: the next spend waits 36s, and
	// its Retry-After is 36. Half a millisecond later it is 35.9995s, and
	// Retry-After rounds up.
	tests := []struct {
		name           string
		advance        time.Duration
		path, body     string
		wantBody       string
		wantRetryAfter string
	}{
		{
			name: "a spend answers its decision with counts as numbers and durations as strings",
			path: "/v1/spend", body: `{"name": "NewOrdersPerAccount", "id": "555", "cost": 300}`,
			wantBody: `{"allowed": true, "remaining": 0, "retry_in": "3h0m0s", "reset_in": "3h0m0s",
				"limit": {"burst": 300, "count": 300, "period": "3h0m0s", "source": "default"}, "bucket": "3:555"}`,
		},
		{
			name: "a denied spend gets a Retry-After of whole seconds",
			path: "/v1/spend", body: `{"name": "NewOrdersPerAccount", "id": "555"}`,
			wantBody: `{"allowed": false, "remaining": 0, "retry_in": "36s", "reset_in": "3h0m0s",
				"limit": {"burst": 300, "count": 300, "period": "3h0m0s", "source": "default"}, "bucket": "3:555"}`,
			wantRetryAfter: "36",
		},
		{
			name:    "a Retry-After rounds up",
			advance: 500 * time.Microsecond,
			path:    "/v1/check", body: `{"name": "NewOrdersPerAccount", "id": "555"}`,
			wantBody: `{"allowed": false, "remaining": 0, "retry_in": "35.9995s", "reset_in": "2h59m59.9995s",
				"limit": {"burst": 300, "count": 300, "period": "3h0m0s", "source": "default"}, "bucket": "3:555"}`,
			wantRetryAfter: "36",
		},
		{
			name: "a denied batch answers its combined decision at top level and gets a Retry-After",
			path: "/v1/batch", body: `{"transactions": [{"name": "NewRegistrationsPerIPAddress", "id": "10.0.0.2", "cost": 0},
				{"name": "NewOrdersPerAccount", "id": "555", "kind": "check_only"}]}`,
			wantBody: `{"allowed": false, "remaining": 0, "retry_in": "35.9995s", "reset_in": "2h59m59.9995s",
				"limit": {"burst": 300, "count": 300, "period": "3h0m0s", "source": "default"}, "bucket": "3:555",
				"results": [
				  {"allowed": true, "remaining": 20, "retry_in": "0s", "reset_in": "0s",
				   "limit": {"burst": 20, "count": 40, "period": "1s", "source": "override"}, "bucket": "1:10.0.0.2"},
				  {"allowed": false, "remaining": 0, "retry_in": "35.9995s", "reset_in": "2h59m59.9995s",
				   "limit": {"burst": 300, "count": 300, "period": "3h0m0s", "source": "default"}, "bucket": "3:555"}]}`,
			wantRetryAfter: "36",
		},
		{
			name: "a refund that gives nothing back is answered 200 without Retry-After",
			path: "/v1/refund", body: `{"name": "NewOrdersPerAccount", "id": "556"}`,
			wantBody: `{"allowed": false, "remaining": 300, "retry_in": "0s", "reset_in": "0s",
				"limit": {"burst": 300, "count": 300, "period": "3h0m0s", "source": "default"}, "bucket": "3:556"}`,
		},
		{
			name: "an unlimited name answers the largest remaining count and source none",
			path: "/v1/spend", body: `{"name": "CertificatesPerFQDNSet", "id": "b.example.com,A.example.com"}`,
			wantBody: `{"allowed": true, "remaining": 9223372036854775807, "retry_in": "0s", "reset_in": "0s",
				"limit": {"burst": 0, "count": 0, "period": "0s", "source": "none"},
				"bucket": "7:92c7f247bd1eea8d527fb05919e9be817888e6f755f01cc963155f8e52ae95c1"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk.Add(tt.advance)
			status, header, body := post(t, api.url+tt.path, tt.body)
			if status != http.StatusOK {
				t.Fatalf("got status %d (%s), want 200", status, body)
			}
			if got := header.Get("Retry-After"); got != tt.wantRetryAfter {
				t.Errorf("got Retry-After %q, want %q", got, tt.wantRetryAfter)
			}
			if diff := jsonDiff(t, body, []byte(tt.wantBody)); diff != "" {
				t.Errorf("%s", diff)
			}
		})
	}
}

// jsonDiff compares two JSON documents semantically, numbers exactly, and
// returns "" when equal or a "got X, want Y" message.
func jsonDiff(t *testing.T, got, want []byte) string {
	t.Helper()
	g, err := decodeJSON(got)
	if err != nil {
		return fmt.Sprintf("got invalid JSON %q: %v", got, err)
	}
	w, err := decodeJSON(want)
	if err != nil {
		t.Fatalf("want invalid JSON %q: %v", want, err)
	}
	if gs, ws := canonical(g), canonical(w); gs != ws {
		return fmt.Sprintf("got  %s\nwant %s", gs, ws)
	}
	return ""
}

func decodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("data after the JSON value")
	}
	return v, nil
}

// canonical re-encodes v with sorted keys (encoding/json sorts map keys).
func canonical(v any) string {
	out, _ := json.Marshal(v)
	return string(out)
}

// downStore is a store.Store whose backend cannot be reached.
type downStore struct{}

func (downStore) Do(context.Context, time.Time, store.Batch, []store.Result) error {
	return fmt.Errorf("redis 127.0.0.1:6379: %w", store.ErrUnavailable)
}
func (downStore) Ping(context.Context) error { return store.ErrUnavailable }
func (downStore) Close() error               { return nil }

func TestKVAnswersUnavailableWhenTheStoreIsDown(t *testing.T) {
	t.Parallel()
	calls := []struct {
		name string
		call call
	}{
		{"a check", one("check", perIP, "10.0.0.1", cost(1))},
		{"a spend", one("spend", perIP, "10.0.0.1", cost(1))},
		{"a refund", one("refund", perIP, "10.0.0.1", cost(1))},
		{"a reset", one("reset", perIP, "10.0.0.1", nil)},
		{"a batch", call{method: "batch", batch: []txn{{name: perIP, id: "10.0.0.1", cost: cost(1)}, {name: orders, id: "1", cost: cost(1)}}}},
	}
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			kv, _ := newKV(t, downStore{})
			api := tr.start(t, kv)
			for _, c := range calls {
				t.Run(c.name+" is answered Unavailable", func(t *testing.T) {
					got := api.do(t, c.call)
					checkAnswer(t, c.name, got, answer{code: codes.Unavailable, msg: "apply "})
					if !strings.Contains(got.msg, "store unavailable") {
						t.Errorf("got message %q, want it to mention the store is unavailable", got.msg)
					}
				})
			}
			t.Run("a name without a limit is still allowed: it needs no store", func(t *testing.T) {
				got := api.do(t, one("spend", perCert, "example.com", cost(1)))
				checkAnswer(t, "spend", got, allowed(1<<63-1, 0, 0))
			})
		})
	}
}

func TestKVRejectsAnInvalidKindOverGRPC(t *testing.T) {
	t.Parallel()
	kv, _ := newKV(t, memory.New(memory.Options{}))
	_, err := kv.Batch(context.Background(), &sluicev1.BatchRequest{Transactions: []*sluicev1.Transaction{
		{Name: perIP, Id: "10.0.0.1", Kind: sluicev1.Transaction_Kind(7)},
	}})
	if got, want := status.Code(err), codes.InvalidArgument; got != want {
		t.Fatalf("got code %s (%v), want %s", got, err, want)
	}
	if got, want := status.Convert(err).Message(), "transaction 0: invalid kind 7, must be CHECK_AND_SPEND, CHECK_ONLY or SPEND_ONLY"; got != want {
		t.Errorf("got message %q, want %q", got, want)
	}
}

func TestKVUsesTheLimitsInForceAtEachRequest(t *testing.T) {
	t.Parallel()
	var current *limits.Set
	kv := server.NewKV(server.KVOptions{
		Limiter: limiter.New(memory.New(memory.Options{}), clock.NewFake(start)),
		Limits:  func() *limits.Set { return current },
	})
	ctx := context.Background()
	spend := func() *sluicev1.Decision {
		t.Helper()
		d, err := kv.Spend(ctx, &sluicev1.Request{Name: perIP, Id: "10.0.0.1"})
		if err != nil {
			t.Fatalf("spend: %v", err)
		}
		return d
	}
	if d := spend(); d.GetLimit().GetSource() != sluicev1.Limit_NONE || !d.GetAllowed() {
		t.Errorf("with no limits loaded: got %v, want allowed with source NONE", d)
	}
	current = seedLimits(t)
	if d := spend(); d.GetLimit().GetCount() != 20 || d.GetRemaining() != 19 {
		t.Errorf("with the seed's limits: got count %d remaining %d, want 20 and 19", d.GetLimit().GetCount(), d.GetRemaining())
	}
	defaults, err := limits.ParseDefaults("reloaded.yaml", []byte("NewRegistrationsPerIPAddress: {burst: 5, count: 5, period: 1s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if current, err = limits.New(defaults, nil); err != nil {
		t.Fatal(err)
	}
	// The bucket keeps its TAT, 50ms ahead. Under the new limit (burst 5,
	// 200ms per token) this spend moves it to 250ms ahead, which leaves
	// floor((1s - 250ms) / 200ms) = 3 tokens.
	if d := spend(); d.GetLimit().GetBurst() != 5 || d.GetRemaining() != 3 {
		t.Errorf("after the reload: got burst %d remaining %d, want 5 and 3", d.GetLimit().GetBurst(), d.GetRemaining())
	}
}

// FuzzKVHTTPBody sends arbitrary bodies to every endpoint: each must be
// answered 200 with a decision or 400 with an error, as JSON, and never
// anything else.
func FuzzKVHTTPBody(f *testing.F) {
	for _, seed := range []string{
		`{"name": "NewRegistrationsPerIPAddress", "id": "10.0.0.1", "cost": 1}`,
		`{"name": "NewRegistrationsPerIPv6Range", "id": "2001:db8::1"}`,
		`{"name": "CertificatesPerFQDNSet", "id": "a.example.com,b.example.com", "cost": 0}`,
		`{"transactions": [{"name": "NewOrdersPerAccount", "id": "1", "kind": "check_only"}, {"name": "NewOrdersPerAccount", "id": "2"}]}`,
		`{"name": "NewOrdersPerAccount", "id": "1", "id": "1"}`,
		`{"transactions": null}`,
		`[]`, `null`, `{`, `"x"`,
	} {
		f.Add(seed)
	}
	kv, _ := newKV(f, memory.New(memory.Options{}))
	h := server.KVHTTPHandler(kv)
	f.Fuzz(func(t *testing.T, body string) {
		for _, path := range []string{"/v1/check", "/v1/spend", "/v1/refund", "/v1/reset", "/v1/batch"} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
			var v map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
				t.Fatalf("POST %s %q: answer %q is not a JSON object: %v", path, body, rec.Body, err)
			}
			switch rec.Code {
			case http.StatusOK:
				if _, ok := v["allowed"]; !ok {
					t.Errorf("POST %s %q: got 200 %q, want a decision", path, body, rec.Body)
				}
			case http.StatusBadRequest:
				if _, ok := v["error"]; !ok || len(v) != 1 {
					t.Errorf("POST %s %q: got 400 %q, want {\"error\": ...}", path, body, rec.Body)
				}
			default:
				t.Errorf("POST %s %q: got status %d (%s), want 200 or 400", path, body, rec.Code, rec.Body)
			}
		}
	})
}
