package adaptive

import (
	"fmt"
	"hash/maphash"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/limiter"
)

// OverflowKey is the key under which requests are counted when MaxKeys
// distinct keys are tracked and none of them is idle. All such requests
// share one budget until an idle key can be evicted.
const OverflowKey = "(overflow)"

// maxClientsPerKey bounds the clients tracked per key with PerClient on;
// further clients share one slot, named otherClient. maxClientBytes
// bounds a client's name: a ClientHeader value is cut to it, so that
// long values (a server takes a megabyte of headers) cannot make the
// clients of every key take gigabytes.
const (
	maxClientsPerKey = 1024
	otherClient      = "(other)"
	maxClientBytes   = 256
)

// MaxClients bounds the clients tracked with PerClient on, every key
// together: past it a new client of any key shares its key's otherClient
// slot. Without it, MaxKeys keys of maxClientsPerKey clients each could
// take gigabytes: 1,000 keys of 1,024 clients with 205-byte names took
// 538.6 MB of heap (about 550 bytes a client), so 10,000 keys about
// 5 GB; with it, 139.9 MB (BenchmarkClientsHeld).
const MaxClients = 1 << 18

// Options are a Limiter's collaborators. The zero value is usable: the
// real clock, no metrics, in-process state, no logging.
type Options struct {
	// Clock tells the time for windows and latencies. Default clock.New().
	Clock clock.Clock
	// Registerer receives the limiter's metrics. Default none; the global
	// default registerer is never used.
	Registerer prometheus.Registerer
	// Shared, when set, keeps the counts and latency sums in its store so
	// that several proxies share them (see the package documentation). Its
	// store must use the caller's time (not store/redis's ClockServer).
	// Default nil: in-process state.
	Shared *limiter.Limiter
	// StorePrefix starts every store key. Default "adaptive:".
	StorePrefix string
	// StoreTimeout bounds each store call; on error or timeout the limiter
	// decides from the last state it saw. Default 250ms.
	StoreTimeout time.Duration
	// Logger receives warnings (store errors, upstream errors). Default:
	// discard.
	Logger *slog.Logger
}

// Limiter is the adaptive limiter: per key, a sliding window of admitted
// requests and response times, and a decision for each request. Build one
// with New; the zero value is not usable. A Limiter is safe for concurrent
// use and starts no goroutines, so it needs no Close.
type Limiter struct {
	cfg       Config
	html      ruleState
	asset     ruleState
	routes    []route
	clock     clock.Clock
	log       *slog.Logger
	slotNs    int64 // length of one window slot, in nanoseconds
	nslots    int
	window    time.Duration // nslots × slot
	seed      maphash.Seed
	shards    [numShards]shard
	keys      atomic.Int64 // entries in the shards
	lastSweep atomic.Int64 // slot index of the last sweep for idle keys
	overflow  *entry
	m         *metrics
	shared    *sharedState // nil for in-process state
	// clients counts the clients tracked in every entry's clients map,
	// at most maxClients (MaxClients; tests lower it) plus one
	// otherClient a key.
	clients    atomic.Int64
	maxClients int64
}

// Rule names, the closed set of the denial metrics' "rule" label.
const (
	RuleHTML  = "html"
	RuleAsset = "asset"
)

// ruleState is a rule resolved for use.
type ruleState struct {
	name       string
	p          Params
	minSamples int
}

const numShards = 32

type shard struct {
	mu sync.RWMutex // protects m
	m  map[string]*entry
}

// entry is one key's state.
type entry struct {
	key string

	mu       sync.Mutex // protects the fields below
	ring     ring
	inflight int  // admitted requests not yet finished
	evicted  bool // removed from its shard; look the key up again
	rule     *ruleState
	clients  map[string]*countRing // PerClient only
	cslot    int64                 // slot at which clients were last swept
	active   int                   // clients with a count in the window
	synced   int64                 // store mode: newest slot read from the store
}

