package adaptive

import (
	"context"
	"errors"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"
)

// NewProxy returns a reverse proxy to upstream behind l: each request is
// admitted or answered 429 as by Middleware; an admitted one is forwarded,
// and the time until the upstream's response headers arrive (its first
// response byte) is recorded as its response time. Upgrades (101), event
// streams and requests the client cancels are not measured; upstream
// failures are answered 502, counted apart and never measured.
//
// The proxy is built on httputil.ReverseProxy: the outbound URL and Host
// become upstream's, X-Forwarded-For/-Host/-Proto are set, and the
// upstream's path is joined in front of the request's. The handler is safe
// for concurrent use.
func NewProxy(upstream *url.URL, l *Limiter, o ProxyOptions) http.Handler {
	p := &proxy{l: l, timeout: o.Timeout}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.SetXForwarded()
		},
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.errorHandler,
	}
	return p
}

// ProxyOptions configure NewProxy.
type ProxyOptions struct {
	// Timeout bounds the wait for the upstream's response headers,
	// connecting included; 0: no bound. Response bodies are not bounded,
	// so long downloads and streams go on.
	Timeout time.Duration
}

type proxy struct {
	l       *Limiter
	rp      *httputil.ReverseProxy
	timeout time.Duration
}

type admissionKey struct{}

// forwarded is what the proxy keeps about a forwarded request.
type forwarded struct {
	a     *admission
	timer *time.Timer // nil without a timeout
}

// errUpstreamTimeout is the cause of a request's context when the upstream
// took longer than the timeout to answer.
var errUpstreamTimeout = errors.New("upstream timeout")

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a := p.l.admit(r)
	if !a.allowed {
		p.l.deny(w, a)
		return
	}
	if p.l.cfg.Headers {
		p.l.setRateLimitHeaders(w.Header(), a, false)
	}
	defer a.finish()
	f := &forwarded{a: a}
	ctx := r.Context()
	if p.timeout > 0 {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		f.timer = time.AfterFunc(p.timeout, func() { cancel(errUpstreamTimeout) })
		defer f.timer.Stop()
	}
	p.rp.ServeHTTP(w, r.WithContext(context.WithValue(ctx, admissionKey{}, f)))
}

// modifyResponse runs when the upstream's response headers arrive.
func (p *proxy) modifyResponse(resp *http.Response) error {
	f, _ := resp.Request.Context().Value(admissionKey{}).(*forwarded)
	if f == nil {
		return nil
	}
	if f.timer != nil && !f.timer.Stop() {
		// The timeout fired as the headers came: the request's context is
		// cancelled, and the body could not be read.
		return errUpstreamTimeout
	}
	a := f.a
	if resp.StatusCode == http.StatusSwitchingProtocols ||
		isEventStream(resp.Header.Get("Content-Type")) ||
		resp.Request.Context().Err() != nil {
		a.exclude()
		return nil
	}
	a.observe(p.l.clock.Now())
	return nil
}

// errorHandler is the proxy's one ErrorHandler: the upstream could not be
// reached or failed before answering. A request the client cancelled is
// not the upstream's fault and is only excluded.
func (p *proxy) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	var a *admission
	if f, _ := r.Context().Value(admissionKey{}).(*forwarded); f != nil {
		a = f.a
	}
	if errors.Is(context.Cause(r.Context()), errUpstreamTimeout) || errors.Is(err, errUpstreamTimeout) {
		if a != nil {
			a.observe(p.l.clock.Now()) // at least the timeout: a slow URL
		}
		p.l.log.Warn("adaptive proxy: upstream timeout", "url", r.URL.String(), "timeout", p.timeout)
		w.WriteHeader(http.StatusGatewayTimeout)
		return
	}
	if r.Context().Err() != nil || errors.Is(err, context.Canceled) {
		if a != nil {
			a.exclude()
		}
		w.WriteHeader(499) // nginx's "client closed request"; nobody reads it
		return
	}
	if a != nil {
		a.upstreamError(p.l.clock.Now())
	}
	p.l.log.Warn("adaptive proxy: upstream error", "url", r.URL.String(), "err", err)
	w.WriteHeader(http.StatusBadGateway)
}
