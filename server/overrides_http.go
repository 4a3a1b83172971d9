package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/limits"
)

// The runtime override calls, as metric label values.
const (
	methodOverrideList   = "override_list"
	methodOverrideGet    = "override_get"
	methodOverridePut    = "override_put"
	methodOverrideDelete = "override_delete"
)

// overridesPath is the path of the runtime overrides API.
const overridesPath = "/v1/overrides"

// overridesHTTP serves the runtime overrides of kv (see docs/api.md):
//
//	GET    /v1/overrides             every runtime override: {"overrides": [...]}
//	GET    /v1/overrides/{name}/{id} one, or 404
//	PUT    /v1/overrides/{name}/{id} {"burst": 10, "count": 10, "period": "1h", "comment": "..."}
//	DELETE /v1/overrides/{name}/{id} remove it, or 404
//
// The id is everything after the name's slash, so an IPv6 range such as
// 2001:db8::/48 may be written as it is or percent-encoded (%2F). Every
// call needs the administrator's credentials (AdminAuth), and when none
// are configured every call is refused: 403. A store that keeps no
// overrides answers 501.
func overridesHTTP(kv *KV) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := kv.clock.Now()
		method, status := kv.serveOverride(w, r)
		if method != "" {
			kv.metrics.observe(method, start, kv.clock.Now())
		}
		if status == http.StatusForbidden {
			kv.log.Warn("key-value runtime override call refused", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
		}
	})
}

// serveOverride answers one call of the overrides API and returns its
// method label ("" for a call that names none) and status.
func (kv *KV) serveOverride(w http.ResponseWriter, r *http.Request) (string, int) {
	fail := func(method string, err error) (string, int) {
		code := httpStatus(err)
		writeError(w, code, "%s", err.Error())
		return method, code
	}
	who, err := kv.overrideCaller(r)
	if err != nil {
		return fail("", err)
	}
	rest := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, overridesPath), "/")
	if rest == "" {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			writeError(w, http.StatusMethodNotAllowed, "method %s not allowed on %s, use GET", r.Method, overridesPath)
			return "", http.StatusMethodNotAllowed
		}
		list, err := kv.overrides.List()
		if err != nil {
			return fail(methodOverrideList, err)
		}
		out := overrideList{Overrides: make([]overrideJSON, len(list))}
		for i, o := range list {
			out.Overrides[i] = overrideToJSON(o)
		}
		return methodOverrideList, writeJSON(w, out)
	}
	name, id, ok := strings.Cut(rest, "/")
	if !ok || name == "" {
		writeError(w, http.StatusNotFound, "no such endpoint %s; use %s or %s/{name}/{id}", r.URL.Path, overridesPath, overridesPath)
		return "", http.StatusNotFound
	}
	switch r.Method {
	case http.MethodGet:
		o, err := kv.overrides.Get(name, id)
		if err != nil {
			return fail(methodOverrideGet, err)
		}
		return methodOverrideGet, writeJSON(w, overrideToJSON(o))
	case http.MethodPut:
		body, err := readBody(w, r)
		if err != nil {
			return fail(methodOverridePut, invalidTransaction("", "%v", err))
		}
		var req overrideRequest
		if err := decodeStrict(body, &req); err != nil {
			return fail(methodOverridePut, err)
		}
		spec := limits.RuntimeSpec{Name: name, ID: id, Burst: req.Burst, Count: req.Count, Period: req.Period, Comment: req.Comment}
		o, err := kv.overrides.Put(r.Context(), spec, who)
		if err != nil {
			kv.logInternal(methodOverridePut, err)
			return fail(methodOverridePut, err)
		}
		return methodOverridePut, writeJSON(w, overrideToJSON(o))
	case http.MethodDelete:
		o, err := kv.overrides.Delete(r.Context(), name, id, who)
		if err != nil {
			kv.logInternal(methodOverrideDelete, err)
			return fail(methodOverrideDelete, err)
		}
		return methodOverrideDelete, writeJSON(w, overrideToJSON(o))
	}
	w.Header().Set("Allow", "GET, PUT, DELETE")
	writeError(w, http.StatusMethodNotAllowed, "method %s not allowed on %s/{name}/{id}, use GET, PUT or DELETE", r.Method, overridesPath)
	return "", http.StatusMethodNotAllowed
}

// overrideCaller checks the credentials of a call to the overrides API,
// which, unlike the other key-value calls, needs them always: with no
// credentials configured, every call is refused. It returns who made the
// call, for the log: "token" or "client certificate <SAN>".
func (kv *KV) overrideCaller(r *http.Request) (string, error) {
	return overrideCaller(kv.guard, func(one AdminAuth) error { return one.allowHTTP(r) })
}

// overrideCaller tells which of g's credentials a call to the overrides
// API carries, allow checking the call against one of them: "token" or
// "client certificate <SAN>"; errNoAdmin when g has none, errNotAdmin
// when the call carries neither.
func overrideCaller(g AdminAuth, allow func(AdminAuth) error) (string, error) {
	if !g.on() {
		return "", errNoAdmin
	}
	if g.Token != "" && allow(AdminAuth{Token: g.Token}) == nil {
		return "token", nil
	}
	if g.ClientSAN != "" && allow(AdminAuth{ClientSAN: g.ClientSAN}) == nil {
		return "client certificate " + g.ClientSAN, nil
	}
	return "", errNotAdmin
}

// The errors for a caller of the overrides API without the
// administrator's credentials.
var (
	errNoAdmin = &limiter.Error{Kind: limiter.Forbidden,
		Msg: "runtime overrides need an administrator's credentials and none are configured: set --kv-admin-token-file or --kv-admin-client-san"}
	errNotAdmin = &limiter.Error{Kind: limiter.Forbidden,
		Msg: "runtime overrides need an administrator's credentials: the bearer token of --kv-admin-token-file or a client certificate naming --kv-admin-client-san"}
)

// writeJSON answers 200 with v as JSON and returns the status.
func writeJSON(w http.ResponseWriter, v any) int {
	out, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "encode response: %v", err)
		return http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(out, '\n'))
	return http.StatusOK
}

// overrideRequest is the body of PUT /v1/overrides/{name}/{id}.
type overrideRequest struct {
	Burst   *int64 `json:"burst"`
	Count   *int64 `json:"count"`
	Period  string `json:"period"`
	Comment string `json:"comment"`
}

// overrideJSON is a runtime override as JSON.
type overrideJSON struct {
	Name    string `json:"name"`
	ID      string `json:"id"`
	Key     string `json:"key"`
	Burst   int64  `json:"burst"`
	Count   int64  `json:"count"`
	Period  string `json:"period"`
	Comment string `json:"comment"`
	Updated string `json:"updated"` // RFC 3339, UTC
}

// overrideList is the answer of GET /v1/overrides.
type overrideList struct {
	Overrides []overrideJSON `json:"overrides"`
}

// overrideToJSON translates a runtime override into the API's JSON.
func overrideToJSON(o limits.Override) overrideJSON {
	j := overrideJSON{Name: o.Name.Text, ID: o.ID, Key: o.Key, Burst: o.Limit.Burst, Count: o.Limit.Count,
		Period: o.Limit.Period.String(), Comment: o.Comment}
	if !o.Updated.IsZero() {
		j.Updated = o.Updated.UTC().Format(time.RFC3339Nano)
	}
	return j
}
