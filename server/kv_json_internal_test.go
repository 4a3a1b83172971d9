package server

import (
	"encoding/json"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/limits"
)

// kvBodies are request bodies the fast path takes and bodies it must
// leave to encoding/json: escapes, other characters, repeated, unknown
// and differently-cased names, every shape of number, nesting, trailing
// bytes.
var kvBodies = []string{
	`{"name": "NewOrdersPerAccount", "id": "12345678", "cost": 1}`,
	`{"name":"NewOrdersPerAccount","id":"12345678"}`,
	" \t\r\n{ \"id\" : \"1\" , \"name\" : \"n\" , \"cost\" : null } \n",
	`{}`,
	` { } `,
	`{"cost": 0}`,
	`{"cost": -0}`,
	`{"cost": -1}`,
	`{"cost": 9223372036854775807}`,
	`{"cost": -9223372036854775808}`,
	`{"cost": 9223372036854775808}`,
	`{"cost": -9223372036854775809}`,
	`{"cost": 99999999999999999999999}`,
	`{"cost": 01}`,
	`{"cost": 1.0}`,
	`{"cost": 1e3}`,
	`{"cost": 1E3}`,
	`{"cost": -}`,
	`{"cost": "1"}`,
	`{"cost": true}`,
	`{"cost": nul}`,
	`{"cost": nullx}`,
	`{"cost": 1x}`,
	`{"name": "a\"b"}`,
	`{"name": "a\\b"}`,
	`{"name": "\u0041"}`,
	`{"name": "é"}`,
	"{\"name\": \"\xff\"}",
	"{\"name\": \"a\x7fb\"}",
	"{\"name\": \"a\tb\"}",
	`{"name": null}`,
	`{"name": 1}`,
	`{"name": "a", "name": "b"}`,
	`{"id": "a", "id": "a"}`,
	`{"cost": 1, "cost": 1}`,
	`{"Name": "a"}`,
	`{"NAME": "a"}`,
	`{"kind": "check_only"}`,
	`{"transactions": []}`,
	`{"other": 1}`,
	`{"name": "a",}`,
	`{"name": "a" "id": "b"}`,
	`{"name" "a"}`,
	`{name: "a"}`,
	`{"name": "a"}x`,
	`{"name": "a"}{}`,
	`{"name": "a"`,
	`{"name": "a`,
	`{"name"`,
	`{`,
	`[]`,
	`"x"`,
	`null`,
	`{"name": {"a": 1}}`,
	`{"name": ["a"]}`,
}

// TestPlainKVRequestAgreesWithDecodeStrict checks every body the fast
// path takes against decodeStrict: the same request, and no error.
func TestPlainKVRequestAgreesWithDecodeStrict(t *testing.T) {
	taken := 0
	for _, body := range kvBodies {
		checkPlainKVRequest(t, []byte(body))
		if _, ok := plainKVRequest([]byte(body)); ok {
			taken++
		}
	}
	if taken < 10 {
		t.Errorf("the fast path took %d of the bodies, want the plain ones (at least 10)", taken)
	}
	// The usual bodies must take it.
	for _, body := range kvBodies[:3] {
		if _, ok := plainKVRequest([]byte(body)); !ok {
			t.Errorf("%s: left to encoding/json, want the fast path", body)
		}
	}
}

func FuzzPlainKVRequest(f *testing.F) {
	for _, body := range kvBodies {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkPlainKVRequest(t, body)
	})
}

// checkPlainKVRequest fails when the fast path takes body and decodes it
// otherwise than decodeStrict, or takes one decodeStrict refuses.
func checkPlainKVRequest(t *testing.T, body []byte) {
	t.Helper()
	got, ok := plainKVRequest(body)
	if !ok {
		return
	}
	var want kvRequest
	if err := decodeStrict(body, &want); err != nil {
		t.Fatalf("%q: the fast path took it, decodeStrict refuses it: %v", body, err)
	}
	if got.Name != want.Name || got.ID != want.ID || (got.Cost == nil) != (want.Cost == nil) || (got.Cost != nil && *got.Cost != *want.Cost) {
		t.Fatalf("%q: fast path %+v (cost %v), decodeStrict %+v (cost %v)", body, got, costOf(got.Cost), want, costOf(want.Cost))
	}
}

// kvBatchBodies are batch bodies, plain and not: every single body above
// as a transaction, and the batch's own shapes.
func kvBatchBodies() []string {
	bodies := []string{
		`{"transactions": [{"name": "NewOrdersPerAccount", "id": "1", "cost": 1, "kind": "check_only"}, {"name": "CertificatesPerDomain", "id": "example.com"}]}`,
		`{"transactions":[{"name":"a","id":"1"},{"name":"b","id":"2","kind":"spend_only","cost":null}]}`,
		" {\n \"transactions\" : [ { } , {\"kind\":\"\"} ] } ",
		`{"transactions": []}`,
		`{"transactions": [ ]}`,
		`{}`,
		`{"transactions": null}`,
		`{"transactions": {}}`,
		`{"transactions": [1]}`,
		`{"transactions": [{}],}`,
		`{"transactions": [{},]}`,
		`{"transactions": [{} {}]}`,
		`{"transactions": [{}]`,
		`{"transactions": [{}]}x`,
		`{"transactions": [], "transactions": []}`,
		`{"Transactions": []}`,
		`{"transactions": [], "name": "a"}`,
		`{"transactions": [{"kind": "a", "kind": "b"}]}`,
		`{"transactions": [{"kind": 1}]}`,
		`{"transactions": [{"kind": "\u0041"}]}`,
		`{"transactions": [{"Kind": "a"}]}`,
		`{"transactions": [{"transactions": []}]}`,
		`[{"name": "a"}]`,
	}
	for _, b := range kvBodies {
		bodies = append(bodies, `{"transactions": [`+b+`]}`, `{"transactions": [{"name": "x"}, `+b+`]}`)
	}
	return bodies
}

