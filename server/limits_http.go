package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-rl/sluice/internal/tracing"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/limits"
)

// KVHTTPHandler serves the key-value limits API over HTTP/JSON (see
// docs/api.md):
//
//	POST /v1/check   {"name": "...", "id": "...", "cost": 1}
//	POST /v1/spend   same body
//	POST /v1/refund  same body
//	POST /v1/reset   {"name": "...", "id": "..."}
//	POST /v1/batch   {"transactions": [{"name": "...", "id": "...", "cost": 1, "kind": "check_only"}, ...]}
//	POST /v1/batch/refund  {"transactions": [{"name": "...", "id": "...", "cost": 1}, ...]}
//	POST /v1/batch/reset   {"transactions": [{"name": "...", "id": "..."}, ...]}
//
// With KVOptions.Overrides it also serves the runtime overrides under
// /v1/overrides (see overridesHTTP).
//
// An absent (or null) cost means 1; "cost": 0 is a peek. A batch kind is
// check_and_spend (the default), check_only or spend_only. Bodies are
// strict JSON: one object, field names exactly as above, no unknown or
// repeated fields, nothing after it, at most MaxBodyBytes.
//
// Every decision, allowed or not, is answered 200 with the decision as JSON
// (counts as numbers, durations as Go duration strings such as "49.5ms");
// a denied check, spend or batch also gets a Retry-After header in whole
// seconds, rounded up, at least 1. A batch answers its combined decision's
// fields plus "results", one decision per transaction. Invalid input is
// answered 400, an unavailable store 503, a method other than POST 405, an
// unknown path 404, each with {"error": "..."}.
//
// Mount it for the path prefix /v1/.
func KVHTTPHandler(kv *KV) http.Handler {
	single := func(method string, kind limiter.Kind) http.Handler {
		return kvHandler(method != methodRefund && method != methodReset, func(r *http.Request, body []byte) (kvAnswer, limiter.Decision, error) {
			if err := kv.admin(method, func() error { return kv.guard.allowHTTP(r) }); err != nil {
				return nil, limiter.Decision{}, err
			}
			var req kvRequest
			if err := decodeKVRequest(body, &req); err != nil {
				return nil, limiter.Decision{}, err
			}
			d, b, err := kv.decide(r.Context(), method, kvTxn{name: req.Name, id: req.ID, cost: req.Cost, kind: kind}, make([]byte, 0, singleKeyBytes))
			if kv.tracer != nil {
				tracing.Annotate(trace.SpanFromContext(r.Context()), err, tracing.KeyLimitName.String(req.Name), tracing.KeyAllowed.Bool(d.Allowed))
			}
			if err != nil {
				return nil, limiter.Decision{}, err
			}
			out := decisionJSON(d, b)
			return &out, d, nil
		})
	}
	mux := http.NewServeMux()
	handle := func(method string, h http.Handler) {
		if kv.tracer != nil {
			h = traceHTTP(kv.tracer, kvSpanName(method, true), h)
		}
		mux.Handle(kvPath(method), h)
	}
	handle(methodCheck, single(methodCheck, limiter.CheckOnly))
	handle(methodSpend, single(methodSpend, limiter.CheckAndSpend))
	handle(methodRefund, single(methodRefund, limiter.RefundBucket))
	handle(methodReset, single(methodReset, limiter.ResetBucket))
	handle(methodBatch, kvHandler(true, func(r *http.Request, body []byte) (kvAnswer, limiter.Decision, error) {
		var req kvBatchRequest
		if err := decodeKVBatchRequest(body, &req); err != nil {
			return nil, limiter.Decision{}, err
		}
		txns := make([]kvTxn, len(req.Transactions))
		for i, t := range req.Transactions {
			txns[i] = kvTxn{name: t.Name, id: t.ID, cost: t.Cost}
			k, err := limiter.ParseKind(t.Kind)
			if err != nil || (k != limiter.CheckAndSpend && k != limiter.CheckOnly && k != limiter.SpendOnly) {
				txns[i].bad = invalidTransaction("kind", "invalid kind %q, must be check_and_spend, check_only or spend_only", t.Kind)
			}
			txns[i].kind = k
		}
		return kv.batchJSON(r, methodBatch, txns)
	}))
	adminBatch := func(method string) http.Handler {
		return kvHandler(false, func(r *http.Request, body []byte) (kvAnswer, limiter.Decision, error) {
			if err := kv.admin(method, func() error { return kv.guard.allowHTTP(r) }); err != nil {
				return nil, limiter.Decision{}, err
			}
			var req kvBatchRequest
			if err := decodeKVBatchRequest(body, &req); err != nil {
				return nil, limiter.Decision{}, err
			}
			txns := make([]kvTxn, len(req.Transactions))
			for i, t := range req.Transactions {
				txns[i] = kvTxn{name: t.Name, id: t.ID, cost: t.Cost, kind: limiter.RefundBucket}
				if method == methodBatchReset {
					txns[i].kind = limiter.ResetBucket
				}
				if t.Kind != "" {
					txns[i].bad = invalidTransaction("kind", "kind %q is not allowed in %s, leave it out", t.Kind, kvPath(method))
				}
			}
			return kv.batchJSON(r, method, txns)
		})
	}
	handle(methodBatchRefund, adminBatch(methodBatchRefund))
	handle(methodBatchReset, adminBatch(methodBatchReset))
	if kv.overrides != nil {
		var h http.Handler = overridesHTTP(kv)
		if kv.tracer != nil {
			h = traceHTTP(kv.tracer, overridesPath, h)
		}
		mux.Handle(overridesPath, h)
		mux.Handle(overridesPath+"/", h)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint %s; use /v1/check, /v1/spend, /v1/refund, /v1/reset, /v1/batch, /v1/batch/refund or /v1/batch/reset", r.URL.Path)
	})
	return mux
}

