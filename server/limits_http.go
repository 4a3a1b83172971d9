package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
)

// KVHTTPHandler serves the key-value limits API over HTTP/JSON (see
// docs/api.md):
//
//	POST /v1/check   {"name": "...", "id": "...", "cost": 1}
//	POST /v1/spend   same body
//	POST /v1/refund  same body
//	POST /v1/reset   {"name": "...", "id": "..."}
//	POST /v1/batch   {"transactions": [{"name": "...", "id": "...", "cost": 1, "kind": "check_only"}, ...]}
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
	single := func(call func(context.Context, *sluicev1.Request) (*sluicev1.Decision, error), retry bool) http.Handler {
		return kvHandler(func(r *http.Request, body []byte) (any, bool, error) {
			var req kvRequest
			if err := decodeStrict(body, &req); err != nil {
				return nil, false, err
			}
			d, err := call(r.Context(), &sluicev1.Request{Name: req.Name, Id: req.ID, Cost: req.Cost})
			if err != nil {
				return nil, false, err
			}
			return decisionJSON(d), retry && !d.GetAllowed(), nil
		})
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/check", single(kv.Check, true))
	mux.Handle("/v1/spend", single(kv.Spend, true))
	mux.Handle("/v1/refund", single(kv.Refund, false))
	mux.Handle("/v1/reset", single(kv.Reset, false))
	mux.Handle("/v1/batch", kvHandler(func(r *http.Request, body []byte) (any, bool, error) {
		var req kvBatchRequest
		if err := decodeStrict(body, &req); err != nil {
			return nil, false, err
		}
		in := &sluicev1.BatchRequest{Transactions: make([]*sluicev1.Transaction, len(req.Transactions))}
		for i, t := range req.Transactions {
			kind, ok := kvKinds[t.Kind]
			if !ok {
				return nil, false, badRequest(fmt.Sprintf("transaction %d: invalid kind %q, must be check_and_spend, check_only or spend_only", i, t.Kind))
			}
			in.Transactions[i] = &sluicev1.Transaction{Name: t.Name, Id: t.ID, Cost: t.Cost, Kind: kind}
		}
		resp, err := kv.Batch(r.Context(), in)
		if err != nil {
			return nil, false, err
		}
		out := kvBatchResponse{kvDecision: decisionJSON(resp.GetDecision()), Results: make([]kvDecision, len(resp.GetResults()))}
		for i, d := range resp.GetResults() {
			out.Results[i] = decisionJSON(d)
		}
		return out, !resp.GetDecision().GetAllowed(), nil
	}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint %s; use /v1/check, /v1/spend, /v1/refund, /v1/reset or /v1/batch", r.URL.Path)
	})
	return mux
}

// retryIn reads the retry_in of an answer.
func retryIn(v any) time.Duration {
	switch d := v.(type) {
	case kvDecision:
		return d.retryIn
	case kvBatchResponse:
		return d.retryIn
	}
	return 0
}

// kvHandler runs serve for POST requests and writes its answer: 200 with
// the JSON, plus Retry-After when denied; or the error's status.
func kvHandler(serve func(r *http.Request, body []byte) (answer any, denied bool, err error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, "method %s not allowed, use POST", r.Method)
			return
		}
		body, err := readBody(w, r)
		if err != nil {
			writeError(w, http.StatusBadRequest, "%v", err)
			return
		}
		answer, denied, err := serve(r, body)
		if err != nil {
			var bad badRequest
			if errors.As(err, &bad) {
				writeError(w, http.StatusBadRequest, "%s", bad)
				return
			}
			writeError(w, httpStatus(err), "%s", status.Convert(err).Message())
			return
		}
		out, err := json.Marshal(answer)
		if err != nil {
			writeError(w, http.StatusInternalServerError, "encode response: %v", err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if denied {
			w.Header().Set("Retry-After", strconv.FormatInt(retryAfter(retryIn(answer)), 10))
		}
		_, _ = w.Write(append(out, '\n'))
	})
}

// badRequest is a problem with the HTTP request itself, answered 400.
type badRequest string

func (e badRequest) Error() string { return string(e) }

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
var kvFields = map[string]bool{"name": true, "id": true, "cost": true, "kind": true, "transactions": true}

var kvKinds = map[string]sluicev1.Transaction_Kind{
	"":                sluicev1.Transaction_CHECK_AND_SPEND,
	"check_and_spend": sluicev1.Transaction_CHECK_AND_SPEND,
	"check_only":      sluicev1.Transaction_CHECK_ONLY,
	"spend_only":      sluicev1.Transaction_SPEND_ONLY,
}

// kvDecision is a decision as JSON.
type kvDecision struct {
	Allowed   bool    `json:"allowed"`
	Remaining int64   `json:"remaining"`
	RetryIn   string  `json:"retry_in"`
	ResetIn   string  `json:"reset_in"`
	Limit     kvLimit `json:"limit"`
	Bucket    string  `json:"bucket"`

	retryIn time.Duration
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

func decisionJSON(d *sluicev1.Decision) kvDecision {
	l := d.GetLimit()
	return kvDecision{
		Allowed:   d.GetAllowed(),
		Remaining: d.GetRemaining(),
		RetryIn:   durationString(d.GetRetryIn()),
		ResetIn:   durationString(d.GetResetIn()),
		Limit: kvLimit{
			Burst:  l.GetBurst(),
			Count:  l.GetCount(),
			Period: durationString(l.GetPeriod()),
			Source: strings.ToLower(l.GetSource().String()),
		},
		Bucket:  d.GetBucket(),
		retryIn: d.GetRetryIn().AsDuration(),
	}
}

func durationString(d *durationpb.Duration) string { return d.AsDuration().String() }

// decodeStrict decodes body, one JSON object, into v: no unknown, repeated
// or differently-cased field names, nothing after the object. Its errors
// are badRequests.
func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest(jsonProblem(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("invalid JSON: data after the request object")
	}
	if err := checkFields(json.NewDecoder(bytes.NewReader(body))); err != nil {
		return badRequest("invalid JSON: " + err.Error())
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