// TestPlainKVBatchRequestAgreesWithDecodeStrict is the same check for a
// batch's body.
func TestPlainKVBatchRequestAgreesWithDecodeStrict(t *testing.T) {
	taken := 0
	for _, body := range kvBatchBodies() {
		checkPlainKVBatchRequest(t, []byte(body))
		if _, ok := plainKVBatchRequest([]byte(body)); ok {
			taken++
		}
	}
	if taken < 20 {
		t.Errorf("the fast path took %d of the bodies, want the plain ones (at least 20)", taken)
	}
	for _, body := range kvBatchBodies()[:5] {
		if _, ok := plainKVBatchRequest([]byte(body)); !ok {
			t.Errorf("%s: left to encoding/json, want the fast path", body)
		}
	}
}

func FuzzPlainKVBatchRequest(f *testing.F) {
	for _, body := range kvBatchBodies() {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkPlainKVBatchRequest(t, body)
	})
}

// checkPlainKVBatchRequest fails when the fast path takes body and
// decodes it otherwise than decodeStrict, or takes one decodeStrict
// refuses.
func checkPlainKVBatchRequest(t *testing.T, body []byte) {
	t.Helper()
	got, ok := plainKVBatchRequest(body)
	if !ok {
		return
	}
	var want kvBatchRequest
	if err := decodeStrict(body, &want); err != nil {
		t.Fatalf("%q: the fast path took it, decodeStrict refuses it: %v", body, err)
	}
	if (got.Transactions == nil) != (want.Transactions == nil) || len(got.Transactions) != len(want.Transactions) {
		t.Fatalf("%q: fast path %d transactions (nil %v), decodeStrict %d (nil %v)", body,
			len(got.Transactions), got.Transactions == nil, len(want.Transactions), want.Transactions == nil)
	}
	for i, g := range got.Transactions {
		w := want.Transactions[i]
		if g.Name != w.Name || g.ID != w.ID || g.Kind != w.Kind || costOf(g.Cost) != costOf(w.Cost) {
			t.Fatalf("%q: transaction %d: fast path %+v (cost %v), decodeStrict %+v (cost %v)", body, i, g, costOf(g.Cost), w, costOf(w.Cost))
		}
	}
}

func costOf(c *int64) string {
	if c == nil {
		return "nil"
	}
	return strconv.FormatInt(*c, 10)
}

// kvStrings are bucket keys and texts the encoder must quote as
// json.Marshal does.
var kvStrings = []string{"", "3:12345678", "5:example.com", "1:2001:db8::1", `a"b`, `a\b`, "a<b>&c", "é", "\xff", "a\u2028b", "\x00\x1f", "\x7f", "tab\there"}

// TestAppendKVDecisionIsJSONMarshal checks the hand-written encoding of
// a decision and of a batch against json.Marshal's, byte for byte.
func TestAppendKVDecisionIsJSONMarshal(t *testing.T) {
	var ds []kvDecision
	for i, key := range kvStrings {
		b := limits.Bucket{Key: key, Enabled: i%3 != 0, Override: i%2 == 0,
			Limit: gcra.Limit{Burst: int64(i) * 1000, Count: math.MaxInt64 - int64(i), Period: time.Duration(i) * 90 * time.Minute}}
		d := limiter.Decision{Allowed: i%2 == 1, Remaining: int64(i) - 3, RetryIn: time.Duration(i) * 1500 * time.Microsecond, ResetIn: time.Duration(i) * time.Hour}
		kd := decisionJSON(d, b)
		if i == 4 {
			kd.Limit.Source = key // a text with quotes, as a key may have
		}
		ds = append(ds, kd)
		checkEncoding(t, appendKVDecision(nil, &kd), kd)
	}
	for _, r := range []*kvBatchResponse{
		{kvDecision: ds[1], Results: ds},
		{kvDecision: ds[0], Results: []kvDecision{}},
		{kvDecision: ds[2]},
	} {
		checkEncoding(t, appendKVBatchResponse(nil, r), r)
	}
}

func FuzzAppendKVDecision(f *testing.F) {
	for _, s := range kvStrings {
		f.Add(s, int64(len(s)), true)
	}
	f.Fuzz(func(t *testing.T, s string, n int64, allowed bool) {
		d := kvDecision{Allowed: allowed, Remaining: n, RetryIn: s, ResetIn: s, Limit: kvLimit{Burst: n, Count: -n, Period: s, Source: s}, Bucket: s}
		checkEncoding(t, appendKVDecision(nil, &d), d)
	})
}

func checkEncoding(t *testing.T, got []byte, v any) {
	t.Helper()
	want, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("encoding differs from json.Marshal:\ngot  %s\nwant %s", got, want)
	}
}
