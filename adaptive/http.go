package adaptive

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/limiter"
)

// Middleware returns next behind the limiter: each request is admitted or
// answered 429, and the time from admission to next's first WriteHeader,
// Write or Flush is recorded as the request's response time.
//
// Inside a ServeMux route (mux.Handle("GET /users/{id}",
// l.Middleware(h))) requests are counted under the route's pattern;
// wrapping the whole mux sees no pattern yet, and counts by configured
// routes or path. Upgrades (101, or a hijacked connection), event streams
// (Content-Type text/event-stream), requests cancelled before the first
// byte and handlers that panic are counted but never measured.
//
// The returned handler is safe for concurrent use.
func (l *Limiter) Middleware(next http.Handler) http.Handler {
	return &middleware{l: l, next: next}
}

type middleware struct {
	l    *Limiter
	next http.Handler
}

func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The writer and the admission in one allocation.
	tw := &timingWriter{ResponseWriter: w, r: r}
	a := &tw.admission
	tw.a = a
	m.l.admitTo(r, a)
	if !a.allowed {
		m.l.deny(w, a)
		return
	}
	if m.l.cfg.Headers {
		m.l.setRateLimitHeaders(w.Header(), a, false)
	}
	defer a.finish()
	m.next.ServeHTTP(tw, r)
	// A handler that wrote nothing gets net/http's implicit 200 now.
	tw.first(http.StatusOK)
}

// timingWriter notes the first response byte of an admitted request.
type timingWriter struct {
	http.ResponseWriter
	a         *admission // &admission
	r         *http.Request
	started   bool
	admission admission
}

// first records the request's outcome when the response starts with code.
func (w *timingWriter) first(code int) {
	if w.started {
		return
	}
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		return // an interim response; the final one is still to come
	}
	w.started = true
	a := w.a
	switch {
	case code == http.StatusSwitchingProtocols,
		isEventStream(w.Header().Get("Content-Type")),
		w.r.Context().Err() != nil:
		a.exclude()
	default:
		a.observe(a.l.clock.Now())
	}
}

func (w *timingWriter) WriteHeader(code int) {
	w.first(code)
	w.ResponseWriter.WriteHeader(code)
}

func (w *timingWriter) Write(p []byte) (int, error) {
	w.first(http.StatusOK)
	return w.ResponseWriter.Write(p)
}

// Flush sends what is buffered, starting the response if need be.
func (w *timingWriter) Flush() {
	w.first(http.StatusOK)
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack takes the connection over; the request is then never measured.
func (w *timingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.started = true
	w.a.exclude()
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *timingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func isEventStream(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "text/event-stream")
}

// deny answers 429 for the rule of a: the HTML page or an empty body, with
// no-cache headers and Retry-After.
func (l *Limiter) deny(w http.ResponseWriter, a *admission) {
	h := w.Header()
	h.Set("Cache-Control", "no-store, no-cache, must-revalidate, max-age=0")
	h.Set("Pragma", "no-cache")
	h.Set("Expires", "0")
	h.Set("Retry-After", strconv.FormatInt(limiter.RetryAfter(a.retryAfter), 10))
	if l.cfg.Headers {
		l.setRateLimitHeaders(h, a, true)
	}
	if a.rule.name == RuleAsset {
		h.Set("Content-Length", "0")
		h.Del("Content-Type")
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(slowDownPage)))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write(slowDownPage)
}

// setRateLimitHeaders writes the draft-ietf-httpapi-ratelimit-headers
// fields: the policy (quota q per window w seconds) and the current state
// (r remaining, t seconds until the oldest counted request leaves).
func (l *Limiter) setRateLimitHeaders(h http.Header, a *admission, denied bool) {
	q := quota(a.rate)
	rem := max(q-a.count, 0)
	if denied {
		rem = 0
	}
	w := int64(l.window.Seconds())
	t := limiter.RetryAfter(a.retryAfter)
	h.Set("RateLimit-Policy", `"adaptive";q=`+strconv.FormatInt(q, 10)+";w="+strconv.FormatInt(max(w, 1), 10))
	h.Set("RateLimit", `"adaptive";r=`+strconv.FormatInt(rem, 10)+";t="+strconv.FormatInt(t, 10))
}

// slowDownPage is the HTML rule's 429 page.
var slowDownPage = []byte(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex">
<title>Whoa, Slow Down There!</title>
<style>
  body { margin: 0; font-family: system-ui, -apple-system, "Segoe UI", sans-serif;
         background: #f6f7f9; color: #1d2433; line-height: 1.5; }
  main { max-width: 36rem; margin: 12vh auto; padding: 2rem; background: #fff;
         border-radius: 0.75rem; box-shadow: 0 1px 4px rgba(0,0,0,.12); }
  h1 { font-size: 1.75rem; margin-top: 0; }
  a { color: #0b57d0; }
  @media (prefers-color-scheme: dark) {
    body { background: #15181e; color: #e6e8ec; }
    main { background: #20242c; box-shadow: none; }
    a { color: #8ab4f8; }
  }
</style>
</head>
<body>
<main role="main" aria-labelledby="title">
  <h1 id="title">Whoa, Slow Down There!</h1>
  <p>We are getting more requests for this page than we can answer well right now,
     so we are holding a few back to keep things running for everyone.</p>
  <p>Please wait a few seconds and then <a href="">try again</a>.
     Your browser may also retry by itself.</p>
  <p><small>HTTP 429 &middot; Too Many Requests</small></p>
</main>
</body>
</html>
`)