// batchJSON answers a batch of txns over HTTP: the combined decision's
// fields plus "results", one decision per transaction.
func (kv *KV) batchJSON(r *http.Request, method string, txns []kvTxn) (kvAnswer, limiter.Decision, error) {
	a, err := kv.decideBatch(r.Context(), method, txns)
	if kv.tracer != nil {
		tracing.Annotate(trace.SpanFromContext(r.Context()), err, tracing.KeyTransactions.Int(len(txns)), tracing.KeyAllowed.Bool(a.decision.Allowed))
	}
	if err != nil {
		return nil, limiter.Decision{}, err
	}
	out := &kvBatchResponse{kvDecision: decisionJSON(a.decision, a.bucket), Results: make([]kvDecision, len(a.each))}
	for i := range a.each {
		out.Results[i] = decisionJSON(a.each[i], a.buckets[i])
	}
	return out, a.decision, nil
}

// kvHandler runs serve for POST requests and writes its answer: 200 with
// the JSON, plus Retry-After when the decision is denied and retry is set;
// or the error's status.
func kvHandler(retry bool, serve func(r *http.Request, body []byte) (answer kvAnswer, d limiter.Decision, err error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, "method %s not allowed, use POST", r.Method)
			return
		}
		body, err := readBody(w, r)
		if err != nil {
			writeError(w, bodyStatus(err), "%v", err)
			return
		}
		answer, d, err := serve(r, body)
		if err != nil {
			writeError(w, httpStatus(err), "%s", err.Error())
			return
		}
		w.Header()["Content-Type"] = jsonContentType
		if retry && !d.Allowed {
			w.Header().Set("Retry-After", strconv.FormatInt(limiter.RetryAfter(d.RetryIn), 10))
		}
		_, _ = w.Write(answer.json())
	})
}

// jsonContentType is the Content-Type header's value of a JSON answer,
// one slice for every answer (net/http only reads it).
var jsonContentType = []string{"application/json"}

// kvRequest is the body of /v1/check, /v1/spend, /v1/refund and /v1/reset.
type kvRequest struct {
	Name string `json:"name"`
	ID   string `json:"id"`
	Cost *int64 `json:"cost"`
}

