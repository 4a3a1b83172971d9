// Package stats holds Sluice's service statistics in envoyproxy/ratelimit's
// model, aggregated once in memory and read by every sink: Sluice's own
// Prometheus metrics (package server), a StatsD or DogStatsD flusher
// (StatsD) and Prometheus series named as upstream's default
// statsd_exporter mapping names them (NewPrometheusCompat).
//
// Per rule, keyed by the rule's stats key, it counts total_hits,
// over_limit, near_limit, within_limit, shadow_mode and
// over_limit_with_local_cache; per domain, requests for a domain no
// configuration defines; and for the service, configuration loads,
// ShouldRateLimit calls, their response time and errors, and the global
// shadow mode. Counters only grow; sinks that report deltas remember what
// they last sent. Recording into an existing key takes no lock and
// allocates nothing.
package stats

import (
	"math"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// MaxRules bounds the distinct rule stats keys, and MaxRuleBytes their
// length together; past either, further keys (only possible with
// detailed_metric or value_to_metric, whose keys carry request values,
// each up to --max-descriptor-entry-bytes long) share the rule "overflow".
// Every sink keeps a copy of each key it reports (a Prometheus label, a
// StatsD name), so the bound in bytes bounds them too.
const (
	MaxRules     = 10000
	MaxRuleBytes = 8 << 20
)

// MaxDomains bounds the distinct unknown domains counted, and
// MaxDomainBytes their names' length together; past either, further
// domains share the domain "overflow".
const (
	MaxDomains     = 1000
	MaxDomainBytes = 1 << 20
)

// Overflow is the key under which counts past MaxRules or MaxDomains are
// reported.
const Overflow = "overflow"

// maxSamples bounds the response-time samples kept between two StatsD
// flushes; past it, further calls are counted but not sampled.
const maxSamples = 1024

// Rule holds one rule's counters, in hits. Its fields are safe for
// concurrent use.
type Rule struct {
	// Key is the rule's stats key as Sluice computes it, before Name.
	Key string

	TotalHits               atomic.Uint64
	OverLimit               atomic.Uint64
	NearLimit               atomic.Uint64
	WithinLimit             atomic.Uint64
	ShadowMode              atomic.Uint64
	OverLimitWithLocalCache atomic.Uint64
}

// Domain counts the descriptors asked for in one domain that no
// configuration defines.
type Domain struct {
	// Name is the domain as requested, or Overflow.
	Name     string
	NotFound atomic.Uint64
}

// ResponseTimeBuckets are the upper bounds, in seconds, of the response
// time histogram: Prometheus' default buckets, which statsd_exporter uses
// for upstream's response_time timer.
var ResponseTimeBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// Stats is the service's statistics. Create it with New; the zero value
// is not usable. It is safe for concurrent use.
type Stats struct {
	mu        sync.RWMutex // protects rules, ruleList, ruleBytes, overflow
	rules     map[string]*Rule
	ruleList  []*Rule // in creation order, overflow last once used
	ruleBytes int     // the keys' length together
	overflow  *Rule

	dmu         sync.RWMutex // protects domains, domainList, domainBytes
	domains     map[string]*Domain
	domainList  []*Domain
	domainBytes int // the names' length together

	// Service counters.
	ConfigLoadSuccess atomic.Uint64
	ConfigLoadError   atomic.Uint64
	TotalRequests     atomic.Uint64 // ShouldRateLimit calls
	RedisError        atomic.Uint64 // calls failed because the store was unavailable
	ServiceError      atomic.Uint64 // calls failed for any other reason
	GlobalShadowMode  atomic.Uint64 // over-limit answers turned OK by the global shadow mode

	// Response time histogram: counts per bucket of ResponseTimeBuckets in
	// seconds (secBuckets) and in milliseconds (msBuckets, the same bounds
	// read as milliseconds), the last of each past every bound.
	secBuckets [12]atomic.Uint64
	msBuckets  [12]atomic.Uint64
	rtCount    atomic.Uint64
	rtSumNanos atomic.Int64

	sampling atomic.Bool
	// Response-time samples for StatsD, double-buffered without a lock:
	// calls write into buffer gen, in slots taken from taken[gen], the
	// time in nanoseconds plus one (0: not written yet); drainSamples
	// flips gen and empties the other buffer.
	gen     atomic.Uint32
	taken   [2]atomic.Uint64
	samples [2][maxSamples]atomic.Int64
}

// New returns empty statistics.
func New() *Stats {
	return &Stats{rules: map[string]*Rule{}, domains: map[string]*Domain{}}
}

// Rule returns the counters of a stats key, creating them on first use.
// Past MaxRules keys, or MaxRuleBytes of them, it returns the shared
// overflow counters.
func (s *Stats) Rule(key string) *Rule {
	s.mu.RLock()
	r, ok := s.rules[key]
	s.mu.RUnlock()
	if ok {
		return r
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.rules[key]; ok {
		return r
	}
	if len(s.rules) >= MaxRules || s.ruleBytes+len(key) > MaxRuleBytes {
		if s.overflow == nil {
			s.overflow = &Rule{Key: Overflow}
			s.ruleList = append(s.ruleList, s.overflow)
		}
		return s.overflow
	}
	r = &Rule{Key: key}
	s.ruleBytes += len(key)
	s.rules[key] = r
	s.ruleList = append(s.ruleList, r)
	return r
}

// Rules returns every rule's counters, in the order they were created.
func (s *Stats) Rules() []*Rule {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.ruleList[:len(s.ruleList):len(s.ruleList)]
}

// DomainNotFound counts n descriptors asked for in a domain that no
// configuration defines (envoyproxy/ratelimit counts each descriptor of
// such a request).
func (s *Stats) DomainNotFound(domain string, n int) {
	s.dmu.RLock()
	d, ok := s.domains[domain]
	s.dmu.RUnlock()
	if !ok {
		d = s.newDomain(domain)
	}
	d.NotFound.Add(uint64(n))
}

func (s *Stats) newDomain(name string) *Domain {
	s.dmu.Lock()
	defer s.dmu.Unlock()
	if d, ok := s.domains[name]; ok {
		return d
	}
	if len(s.domains) >= MaxDomains || s.domainBytes+len(name) > MaxDomainBytes {
		name = Overflow
		if d, ok := s.domains[name]; ok {
			return d
		}
	}
	d := &Domain{Name: name}
	s.domainBytes += len(name)
	s.domains[name] = d
	s.domainList = append(s.domainList, d)
	return d
}

// Domains returns the unknown domains counted, in the order first seen.
func (s *Stats) Domains() []*Domain {
	s.dmu.RLock()
	defer s.dmu.RUnlock()
	return s.domainList[:len(s.domainList):len(s.domainList)]
}

// DomainNotFoundTotal is the sum of every domain's NotFound count.
func (s *Stats) DomainNotFoundTotal() uint64 {
	var n uint64
	for _, d := range s.Domains() {
		n += d.NotFound.Load()
	}
	return n
}

// ConfigLoad counts a configuration load, successful when ok.
func (s *Stats) ConfigLoad(ok bool) {
	if ok {
		s.ConfigLoadSuccess.Add(1)
	} else {
		s.ConfigLoadError.Add(1)
	}
}

// ObserveResponseTime counts one ShouldRateLimit call that took d.
func (s *Stats) ObserveResponseTime(d time.Duration) {
	s.TotalRequests.Add(1)
	s.rtCount.Add(1)
	s.rtSumNanos.Add(int64(d))
	sec := d.Seconds()
	s.secBuckets[bucket(sec)].Add(1)
	s.msBuckets[bucket(sec*1000)].Add(1)
	if s.sampling.Load() {
		g := s.gen.Load() & 1
		if i := s.taken[g].Add(1) - 1; i < maxSamples {
			s.samples[g][i].Store(int64(d) + 1)
		}
	}
}

// bucket is the index of the first bound of ResponseTimeBuckets at or
// above v, or len(ResponseTimeBuckets).
func bucket(v float64) int {
	for i, b := range ResponseTimeBuckets {
		if v <= b {
			return i
		}
	}
	return len(ResponseTimeBuckets)
}

// ResponseTimes returns the response time histogram: cumulative counts per
// bound of ResponseTimeBuckets, the number of calls and their summed time,
// in seconds, or with millis in milliseconds (the bounds then read as
// milliseconds, as upstream's PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS).
func (s *Stats) ResponseTimes(millis bool) (cumulative map[float64]uint64, count uint64, sum float64) {
	buckets := &s.secBuckets
	sum = float64(s.rtSumNanos.Load()) / float64(time.Second)
	if millis {
		buckets = &s.msBuckets
		sum *= 1000
	}
	cumulative = make(map[float64]uint64, len(ResponseTimeBuckets))
	var n uint64
	for i, b := range ResponseTimeBuckets {
		n += buckets[i].Load()
		cumulative[b] = n
	}
	return cumulative, s.rtCount.Load(), sum
}

// startSampling makes ObserveResponseTime keep samples for DrainSamples.
func (s *Stats) startSampling() { s.sampling.Store(true) }

// drainSamples appends the response times kept since the last drain, in
// microseconds, to buf, and returns it with the number of calls timed in
// that time (more than the samples once maxSamples were kept). A call that
// raced with the drain is reported by a later one. It must not be called
// concurrently with itself.
func (s *Stats) drainSamples(buf []float64) ([]float64, uint64) {
	g := (s.gen.Add(1) - 1) & 1 // the buffer calls wrote into until now
	n := s.taken[g].Swap(0)
	for i := range min(n, maxSamples) {
		if v := s.samples[g][i].Swap(0); v != 0 {
			buf = append(buf, float64(v-1)/float64(time.Microsecond))
		}
	}
	return buf, n
}

// ipv4 finds dotted IPv4 addresses in a stats key.
var ipv4 = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)

// Name is the name envoyproxy/ratelimit gives a stats key in its stat
// names: ':' and '|' become '_', and so do the dots of an IPv4 address, so
// that "edge.remote_address_10.0.0.1" is reported as
// "edge.remote_address_10_0_0_1".
func Name(key string) string {
	if !strings.ContainsAny(key, ":|.") {
		return key
	}
	key = strings.NewReplacer(":", "_", "|", "_").Replace(key)
	return ipv4.ReplaceAllStringFunc(key, func(ip string) string {
		return strings.ReplaceAll(ip, ".", "_")
	})
}

// isWhole reports whether v is a whole number a uint64 holds.
func isWhole(v float64) bool { return v >= 0 && v < math.MaxUint64 && math.Trunc(v) == v }