// New builds a Limiter from cfg, which must be valid (see
// Config.Validate), and opts. It registers the metrics on
// opts.Registerer and fails if that does.
func New(cfg Config, opts Options) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("adaptive: invalid config: %w", err)
	}
	l := &Limiter{cfg: cfg, clock: opts.Clock, log: opts.Logger, seed: maphash.MakeSeed(), maxClients: MaxClients}
	if l.clock == nil {
		l.clock = clock.New()
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	hp, hm := cfg.Rules.HTML.params(cfg.Params, cfg.MinSamples)
	ap, am := cfg.Rules.Asset.params(cfg.Params, cfg.MinSamples)
	l.html = ruleState{name: RuleHTML, p: hp, minSamples: hm}
	l.asset = ruleState{name: RuleAsset, p: ap, minSamples: am}
	for _, p := range cfg.Routes {
		r, err := parseRoute(p)
		if err != nil {
			return nil, fmt.Errorf("adaptive: %w", err) // unreachable after Validate
		}
		l.routes = append(l.routes, r)
	}
	l.nslots = 60
	l.slotNs = int64(cfg.Window) / 60
	if opts.Shared != nil {
		// Store windows are whole seconds: slots of at least one second.
		sec := max(int64(time.Second), (int64(cfg.Window)/60+int64(time.Second)-1)/int64(time.Second)*int64(time.Second))
		l.slotNs = sec
		l.nslots = int((int64(cfg.Window) + sec - 1) / sec)
		prefix := opts.StorePrefix
		if prefix == "" {
			prefix = "adaptive:"
		}
		timeout := opts.StoreTimeout
		if timeout <= 0 {
			timeout = 250 * time.Millisecond
		}
		l.shared = &sharedState{lim: opts.Shared, prefix: prefix, timeout: timeout}
	}
	l.window = time.Duration(l.slotNs * int64(l.nslots))
	for i := range l.shards {
		l.shards[i].m = make(map[string]*entry)
	}
	l.overflow = l.newEntry(OverflowKey, l.slotIndex(l.clock.Now()))
	m, err := newMetrics(l, opts.Registerer)
	if err != nil {
		return nil, err
	}
	l.m = m
	return l, nil
}

func (l *Limiter) newEntry(key string, cur int64) *entry {
	e := &entry{key: key, ring: newRing(l.nslots), rule: &l.html, synced: -1}
	e.ring.head = cur
	return e
}

// slotIndex is the absolute index of the slot containing t.
func (l *Limiter) slotIndex(t time.Time) int64 {
	i := t.UnixNano() / l.slotNs
	if i < 0 {
		return 0
	}
	return i
}

// Config returns the configuration the limiter runs with.
func (l *Limiter) Config() Config { return l.cfg }

// ruleFor picks the rule of a path: asset if an asset pattern matches.
func (l *Limiter) ruleFor(path string) *ruleState {
	for _, s := range l.cfg.Rules.Asset.Suffixes {
		if strings.HasSuffix(path, s) {
			return &l.asset
		}
	}
	for _, s := range l.cfg.Rules.Asset.Contains {
		if strings.Contains(path, s) {
			return &l.asset
		}
	}
	return &l.html
}

// MaxKeyBytes bounds a key taken from a request's path: a longer path is
// counted under its first MaxKeyBytes bytes, cut at a character's
// boundary. An HTTP server takes request lines of up to a megabyte, and
// each tracked key is kept, with its metric labels, until it is idle for
// a window: without the bound, requests with long distinct paths could
// make the MaxKeys keys take gigabytes.
const MaxKeyBytes = 1024

// Key is the key a request is counted under: the ServeMux pattern that
// matched it if any, else the first configured route it matches, else its
// path without the query, up to MaxKeyBytes.
func (l *Limiter) Key(r *http.Request) string {
	if r.Pattern != "" {
		return r.Pattern
	}
	path := r.URL.Path
	for i := range l.routes {
		if l.routes[i].match(path) {
			return l.routes[i].pattern
		}
	}
	if path == "" {
		return "/"
	}
	// Cut before the repair, so that a long path is not copied whole, and
	// again after it, which may lengthen it.
	path = cutKey(path)
	if !utf8.ValidString(path) {
		// Keys are metric label values, which must be UTF-8.
		path = cutKey(strings.ToValidUTF8(path, "\uFFFD"))
	}
	return path
}

// cutKey returns s's first MaxKeyBytes bytes at most, cut before a
// character's first byte (within its last utf8.UTFMax bytes: an invalid
// run is cut anywhere, and repaired by the caller).
func cutKey(s string) string {
	if len(s) <= MaxKeyBytes {
		return s
	}
	cut := MaxKeyBytes
	for cut > MaxKeyBytes-utf8.UTFMax && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// lookup returns the entry for key, creating it when there is room. With
// MaxKeys entries and none idle, it returns the overflow entry.
func (l *Limiter) lookup(key string, cur int64) *entry {
	sh := &l.shards[maphash.String(l.seed, key)%numShards]
	sh.mu.RLock()
	e := sh.m[key]
	sh.mu.RUnlock()
	if e != nil {
		return e
	}
	if l.keys.Load() >= int64(l.cfg.MaxKeys) {
		l.sweep(cur)
		if l.keys.Load() >= int64(l.cfg.MaxKeys) {
			return l.overflow
		}
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e = sh.m[key]; e != nil {
		return e
	}
	e = l.newEntry(strings.Clone(key), cur)
	sh.m[e.key] = e
	l.keys.Add(1)
	return e
}

// sweep evicts idle entries: none admitted or measured in the window and
// none in flight. It runs at most once per slot.
func (l *Limiter) sweep(cur int64) {
	last := l.lastSweep.Load()
	if last >= cur || !l.lastSweep.CompareAndSwap(last, cur) {
		return
	}
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			e.mu.Lock()
			e.ring.advance(cur)
			if e.inflight == 0 && e.ring.total == (slot{}) {
				e.evicted = true
				delete(sh.m, k)
				l.keys.Add(-1)
				l.clients.Add(-int64(len(e.clients)))
			}
			e.mu.Unlock()
		}
		sh.mu.Unlock()
	}
}

