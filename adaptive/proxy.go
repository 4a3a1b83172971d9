package adaptive

import (
	"context"
	"errors"
	"net/http"
	"net/http/httputil"
	"net/url"
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
func NewProxy(upstream *url.URL, l *Limiter) http.Handler {
	p := &proxy{l: l}
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

type proxy struct {
	l  *Limiter
	rp *httputil.ReverseProxy
}

type admissionKey struct{}

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
	p.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), admissionKey{}, a)))
}

// modifyResponse runs when the upstream's response headers arrive.
func (p *proxy) modifyResponse(resp *http.Response) error {
	a, _ := resp.Request.Context().Value(admissionKey{}).(*admission)
	if a == nil {
		return nil
	}
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
	a, _ := r.Context().Value(admissionKey{}).(*admission)
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
