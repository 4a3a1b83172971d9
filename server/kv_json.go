package server

import (
	"encoding/json"
	"math"
	"strconv"
)

// The key-value door's usual JSON without encoding/json, whose decoder
// (run twice by decodeStrict, the second time for repeated names) and
// reflection cost about ten times the decision itself. Each fast path
// handles a plain subset of what it may meet and gives anything else to
// encoding/json, so that answers and errors stay exactly encoding/json's.

// decodeKVRequest decodes body into req as decodeStrict would, without
// encoding/json when body is plain: one object whose members are name
// and id, strings of printable ASCII without escapes, and cost, null or
// an integer without fraction or exponent, each at most once, with JSON
// whitespace anywhere between tokens. Anything else goes to
// decodeStrict, which accepts or refuses it.
func decodeKVRequest(body []byte, req *kvRequest) error {
	if r, ok := plainKVRequest(body); ok {
		*req = r
		return nil
	}
	return decodeStrict(body, req)
}

// plainKVRequest parses body when it is in decodeKVRequest's plain subset
// and reports whether it was.
func plainKVRequest(body []byte) (kvRequest, bool) {
	t, i, ok := plainTransaction(body, skipSpace(body, 0), false)
	if !ok || skipSpace(body, i) != len(body) {
		return kvRequest{}, false
	}
	return kvRequest{Name: t.Name, ID: t.ID, Cost: t.Cost}, true
}

// decodeKVBatchRequest is decodeKVRequest for a batch's body: one object
// whose one member, transactions, is an array of objects in the plain
// subset, each of which may also have kind, a plain string.
func decodeKVBatchRequest(body []byte, req *kvBatchRequest) error {
	if r, ok := plainKVBatchRequest(body); ok {
		*req = r
		return nil
	}
	return decodeStrict(body, req)
}

// plainKVBatchRequest parses body when it is in decodeKVBatchRequest's
// plain subset and reports whether it was.
func plainKVBatchRequest(body []byte) (kvBatchRequest, bool) {
	var req kvBatchRequest
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return req, false
	}
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return req, skipSpace(body, i+1) == len(body)
	}
	key, j, ok := plainString(body, i)
	if !ok || string(key) != "transactions" {
		return req, false
	}
	i = skipSpace(body, j)
	if i >= len(body) || body[i] != ':' {
		return req, false
	}
	i = skipSpace(body, i+1)
	if i >= len(body) || body[i] != '[' {
		return req, false
	}
	req.Transactions = []kvTransaction{}
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == ']' {
		i++
	} else {
		for {
			t, j, ok := plainTransaction(body, i, true)
			if !ok {
				return req, false
			}
			req.Transactions = append(req.Transactions, t)
			i = skipSpace(body, j)
			if i >= len(body) {
				return req, false
			}
			if body[i] == ']' {
				i++
				break
			}
			if body[i] != ',' {
				return req, false
			}
			i = skipSpace(body, i+1)
		}
	}
	i = skipSpace(body, i)
	if i >= len(body) || body[i] != '}' {
		return req, false
	}
	return req, skipSpace(body, i+1) == len(body)
}

// plainTransaction parses the object starting at b[i] when it is in the
// plain subset: name, id and, when withKind, kind as plain strings, cost
// as null or a plain integer, each at most once. It returns the index
// after the object.
func plainTransaction(b []byte, i int, withKind bool) (kvTransaction, int, bool) {
	var (
		t                                    kvTransaction
		seenName, seenID, seenCost, seenKind bool
	)
	if i >= len(b) || b[i] != '{' {
		return t, i, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return t, i + 1, true
	}
	for {
		key, j, ok := plainString(b, i)
		if !ok {
			return t, i, false
		}
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return t, i, false
		}
		i = skipSpace(b, i+1)
		var seen *bool
		switch string(key) {
		case "name", "id":
			v, j, ok := plainString(b, i)
			if !ok {
				return t, i, false
			}
			if string(key) == "name" {
				seen, t.Name = &seenName, string(v)
			} else {
				seen, t.ID = &seenID, string(v)
			}
			i = j
		case "kind":
			v, j, ok := plainString(b, i)
			if !ok || !withKind {
				return t, i, false
			}
			seen, t.Kind, i = &seenKind, string(v), j
		case "cost":
			c, isNull, j, ok := plainInt(b, i)
			if !ok {
				return t, i, false
			}
			t.Cost = nil
			if !isNull {
				t.Cost = &c
			}
			seen, i = &seenCost, j
		default:
			return t, i, false
		}
		if *seen {
			return t, i, false // given twice: decodeStrict's error
		}
		*seen = true
		i = skipSpace(b, i)
		if i >= len(b) {
			return t, i, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return t, i + 1, true
		default:
			return t, i, false
		}
	}
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// plainString reads the string starting at b[i] when it is printable
// ASCII without escapes, and returns its bytes and the index after it.
func plainString(b []byte, i int) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, i, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, i, false
		}
	}
	return nil, i, false
}