// admission is the decision on one request and, when admitted, what is
// needed to record its outcome.
type admission struct {
	l          *Limiter
	e          *entry
	rule       *ruleState
	allowed    bool  // the request goes ahead (always, in dry run)
	wouldDeny  bool  // dry run: it would have been denied
	count      int64 // admitted in the window, this request included
	rate       float64
	retryAfter time.Duration // until the oldest counted request leaves
	start      time.Time
	done       atomic.Bool // outcome recorded or excluded
}

// admit decides on r and, if it goes ahead, counts it.
func (l *Limiter) admit(r *http.Request) *admission {
	a := new(admission)
	l.admitTo(r, a)
	return a
}

// admitTo is admit writing the admission to a, which must be zero, so
// that a caller can allocate it along with something else.
func (l *Limiter) admitTo(r *http.Request, a *admission) {
	now := l.clock.Now()
	cur := l.slotIndex(now)
	rule := l.ruleFor(r.URL.Path)
	key := l.Key(r)
	var client string
	if l.cfg.PerClient {
		client = l.clientOf(r)
	}
	a.l, a.rule, a.start = l, rule, now
	for {
		e := l.lookup(key, cur)
		if l.shared != nil {
			l.shared.sync(r.Context(), l, e, cur)
		}
		e.mu.Lock()
		if e.evicted {
			e.mu.Unlock()
			continue
		}
		a.e = e
		l.decide(a, e, now, cur, client)
		e.mu.Unlock()
		break
	}
	if a.allowed && l.shared != nil {
		l.shared.spend(r.Context(), l, a.e, cur)
	}
	if l.m != nil {
		switch {
		case a.wouldDeny:
			l.m.dryRun(rule.name).Inc()
		case !a.allowed:
			l.m.denied(rule.name).Inc()
		}
	}
}

// decide applies the seed's rule, count < allowedRate, and the per-client
// share. requires e.mu held.
func (l *Limiter) decide(a *admission, e *entry, now time.Time, cur int64, client string) {
	e.ring.advance(cur)
	e.rule = a.rule
	p := &a.rule.p
	rate := p.MaxRate
	if avg, n := e.ring.avgMs(); n > 0 && n >= int64(a.rule.minSamples) {
		rate = p.AllowedRate(avg)
	}
	count := e.ring.total.count
	ok := float64(count) < rate
	oldest := int64(-1)

	var cr *countRing
	if client != "" && ok {
		cr = l.clientRing(e, client, cur)
		active := e.active
		if cr.total == 0 {
			active++ // this client becomes active
		}
		if float64(cr.total) >= rate/float64(max(active, 1)) {
			ok = false
			oldest = cr.oldest()
		}
	}
	// Retry-After and the RateLimit header need the oldest counted
	// request; finding it scans the ring, so only they pay for it.
	if oldest < 0 && (!ok || l.cfg.Headers) {
		oldest = e.ring.oldest()
	}
	a.rate = rate
	a.allowed = ok || l.cfg.DryRun
	a.wouldDeny = !ok && l.cfg.DryRun
	if a.allowed {
		e.ring.addAt(cur, slot{count: 1})
		e.inflight++
		count++
		if cr != nil {
			if cr.total == 0 {
				e.active++
			}
			cr.inc()
		}
		if oldest < 0 {
			oldest = cur
		}
	}
	a.count = count
	a.retryAfter = time.Second
	if oldest >= 0 {
		leave := time.Unix(0, (oldest+int64(l.nslots))*l.slotNs)
		a.retryAfter = max(leave.Sub(now), time.Second)
	}
}

// clientRing returns client's ring in e, advanced to cur, sweeping idle
// clients once per slot. requires e.mu held.
func (l *Limiter) clientRing(e *entry, client string, cur int64) *countRing {
	if e.clients == nil {
		e.clients = make(map[string]*countRing)
	}
	if e.cslot != cur {
		e.cslot = cur
		e.active = 0
		for k, c := range e.clients {
			c.advance(cur)
			if c.total == 0 {
				delete(e.clients, k)
				l.clients.Add(-1)
			} else {
				e.active++
			}
		}
	}
	c := e.clients[client]
	if c == nil {
		if len(e.clients) >= maxClientsPerKey || l.clients.Load() >= l.maxClients {
			client = otherClient
			c = e.clients[client]
		}
		if c == nil {
			c = &countRing{head: cur, slots: make([]int32, l.nslots)}
			e.clients[strings.Clone(client)] = c
			l.clients.Add(1)
		}
	}
	c.advance(cur)
	return c
}

