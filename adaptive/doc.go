// Package adaptive is Sluice's latency-aware HTTP limiter: a net/http
// middleware and a reverse proxy that watch each URL's traffic and response
// time and lower the allowed rate as the backend slows down.
//
// # The seed's rule
//
// Per key (a URL's route, see below) the limiter keeps a sliding window
// (Config.Window, 60 s by default) of the requests it admitted and of their
// response times. The allowed rate follows the average response time:
// MaxRate (240) at or below MinValue (300 ms), MinRate (4) at or above
// MaxValue (18000 ms), a straight line in between (Params.AllowedRate):
//
//	rate = maxRate - (avg - minValue) × (maxRate - minRate) / (maxValue - minValue)
//
// A request goes through iff count < rate, comparing the integer count of
// admitted requests in the window with the fractional rate as the seed
// does: at 5000 ms the rate is 177.33, so counts 0 to 177 pass and a window
// admits 178 requests; at 300 ms exactly 240. With no latency sample in the
// window the rate is MaxRate.
//
// Rates are requests per window, not per minute: with window: 30s and
// maxRate: 240 a route may take 240 requests in any 30 s. To keep a
// per-minute rate when changing the window, scale the rates by
// window / 1m yourself.
//
// The window is 60 slots of Window/60 each (whole seconds, at least one,
// with Shared); a slot leaves the window whole, so a request stops
// counting between Window−slot and Window after it was admitted.
//
// # What is measured
//
// Requests are counted when admitted; 429s are never counted or measured.
// A forwarded request's response time runs from admission to the first
// response byte: the upstream's response headers (proxy) or the handler's
// first WriteHeader, Write or Flush (middleware). Upgrades (101), server-sent
// events (text/event-stream), requests cancelled before the first byte and
// panicking handlers never enter the average. Upstream failures (the
// proxy's 502) are counted apart, in a metric and Stats.Errors.
//
// # Denials
//
// Paths that contain one of Rules.Asset.Contains ("/api/") or end in one of
// Rules.Asset.Suffixes (".js", ".css", ".png", ".json") follow the asset
// rule and get an empty 429; all other paths follow the html rule and get a
// small HTML page titled "Whoa, Slow Down There!". Both carry
// Cache-Control: no-store, no-cache, must-revalidate, max-age=0, Pragma:
// no-cache, Expires: 0 and Retry-After (seconds until the oldest counted
// request leaves the window, at least 1). Each rule may set its own
// minValue, maxValue, maxRate, minRate, curve and minSamples.
//
// # Keys
//
// A request is counted under the ServeMux pattern that matched it (when the
// middleware wraps a single mux route), else the first of Config.Routes
// (templates such as /users/{id} or /files/{path...}) that matches its
// path, else its path without the query. At most MaxKeys keys are tracked;
// a new key beyond that evicts keys idle for a whole window (at most one
// sweep per slot), and when none is idle it is counted under OverflowKey,
// "(overflow)", whose budget all such requests share.
//
// # Extensions, all off by default
//
//   - minSamples: the average lowers the rate only once the window holds at
//     least that many samples.
//   - curve: inverse: rate = k / (avg + c) through the same two end points,
//     which keeps rate × latency, the work in flight, constant (Little's
//     law). With the seed's numbers, rate = 72000 / avg.
//   - perClient: a client (RemoteAddr's IP, or the first value of
//     clientHeader) may have at most rate / activeClients requests admitted
//     in a key's window, where activeClients counts the clients with a
//     request in that window, this one included. At most 1024 clients are
//     tracked per key; more share one share.
//   - dryRun: never deny; would-be denials are counted in
//     sluice_adaptive_dry_run_denials_total and the requests go ahead (and
//     count).
//   - headers: RateLimit-Policy: "adaptive";q=Q;w=W and RateLimit:
//     "adaptive";r=R;t=T (draft-ietf-httpapi-ratelimit-headers) on every
//     answer, where Q is the number of requests the current rate admits per
//     window, W the window in seconds, R what is left of Q and T the
//     seconds until the oldest counted request leaves the window.
//
// # Shared state
//
// With Options.Shared the windows live in the store behind that
// limiter.Limiter (fixed-window buckets per slot: count, samples, latency
// sum in ms, upstream errors) so that several proxies share them; see
// sharedState for the protocol. Each admitted request costs about three
// store batches. Without it the state is in-process.
//
// # Metrics
//
// With Options.Registerer: the seed's gauges request_count_by_url and
// request_resp_avg_by_url (names from countMetricName and valueMetricName,
// dots made underscores), sluice_adaptive_allowed_rate and
// sluice_adaptive_upstream_errors_in_window, all labelled by route (bounded
// by MaxKeys); sluice_adaptive_denied_total and
// sluice_adaptive_dry_run_denials_total by rule (html, asset);
// sluice_adaptive_upstream_errors_total, sluice_adaptive_store_errors_total
// and sluice_adaptive_keys.
package adaptive