// plainInt reads null or the integer starting at b[i] (an optional minus
// sign and digits, no leading zero, within int64), and returns it,
// whether it was null, and the index after it.
func plainInt(b []byte, i int) (int64, bool, int, bool) {
	if len(b)-i >= 4 && string(b[i:i+4]) == "null" {
		return 0, true, i + 4, true
	}
	j := i
	neg := j < len(b) && b[j] == '-'
	if neg {
		j++
	}
	start := j
	var n uint64
	for ; j < len(b) && b[j] >= '0' && b[j] <= '9'; j++ {
		if n > (math.MaxUint64-9)/10 {
			return 0, false, i, false // far past int64
		}
		n = n*10 + uint64(b[j]-'0')
	}
	switch {
	case j == start, b[start] == '0' && j-start > 1:
		return 0, false, i, false
	case j < len(b) && (b[j] == '.' || b[j] == 'e' || b[j] == 'E'):
		return 0, false, i, false
	case !neg && n > math.MaxInt64, neg && n > -math.MinInt64:
		return 0, false, i, false
	case neg:
		return int64(-n), false, j, true // -(1<<63) wraps to itself
	}
	return int64(n), false, j, true
}

// kvAnswer is a key-value HTTP answer: a decision, or a batch's.
type kvAnswer interface {
	// json returns the answer as json.Marshal writes it, then a newline.
	json() []byte
}

func (d *kvDecision) json() []byte {
	return append(appendKVDecision(make([]byte, 0, 256), d), '\n')
}

func (r *kvBatchResponse) json() []byte {
	return append(appendKVBatchResponse(make([]byte, 0, 256*(1+len(r.Results))), r), '\n')
}

// appendKVDecision appends d as json.Marshal writes it.
func appendKVDecision(dst []byte, d *kvDecision) []byte {
	dst = append(dst, `{"allowed":`...)
	dst = strconv.AppendBool(dst, d.Allowed)
	dst = append(dst, `,"remaining":`...)
	dst = strconv.AppendInt(dst, d.Remaining, 10)
	dst = append(dst, `,"retry_in":`...)
	dst = appendMarshaledString(dst, d.RetryIn)
	dst = append(dst, `,"reset_in":`...)
	dst = appendMarshaledString(dst, d.ResetIn)
	dst = append(dst, `,"limit":{"burst":`...)
	dst = strconv.AppendInt(dst, d.Limit.Burst, 10)
	dst = append(dst, `,"count":`...)
	dst = strconv.AppendInt(dst, d.Limit.Count, 10)
	dst = append(dst, `,"period":`...)
	dst = appendMarshaledString(dst, d.Limit.Period)
	dst = append(dst, `,"source":`...)
	dst = appendMarshaledString(dst, d.Limit.Source)
	dst = append(dst, `},"bucket":`...)
	dst = appendMarshaledString(dst, d.Bucket)
	return append(dst, '}')
}

// appendKVBatchResponse appends r as json.Marshal writes it: the combined
// decision's fields, then "results".
func appendKVBatchResponse(dst []byte, r *kvBatchResponse) []byte {
	dst = appendKVDecision(dst, &r.kvDecision)
	dst = append(dst[:len(dst)-1], `,"results":`...)
	if r.Results == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i := range r.Results {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendKVDecision(dst, &r.Results[i])
		}
		dst = append(dst, ']')
	}
	return append(dst, '}')
}

// appendMarshaledString appends s quoted exactly as json.Marshal quotes
// it (HTML characters escaped, unlike the request log's appendJSONString):
// as it is when it is printable ASCII with nothing to escape, else
// through json.Marshal.
func appendMarshaledString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(dst, q...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
