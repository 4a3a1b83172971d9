package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/descriptors"
	"github.com/sluice-rl/sluice/limiter"
)

// DescriptorsOptions configure a Descriptors.
type DescriptorsOptions struct {
	// Limiter reads and resets the counters. Required.
	Limiter *limiter.Limiter
	// Config is the descriptor configuration in force (RLS.Config); nil,
	// or a nil answer, means no domain is known.
	Config func() *descriptors.Config
	// Logger records every reset (an audit trail: domain, entries, rule
	// and counter key); default slog.Default().
	Logger *slog.Logger
}

// Descriptors inspects and resets the counter of one Envoy domain +
// descriptor (sluice.v1.Descriptors over gRPC, /v1/descriptors/* over
// HTTP), for the admin listener. It finds the rule as ShouldRateLimit does
// (descriptors.Config.Match; a limit the request carries plays no part),
// builds the rule's transaction with limiter.ForRule, and asks the limiter
// for a peek (limiter.Check: nothing is counted) or a reset
// (limiter.Reset). Create it with NewDescriptors; it is safe for
// concurrent use.
type Descriptors struct {
	sluicev1.UnimplementedDescriptorsServer

	opts DescriptorsOptions
}

// NewDescriptors returns a Descriptors. It panics when o.Limiter is nil, a
// programmer's bug.
func NewDescriptors(o DescriptorsOptions) *Descriptors {
	if o.Limiter == nil {
		panic("server.NewDescriptors: nil Limiter") // a wiring bug, not bad input
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Descriptors{opts: o}
}

// Mount registers d on the admin listener: the gRPC service and
// GET /v1/descriptors/counters and POST /v1/descriptors/reset.
func (d *Descriptors) Mount(a *Admin) {
	sluicev1.RegisterDescriptorsServer(a.GRPC(), d)
	a.Handle("/v1/descriptors/counters", d.inspectHandler())
	a.Handle("/v1/descriptors/reset", d.resetHandler())
}

// Status of a descriptor's counter.
const (
	statusLimited   = "limited"
	statusNoRule    = "no_rule"
	statusUnlimited = "unlimited"
)

// counters is the door-neutral answer: what the rule is and what its
// counter holds.
type counters struct {
	status  string
	domain  string
	entries []descriptors.Entry
	rule    *descriptors.Rule // nil with statusNoRule
	key     string
	d       limiter.Decision
	reset   bool
	// limits lists every limit of a descriptor with several (rate_limits);
	// rule, key and d are then those of the closest one. nil otherwise.
	limits []limitCounter
}

// limitCounter is one limit's counter.
type limitCounter struct {
	rule *descriptors.Rule
	key  string
	d    limiter.Decision
}

// counters reads (and first resets, when reset) the counter of domain's
// descriptor entries.
func (d *Descriptors) counters(ctx context.Context, domain string, entries []descriptors.Entry, reset bool) (counters, error) {
	if err := validDescriptor(domain, entries); err != nil {
		return counters{}, err
	}
	c := counters{status: statusNoRule, domain: domain, entries: entries}
	var cfg *descriptors.Config
	if d.opts.Config != nil {
		cfg = d.opts.Config()
	}
	if cfg == nil {
		return c, nil
	}
	r := cfg.Match(domain, entries)
	switch {
	case r == nil:
		return c, nil
	case r.Unlimited:
		c.status, c.rule = statusUnlimited, r
		return c, nil
	}
	c.status = statusLimited
	for k := range r.Limits() {
		l, err := d.counter(ctx, domain, entries, r.Limit(k), reset)
		if err != nil {
			return counters{}, err
		}
		if r.Group != nil {
			c.limits = append(c.limits, l)
		}
		if k == 0 || closerCounter(l, limitCounter{c.rule, c.key, c.d}) {
			c.rule, c.key, c.d = l.rule, l.key, l.d
		}
	}
	c.reset = reset
	return c, nil
}

// counter reads (and first resets, when reset) the counter of one limit r
// of domain's descriptor entries.
func (d *Descriptors) counter(ctx context.Context, domain string, entries []descriptors.Entry, r *descriptors.Rule, reset bool) (limitCounter, error) {
	txn := limiter.ForRule(r, entries, 0)
	if reset {
		if _, err := d.opts.Limiter.Reset(ctx, txn); err != nil {
			return limitCounter{}, fmt.Errorf("reset %s: %w", txn.Key, err)
		}
		d.opts.Logger.Info("descriptor counter reset", "domain", domain, "entries", entriesText(entries), "rule", r.StatsKey, "key", txn.Key)
	}
	dec, err := d.opts.Limiter.Check(ctx, txn)
	if err != nil {
		return limitCounter{}, fmt.Errorf("inspect %s: %w", txn.Key, err)
	}
	if r.Burst > 0 {
		// A GCRA peek reports no count: the tokens in use are what is
		// missing from a full bucket.
		dec.Count = int64(r.Burst) - dec.Remaining
	}
	return limitCounter{rule: r, key: txn.Key, d: dec}, nil
}

// closerCounter reports whether a is closer to its limit than b, as a rate
// limit answer chooses among a descriptor's limits: less remaining, then
// a longer reset.
func closerCounter(a, b limitCounter) bool {
	if a.d.Remaining != b.d.Remaining {
		return a.d.Remaining < b.d.Remaining
	}
	return a.d.ResetIn > b.d.ResetIn
}

// entriesText is entries as "key=value, key2=value2" for a log line.
func entriesText(entries []descriptors.Entry) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(e.Key + "=" + e.Value)
	}
	return b.String()
}