// clientOf identifies r's client: the first value of ClientHeader (its
// first maxClientBytes bytes), or the IP of RemoteAddr.
func (l *Limiter) clientOf(r *http.Request) string {
	if h := l.cfg.ClientHeader; h != "" {
		if v := r.Header.Get(h); v != "" {
			v, _, _ = strings.Cut(v, ",")
			v = strings.TrimSpace(v)
			if len(v) > maxClientBytes {
				v = v[:maxClientBytes] // bytes: a name, never shown
			}
			return v
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// observe records the latency of an admitted request that completed
// normally: its first response byte came at now.
func (a *admission) observe(now time.Time) {
	if !a.done.CompareAndSwap(false, true) {
		return
	}
	l := a.l
	lat := now.Sub(a.start)
	if lat < 0 {
		lat = 0
	}
	cur := l.slotIndex(now)
	e := a.e
	e.mu.Lock()
	e.ring.advance(cur)
	e.ring.addAt(cur, slot{samples: 1, latNs: int64(lat)})
	e.mu.Unlock()
	if l.shared != nil {
		l.shared.record(l, e, now, cur, lat, false)
	}
}

// exclude marks an admitted request whose latency must not enter the
// average: an upgrade, an event stream, a cancelled request, a panic.
func (a *admission) exclude() { a.done.Store(true) }

// upstreamError records an admitted request the upstream failed (the
// proxy answered 502): counted apart, never in the average.
func (a *admission) upstreamError(now time.Time) {
	if !a.done.CompareAndSwap(false, true) {
		return
	}
	l := a.l
	cur := l.slotIndex(now)
	e := a.e
	e.mu.Lock()
	e.ring.advance(cur)
	e.ring.addAt(cur, slot{errors: 1})
	e.mu.Unlock()
	if l.m != nil {
		l.m.upstreamErrors.Inc()
	}
	if l.shared != nil {
		l.shared.record(l, e, now, cur, 0, true)
	}
}

// finish ends an admitted request's life: it is no longer in flight.
func (a *admission) finish() {
	a.done.Store(true)
	e := a.e
	e.mu.Lock()
	e.inflight--
	e.mu.Unlock()
}

// Stats is a snapshot of one key's window.
type Stats struct {
	Key     string
	Count   int64   // admitted requests in the window
	AvgMs   float64 // average response time in ms; 0 without samples
	Samples int64   // latency samples in the window
	Errors  int64   // upstream errors in the window
	Rate    float64 // the allowed rate now, per window
	Rule    string  // the rule of the key's latest request
}

// Stats returns the window of every tracked key (and the overflow key
// when it has been used), in no particular order.
func (l *Limiter) Stats() []Stats {
	cur := l.slotIndex(l.clock.Now())
	var out []Stats
	visit := func(e *entry) {
		e.mu.Lock()
		e.ring.advance(cur)
		s := e.stats()
		e.mu.Unlock()
		out = append(out, s)
	}
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.RLock()
		for _, e := range sh.m {
			visit(e)
		}
		sh.mu.RUnlock()
	}
	l.overflow.mu.Lock()
	used := l.overflow.ring.total != (slot{}) || l.overflow.inflight > 0
	l.overflow.mu.Unlock()
	if used {
		visit(l.overflow)
	}
	return out
}

// stats requires e.mu held and the ring advanced.
func (e *entry) stats() Stats {
	avg, n := e.ring.avgMs()
	rate := e.rule.p.MaxRate
	if n > 0 && n >= int64(e.rule.minSamples) {
		rate = e.rule.p.AllowedRate(avg)
	}
	return Stats{Key: e.key, Count: e.ring.total.count, AvgMs: avg, Samples: n,
		Errors: e.ring.total.errors, Rate: rate, Rule: e.rule.name}
}

// StatsFor returns the window of one key; ok is false when it is not
// tracked.
func (l *Limiter) StatsFor(key string) (s Stats, ok bool) {
	var e *entry
	if key == OverflowKey {
		e = l.overflow
	} else {
		sh := &l.shards[maphash.String(l.seed, key)%numShards]
		sh.mu.RLock()
		e = sh.m[key]
		sh.mu.RUnlock()
	}
	if e == nil {
		return Stats{}, false
	}
	cur := l.slotIndex(l.clock.Now())
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ring.advance(cur)
	return e.stats(), true
}

// Keys is the number of keys tracked, the overflow key not included.
func (l *Limiter) Keys() int { return int(l.keys.Load()) }