// kvBatchRequest is the body of /v1/batch.
type kvBatchRequest struct {
	Transactions []kvTransaction `json:"transactions"`
}

type kvTransaction struct {
	Name string `json:"name"`
	ID   string `json:"id"`
	Cost *int64 `json:"cost"`
	Kind string `json:"kind"`
}

// kvFields are the field names a request body may use, exactly.
var kvFields = map[string]bool{"name": true, "id": true, "cost": true, "kind": true, "transactions": true,
	"burst": true, "count": true, "period": true, "comment": true} // the last four: PUT /v1/overrides/…

// kvDecision is a decision as JSON.
type kvDecision struct {
	Allowed   bool    `json:"allowed"`
	Remaining int64   `json:"remaining"`
	RetryIn   string  `json:"retry_in"`
	ResetIn   string  `json:"reset_in"`
	Limit     kvLimit `json:"limit"`
	Bucket    string  `json:"bucket"`
}

type kvLimit struct {
	Burst  int64  `json:"burst"`
	Count  int64  `json:"count"`
	Period string `json:"period"`
	// Source is "default", "override" or "none".
	Source string `json:"source"`
}

// kvBatchResponse is a batch's answer: the combined decision's fields and
// one decision per transaction.
type kvBatchResponse struct {
	kvDecision
	Results []kvDecision `json:"results"`
}

// decisionJSON translates a limiter decision on bucket b into the HTTP
// API's JSON: the one place where a key-value decision becomes JSON.
func decisionJSON(d limiter.Decision, b limits.Bucket) kvDecision {
	l := kvLimit{Period: time.Duration(0).String(), Source: "none"}
	if b.Enabled {
		l = kvLimit{Burst: b.Limit.Burst, Count: b.Limit.Count, Period: b.Limit.Period.String(), Source: "default"}
		if b.Override {
			l.Source = "override"
		}
	}
	return kvDecision{
		Allowed:   d.Allowed,
		Remaining: d.Remaining,
		RetryIn:   d.RetryIn.String(),
		ResetIn:   d.ResetIn.String(),
		Limit:     l,
		Bucket:    b.Key,
	}
}

// decodeStrict decodes body, one JSON object, into v: no unknown, repeated
// or differently-cased field names, nothing after the object. Its errors
// are Invalid.
func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return invalidTransaction("", "%s", jsonProblem(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalidTransaction("", "invalid JSON: data after the request object")
	}
	if err := checkFields(json.NewDecoder(bytes.NewReader(body))); err != nil {
		return invalidTransaction("", "invalid JSON: %v", err)
	}
	return nil
}

// jsonProblem describes a decoding error without Go type names.
func jsonProblem(err error) string {
	var (
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &syntax):
		return fmt.Sprintf("invalid JSON at byte %d: %s", syntax.Offset, strings.TrimPrefix(syntax.Error(), "json: "))
	case errors.As(err, &typ):
		if typ.Field == "" {
			return "invalid JSON: the request body must be an object"
		}
		return fmt.Sprintf("invalid JSON: field %q must be %s, got %s", typ.Field, jsonKind(typ.Type), typ.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "invalid JSON: unexpected end of input"
	}
	return "invalid JSON: " + strings.TrimPrefix(err.Error(), "json: ")
}

func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int64, reflect.Pointer:
		return "an integer"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "an array"
	case reflect.Struct:
		return "an object"
	}
	return t.Kind().String()
}

// checkFields walks one JSON value and fails on an object field name not
// in kvFields (encoding/json matches names case-insensitively) or given
// twice (encoding/json keeps the last).
func checkFields(dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return err
			}
			key, _ := k.(string)
			switch {
			case !kvFields[key]:
				return fmt.Errorf("unknown field %q", key)
			case seen[key]:
				return fmt.Errorf("field %q given twice", key)
			}
			seen[key] = true
			if err := checkFields(dec); err != nil {
				return err
			}
		}
		_, err = dec.Token()
	case json.Delim('['):
		for dec.More() {
			if err := checkFields(dec); err != nil {
				return err
			}
		}
		_, err = dec.Token()
	}
	return err
}