// validDescriptor checks the shape of an addressed descriptor: a domain,
// 1 to DefaultMaxEntries entries, each with a key, keys and values of at
// most DefaultMaxEntryBytes.
func validDescriptor(domain string, entries []descriptors.Entry) error {
	switch {
	case domain == "":
		return invalidRequest("domain", "domain must not be empty")
	case len(entries) == 0:
		return invalidRequest("entries", "the descriptor has no entries, want at least one key and value")
	case len(entries) > DefaultMaxEntries:
		return invalidRequest("entries", "the descriptor has %d entries, more than the %d allowed", len(entries), DefaultMaxEntries)
	case len(domain) > DefaultMaxEntryBytes:
		return invalidRequest("domain", "domain is %d bytes long, more than the %d allowed", len(domain), DefaultMaxEntryBytes)
	}
	for i, e := range entries {
		switch {
		case e.Key == "":
			return invalidRequest(fmt.Sprintf("entries[%d].key", i), "entry %d has an empty key", i)
		case len(e.Key) > DefaultMaxEntryBytes || len(e.Value) > DefaultMaxEntryBytes:
			return invalidRequest(fmt.Sprintf("entries[%d]", i), "entry %d: key or value longer than %d bytes", i, DefaultMaxEntryBytes)
		}
	}
	return nil
}

// Inspect answers sluice.v1.Descriptors/Inspect.
func (d *Descriptors) Inspect(ctx context.Context, req *sluicev1.DescriptorRequest) (*sluicev1.Counters, error) {
	return d.grpc(ctx, req, false)
}

// Reset answers sluice.v1.Descriptors/Reset.
func (d *Descriptors) Reset(ctx context.Context, req *sluicev1.DescriptorRequest) (*sluicev1.Counters, error) {
	return d.grpc(ctx, req, true)
}

func (d *Descriptors) grpc(ctx context.Context, req *sluicev1.DescriptorRequest, reset bool) (*sluicev1.Counters, error) {
	entries := make([]descriptors.Entry, len(req.GetEntries()))
	for i, e := range req.GetEntries() {
		entries[i] = descriptors.Entry{Key: e.GetKey(), Value: e.GetValue()}
	}
	c, err := d.counters(ctx, req.GetDomain(), entries, reset)
	if err != nil {
		return nil, grpcError(err)
	}
	return countersProto(c), nil
}

