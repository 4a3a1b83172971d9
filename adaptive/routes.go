package adaptive

import (
	"fmt"
	"strings"
)

// route is a parsed path template such as "/users/{id}/posts" or
// "/files/{path...}".
type route struct {
	pattern string
	segs    []routeSeg
}

type routeSeg struct {
	lit  string // literal text; "" for a wildcard
	wild bool   // {name}: one non-empty segment
	rest bool   // {name...}: the rest of the path, possibly empty
}

// parseRoute reads a template: it starts with "/", its segments are
// literals, {name} (one segment) or, last only, {name...} (the rest).
func parseRoute(p string) (route, error) {
	if !strings.HasPrefix(p, "/") {
		return route{}, fmt.Errorf("route %q must start with /", p)
	}
	r := route{pattern: p}
	parts := strings.Split(p[1:], "/")
	names := map[string]bool{}
	for i, s := range parts {
		if !strings.ContainsAny(s, "{}") {
			r.segs = append(r.segs, routeSeg{lit: s})
			continue
		}
		if len(s) < 3 || s[0] != '{' || s[len(s)-1] != '}' || strings.ContainsAny(s[1:len(s)-1], "{}") {
			return route{}, fmt.Errorf("route %q: bad segment %q, a wildcard is a whole segment {name}", p, s)
		}
		name := s[1 : len(s)-1]
		seg := routeSeg{wild: true}
		if n, ok := strings.CutSuffix(name, "..."); ok {
			if i != len(parts)-1 {
				return route{}, fmt.Errorf("route %q: {%s} must be the last segment", p, name)
			}
			seg = routeSeg{rest: true}
			name = n
		}
		if name == "" {
			return route{}, fmt.Errorf("route %q: a wildcard needs a name", p)
		}
		if names[name] {
			return route{}, fmt.Errorf("route %q: duplicate wildcard {%s}", p, name)
		}
		names[name] = true
		r.segs = append(r.segs, seg)
	}
	return r, nil
}

// match reports whether path fits the template. It does not allocate.
func (r *route) match(path string) bool {
	if path == "" || path[0] != '/' {
		return false
	}
	rest := path[1:]
	for i, s := range r.segs {
		if s.rest {
			return true
		}
		seg, after, more := strings.Cut(rest, "/")
		switch {
		case s.wild:
			if seg == "" {
				return false
			}
		case seg != s.lit:
			return false
		}
		last := i == len(r.segs)-1
		if last {
			return !more
		}
		if !more {
			// The path ended; only a trailing {name...} may follow.
			return i+2 == len(r.segs) && r.segs[i+1].rest
		}
		rest = after
	}
	return false
}
