package server

import (
	"encoding/json"
	"fmt"
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
	checkBodies(t, kvBodies, 3, 10, plainKVRequest, requestDiffers)
}

func FuzzPlainKVRequest(f *testing.F) {
	for _, body := range kvBodies {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		agreesWithDecodeStrict(t, body, plainKVRequest, requestDiffers)
	})
}

// checkBodies checks bodies with agreesWithDecodeStrict, that the first
// usual of them take the fast path, and that at least taken of them do.
func checkBodies[T any](t *testing.T, bodies []string, usual, taken int, plain func([]byte) (T, bool), differs func(got, want T) string) {
	t.Helper()
	n := 0
	for i, body := range bodies {
		agreesWithDecodeStrict(t, []byte(body), plain, differs)
		_, ok := plain([]byte(body))
		if ok {
			n++
		} else if i < usual {
			t.Errorf("%s: left to encoding/json, want the fast path", body)
		}
	}
	if n < taken {
		t.Errorf("the fast path took %d of the bodies, want the plain ones (at least %d)", n, taken)
	}
}

// agreesWithDecodeStrict fails when plain takes body and decodes it
// otherwise than decodeStrict (differs describes how), or takes one
// decodeStrict refuses.
func agreesWithDecodeStrict[T any](t *testing.T, body []byte, plain func([]byte) (T, bool), differs func(got, want T) string) {
	t.Helper()
	got, ok := plain(body)
	if !ok {
		return
	}
	var want T
	if err := decodeStrict(body, &want); err != nil {
		t.Fatalf("%q: the fast path took it, decodeStrict refuses it: %v", body, err)
	}
	if d := differs(got, want); d != "" {
		t.Fatalf("%q: %s", body, d)
	}
}

// requestDiffers describes how two single requests differ, "" if not.
func requestDiffers(got, want kvRequest) string {
	return transactionDiffers(kvTransaction{Name: got.Name, ID: got.ID, Cost: got.Cost}, kvTransaction{Name: want.Name, ID: want.ID, Cost: want.Cost})
}

// transactionDiffers describes how two transactions differ, "" if not.
func transactionDiffers(got, want kvTransaction) string {
	if got.Name != want.Name || got.ID != want.ID || got.Kind != want.Kind || costOf(got.Cost) != costOf(want.Cost) {
		return fmt.Sprintf("fast path %+v (cost %v), decodeStrict %+v (cost %v)", got, costOf(got.Cost), want, costOf(want.Cost))
	}
	return ""
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
	checkBodies(t, kvBatchBodies(), 5, 20, plainKVBatchRequest, batchDiffers)
}

func FuzzPlainKVBatchRequest(f *testing.F) {
	for _, body := range kvBatchBodies() {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		agreesWithDecodeStrict(t, body, plainKVBatchRequest, batchDiffers)
	})
}

// batchDiffers describes how two batch requests differ, "" if not.
func batchDiffers(got, want kvBatchRequest) string {
	if (got.Transactions == nil) != (want.Transactions == nil) || len(got.Transactions) != len(want.Transactions) {
		return fmt.Sprintf("fast path %d transactions (nil %v), decodeStrict %d (nil %v)",
			len(got.Transactions), got.Transactions == nil, len(want.Transactions), want.Transactions == nil)
	}
	for i, g := range got.Transactions {
		if d := transactionDiffers(g, want.Transactions[i]); d != "" {
			return fmt.Sprintf("transaction %d: %s", i, d)
		}
	}
	return ""
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