// countersProto translates counters into the gRPC API's: the one place
// where they become a protobuf.
func countersProto(c counters) *sluicev1.Counters {
	out := &sluicev1.Counters{Domain: c.domain, Entries: make([]*sluicev1.DescriptorEntry, len(c.entries)), WasReset: c.reset, Key: c.key}
	for i, e := range c.entries {
		out.Entries[i] = &sluicev1.DescriptorEntry{Key: e.Key, Value: e.Value}
	}
	switch c.status {
	case statusNoRule:
		out.Status = sluicev1.Counters_NO_RULE
		return out
	case statusUnlimited:
		out.Status = sluicev1.Counters_UNLIMITED
	default:
		out.Status = sluicev1.Counters_LIMITED
	}
	r := c.rule
	out.Rule, out.ShadowMode = r.StatsKey, r.ShadowMode
	if c.status != statusLimited {
		return out
	}
	out.Limit = ruleLimitProto(r)
	out.Count, out.Remaining, out.ResetInSeconds = c.d.Count, c.d.Remaining, limiter.ResetSeconds(c.d.ResetIn)
	for _, l := range c.limits {
		out.Limits = append(out.Limits, &sluicev1.LimitCounters{Rule: l.rule.StatsKey, Key: l.key, Limit: ruleLimitProto(l.rule),
			Count: l.d.Count, Remaining: l.d.Remaining, ResetInSeconds: limiter.ResetSeconds(l.d.ResetIn), ShadowMode: l.rule.ShadowMode})
	}
	return out
}

// ruleLimitProto is r's rate_limit block for the gRPC API.
func ruleLimitProto(r *descriptors.Rule) *sluicev1.RuleLimit {
	l := ruleLimitJSON(r)
	return &sluicev1.RuleLimit{RequestsPerUnit: l.RequestsPerUnit, Unit: l.Unit, UnitMultiplier: l.UnitMultiplier, Burst: l.Burst, Algorithm: l.Algorithm}
}

// countersBody is counters as JSON.
type countersBody struct {
	Status         string         `json:"status"`
	Domain         string         `json:"domain"`
	Entries        []entryBody    `json:"entries"`
	Rule           string         `json:"rule,omitempty"`
	Key            string         `json:"key,omitempty"`
	Limit          *ruleLimitBody `json:"limit,omitempty"`
	Count          int64          `json:"count"`
	Remaining      int64          `json:"remaining"`
	ResetInSeconds int64          `json:"reset_in_seconds"`
	Reset          bool           `json:"reset"`
	ShadowMode     bool           `json:"shadow_mode"`
	// Limits lists every limit of a descriptor with several; the fields
	// above are then the closest one's.
	Limits []limitBody `json:"limits,omitempty"`
}

// limitBody is one limit's counter of a descriptor with several, as JSON.
type limitBody struct {
	Rule           string        `json:"rule"`
	Key            string        `json:"key"`
	Limit          ruleLimitBody `json:"limit"`
	Count          int64         `json:"count"`
	Remaining      int64         `json:"remaining"`
	ResetInSeconds int64         `json:"reset_in_seconds"`
	ShadowMode     bool          `json:"shadow_mode"`
}

type entryBody struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type ruleLimitBody struct {
	RequestsPerUnit uint32 `json:"requests_per_unit"`
	Unit            string `json:"unit"`
	UnitMultiplier  uint32 `json:"unit_multiplier"`
	Burst           uint32 `json:"burst"`
	Algorithm       string `json:"algorithm"`
}

// ruleLimitJSON is r's rate_limit block.
func ruleLimitJSON(r *descriptors.Rule) ruleLimitBody {
	l := ruleLimitBody{RequestsPerUnit: r.RequestsPerUnit, Unit: r.Unit.String(), UnitMultiplier: max(r.UnitMultiplier, 1), Burst: r.Burst, Algorithm: "fixed_window"}
	if r.Burst > 0 {
		l.Algorithm = "gcra"
	}
	return l
}

// countersJSON translates counters into the HTTP API's JSON: the one place
// where they become JSON.
func countersJSON(c counters) countersBody {
	out := countersBody{Status: c.status, Domain: c.domain, Entries: make([]entryBody, len(c.entries)), Reset: c.reset, Key: c.key}
	for i, e := range c.entries {
		out.Entries[i] = entryBody{Key: e.Key, Value: e.Value}
	}
	if c.rule == nil {
		return out
	}
	out.Rule, out.ShadowMode = c.rule.StatsKey, c.rule.ShadowMode
	if c.status != statusLimited {
		return out
	}
	l := ruleLimitJSON(c.rule)
	out.Limit = &l
	out.Count, out.Remaining, out.ResetInSeconds = c.d.Count, c.d.Remaining, limiter.ResetSeconds(c.d.ResetIn)
	for _, l := range c.limits {
		out.Limits = append(out.Limits, limitBody{Rule: l.rule.StatsKey, Key: l.key, Limit: ruleLimitJSON(l.rule),
			Count: l.d.Count, Remaining: l.d.Remaining, ResetInSeconds: limiter.ResetSeconds(l.d.ResetIn), ShadowMode: l.rule.ShadowMode})
	}
	return out
}

// inspectHandler serves GET /v1/descriptors/counters?domain=D&entry=K=V...
func (d *Descriptors) inspectHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "method %s not allowed, use GET", r.Method)
			return
		}
		domain, entries, err := descriptorQuery(r.URL.RawQuery)
		d.answerHTTP(w, r, domain, entries, err, false)
	})
}

// resetHandler serves POST /v1/descriptors/reset, the descriptor in a JSON
// body or, with an empty body, in the query string.
func (d *Descriptors) resetHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, "method %s not allowed, use POST", r.Method)
			return
		}
		body, err := readAllBody(w, r)
		if err != nil {
			writeError(w, bodyStatus(err), "read request body: %v (at most %d bytes)", err, MaxBodyBytes)
			return
		}
		var (
			domain  string
			entries []descriptors.Entry
		)
		if len(bytes.TrimSpace(body)) == 0 {
			domain, entries, err = descriptorQuery(r.URL.RawQuery)
		} else {
			if r.URL.RawQuery != "" {
				err = invalidRequest("", "the descriptor is in the body or in the query string, not both")
			} else {
				domain, entries, err = descriptorBody(body)
			}
		}
		d.answerHTTP(w, r, domain, entries, err, true)
	})
}

// answerHTTP writes the counters of domain's entries (reset first when
// reset), or err.
func (d *Descriptors) answerHTTP(w http.ResponseWriter, r *http.Request, domain string, entries []descriptors.Entry, err error, reset bool) {
	var c counters
	if err == nil {
		c, err = d.counters(r.Context(), domain, entries, reset)
	}
	if err != nil {
		writeError(w, httpStatus(err), "%s", err.Error())
		return
	}
	// Descriptor values are shown as they are: "&", "<" and ">" unescaped.
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(countersJSON(c)); err != nil {
		writeError(w, http.StatusInternalServerError, "encode response: %v", err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out.Bytes())
}

// descriptorQuery reads "domain=D&entry=K=V&entry=K2=V2": each entry is
// split at its first "=" (a value may hold more), keys and values
// percent-decoded, entries in order.
func descriptorQuery(raw string) (string, []descriptors.Entry, error) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return "", nil, invalidRequest("", "invalid query string: %v", err)
	}
	var domain string
	var entries []descriptors.Entry
	for name, vs := range q {
		switch name {
		case "domain":
			if len(vs) != 1 {
				return "", nil, invalidRequest("domain", "domain given %d times, want once", len(vs))
			}
			domain = vs[0]
		case "entry":
		default:
			return "", nil, invalidRequest(name, "unknown query parameter %q, want domain and entry", name)
		}
	}
	for i, e := range q["entry"] {
		k, v, ok := strings.Cut(e, "=")
		if !ok {
			return "", nil, invalidRequest(fmt.Sprintf("entry[%d]", i), "entry %d %q has no \"=\", want KEY=VALUE", i, e)
		}
		entries = append(entries, descriptors.Entry{Key: k, Value: v})
	}
	return domain, entries, nil
}

// descriptorRequestBody is the JSON body of POST /v1/descriptors/reset.
type descriptorRequestBody struct {
	Domain  string      `json:"domain"`
	Entries []entryBody `json:"entries"`
}

// descriptorBody reads {"domain": D, "entries": [{"key": K, "value": V}]}:
// no unknown field, nothing after the object.
func descriptorBody(body []byte) (string, []descriptors.Entry, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var b descriptorRequestBody
	if err := dec.Decode(&b); err != nil {
		return "", nil, invalidRequest("", "%s", jsonProblem(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", nil, invalidRequest("", "invalid JSON: data after the request object")
	}
	entries := make([]descriptors.Entry, len(b.Entries))
	for i, e := range b.Entries {
		entries[i] = descriptors.Entry{Key: e.Key, Value: e.Value}
	}
	return b.Domain, entries, nil
}
