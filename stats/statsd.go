package stats

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// StatsDOptions configure a StatsD flusher. The zero value of each field
// gives the default stated beside it.
type StatsDOptions struct {
	// Addr is the StatsD server, host:port. Required.
	Addr string
	// Protocol is "tcp" or "udp"; default "tcp" (envoyproxy/ratelimit's
	// client), or "udp" with DogStatsD.
	Protocol string
	// Interval between flushes; default 10s.
	Interval time.Duration
	// Tags are added to every stat: as ".__key=value" suffixes of the name
	// (lyft/gostats' encoding, which envoyproxy/ratelimit uses), or with
	// DogStatsD as "|#key:value" tags; either way '.', ':' and '|' in
	// values become '_', as upstream's encoding makes them.
	Tags []Tag
	// DogStatsD writes DogStatsD lines, with tags and Mogrifiers.
	DogStatsD bool
	// Mogrifiers turn DogStatsD stat names into a name and tags; the first
	// that matches a name applies.
	Mogrifiers []Mogrifier
	// Logger for send errors; default slog.Default().
	Logger *slog.Logger
}

// Tag is a stat tag.
type Tag struct{ Key, Value string }

// ParseTags parses envoyproxy/ratelimit's EXTRA_TAGS form,
// "key1:value1,key2:value2", into tags sorted by key.
func ParseTags(s string) ([]Tag, error) {
	var tags []Tag
	for pair := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, ":")
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("invalid tag %q in %q, want key:value", pair, s)
		}
		tags = append(tags, Tag{Key: k, Value: v})
	}
	slices.SortStableFunc(tags, func(a, b Tag) int { return strings.Compare(a.Key, b.Key) })
	return tags, nil
}

// Mogrifier turns a DogStatsD stat name matching Pattern into Name and
// Tags, in which $0, $1, … stand for the match and its groups, as
// envoyproxy/ratelimit's DOG_STATSD_MOGRIFIER_<NAME>_* variables do.
type Mogrifier struct {
	Pattern *regexp.Regexp
	Name    string
	Tags    []Tag
}

// NewMogrifier builds a Mogrifier from its pattern, name template and
// tags ("key:template,…"); label names the mogrifier in errors.
func NewMogrifier(label, pattern, name, tags string) (Mogrifier, error) {
	if pattern == "" {
		return Mogrifier{}, fmt.Errorf("mogrifier %s: no pattern", label)
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return Mogrifier{}, fmt.Errorf("mogrifier %s: pattern %q: %w", label, pattern, err)
	}
	if name == "" {
		return Mogrifier{}, fmt.Errorf("mogrifier %s: no name", label)
	}
	t, err := ParseTags(tags)
	if err != nil {
		return Mogrifier{}, fmt.Errorf("mogrifier %s: tags: %w", label, err)
	}
	return Mogrifier{Pattern: re, Name: name, Tags: t}, nil
}

var groupRef = regexp.MustCompile(`\$\d+`)

func expand(tmpl string, m []string) string {
	return groupRef.ReplaceAllStringFunc(tmpl, func(ref string) string {
		i, err := strconv.Atoi(ref[1:])
		if err != nil || i >= len(m) {
			return ref
		}
		return m[i]
	})
}

// StatsD sends the statistics' changes to a StatsD server every interval:
// counters as "|c" deltas (only those that changed), and the response
// times sampled since the last flush as "|ms" timers. Requests never wait
// for it: they only add to counters in Stats. Create it with NewStatsD; it
// is safe for concurrent use.
type StatsD struct {
	st   *Stats
	opts StatsDOptions

	mu         sync.Mutex // protects everything below
	conn       net.Conn   // nil until dialled, and after a send error
	lastRule   map[*Rule][6]uint64
	lastDomain map[*Domain]uint64
	lastSvc    [6]uint64
	samples    []float64
	buf        []byte

	tooLong atomic.Int64 // lines past maxDatagram, not sent over UDP
}

// NewStatsD returns a flusher of st to o.Addr; it connects on the first
// flush. Start it with Run.
func NewStatsD(st *Stats, o StatsDOptions) (*StatsD, error) {
	if _, _, err := net.SplitHostPort(o.Addr); err != nil {
		return nil, fmt.Errorf("statsd address %q: %w", o.Addr, err)
	}
	switch o.Protocol {
	case "":
		o.Protocol = "tcp"
		if o.DogStatsD {
			o.Protocol = "udp"
		}
	case "tcp", "udp":
	default:
		return nil, fmt.Errorf("statsd protocol %q, want tcp or udp", o.Protocol)
	}
	if o.Interval <= 0 {
		o.Interval = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	st.startSampling()
	return &StatsD{st: st, opts: o, lastRule: map[*Rule][6]uint64{}, lastDomain: map[*Domain]uint64{}}, nil
}

// Run flushes every interval until ctx is done, then flushes once more and
// closes the connection.
func (s *StatsD) Run(ctx context.Context) {
	t := time.NewTicker(s.opts.Interval)
	defer t.Stop()
	failing := false
	flush := func() {
		// Log when sending starts failing and when it recovers, not at
		// every interval of an unreachable server.
		switch err := s.Flush(); {
		case err != nil && !failing:
			s.opts.Logger.Warn("statsd flush failed; retrying every interval", "addr", s.opts.Addr, "err", err)
			failing = true
		case err == nil && failing:
			s.opts.Logger.Info("statsd flush works again", "addr", s.opts.Addr)
			failing = false
		}
	}
	for {
		select {
		case <-ctx.Done():
			flush()
			s.mu.Lock()
			if s.conn != nil {
				_ = s.conn.Close()
				s.conn = nil
			}
			s.mu.Unlock()
			return
		case <-t.C:
			flush()
		}
	}
}

// udpPayload bounds a UDP datagram, to stay under common path MTUs; a
// longer line goes out in a datagram of its own, up to maxDatagram, the
// most a UDP datagram over IPv4 carries. A line longer still (a stat key
// built from a long request value under detailed_metric) cannot be sent
// over UDP: Flush skips it and counts it (TooLong).
const (
	udpPayload  = 1432
	maxDatagram = 65_507
)

// tcpChunk bounds the bytes written to TCP at once.
const tcpChunk = 32 << 10

// Flush sends what changed since the last flush now. On a send error the
// connection is dropped (and dialled again on the next flush) and the
// unsent changes are lost, as with upstream's client.
func (s *StatsD) Flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var sent []byte
	var err error
	emit := func(line []byte) {
		if err != nil {
			return
		}
		limit := tcpChunk
		if s.opts.Protocol == "udp" {
			limit = udpPayload
			if len(line) > maxDatagram {
				s.tooLong.Add(1)
				return
			}
		}
		if len(sent) > 0 && len(sent)+len(line) > limit {
			err = s.write(sent)
			sent = sent[:0]
		}
		sent = append(sent, line...)
	}
	for _, r := range s.st.Rules() {
		now := [6]uint64{r.TotalHits.Load(), r.OverLimit.Load(), r.NearLimit.Load(),
			r.WithinLimit.Load(), r.ShadowMode.Load(), r.OverLimitWithLocalCache.Load()}
		last := s.lastRule[r]
		if now == last {
			continue
		}
		s.lastRule[r] = now
		base := "ratelimit.service.rate_limit." + Name(r.Key) + "."
		for i, stat := range ruleStats {
			if d := now[i] - last[i]; d != 0 {
				emit(s.line(base+stat, d, "c", 1))
			}
		}
	}
	for _, d := range s.st.Domains() {
		now := d.NotFound.Load()
		if delta := now - s.lastDomain[d]; delta != 0 {
			s.lastDomain[d] = now
			emit(s.line("ratelimit.service.rate_limit."+Name(d.Name)+".domain_not_found", delta, "c", 1))
		}
	}
	svc := [6]uint64{s.st.ConfigLoadSuccess.Load(), s.st.ConfigLoadError.Load(), s.st.TotalRequests.Load(),
		s.st.RedisError.Load(), s.st.ServiceError.Load(), s.st.GlobalShadowMode.Load()}
	for i, name := range serviceStats {
		if d := svc[i] - s.lastSvc[i]; d != 0 {
			emit(s.line(name, d, "c", 1))
		}
	}
	s.lastSvc = svc
	var n uint64
	s.samples, n = s.st.drainSamples(s.samples[:0])
	rate := 1.0
	if n > uint64(len(s.samples)) {
		rate = float64(len(s.samples)) / float64(n)
	}
	for _, us := range s.samples {
		emit(s.timer("ratelimit_server.ShouldRateLimit.response_time", us, rate))
	}
	if err == nil && len(sent) > 0 {
		err = s.write(sent)
	}
	return err
}

// ruleStats are the per-rule stat names, in Flush's order.
var ruleStats = [6]string{"total_hits", "over_limit", "near_limit", "within_limit", "shadow_mode", "over_limit_with_local_cache"}

// serviceStats are the service counters' stat names, in Flush's order.
var serviceStats = [6]string{
	"ratelimit.service.config_load_success",
	"ratelimit.service.config_load_error",
	"ratelimit_server.ShouldRateLimit.total_requests",
	"ratelimit.service.call.should_rate_limit.redis_error",
	"ratelimit.service.call.should_rate_limit.service_error",
	"ratelimit.service.global_shadow_mode",
}

// line formats a counter line into s.buf and returns it.
// Requires s.mu held.
func (s *StatsD) line(name string, v uint64, typ string, rate float64) []byte {
	return s.format(name, strconv.AppendUint(s.buf[:0], v, 10), typ, rate)
}

// timer formats a timer line, in microseconds as upstream reports them.
// Requires s.mu held.
func (s *StatsD) timer(name string, us float64, rate float64) []byte {
	var v []byte
	if isWhole(us) {
		v = strconv.AppendUint(s.buf[:0], uint64(us), 10)
	} else {
		v = strconv.AppendFloat(s.buf[:0], us, 'f', 6, 64)
	}
	return s.format(name, v, "ms", rate)
}

// format builds "name:value|type[|@rate][|#tags]\n", with tags in the
// name unless DogStatsD. value is at the start of s.buf's array.
// Requires s.mu held.
func (s *StatsD) format(name string, value []byte, t string, rate float64) []byte {
	val := string(value)
	var tags []Tag
	if s.opts.DogStatsD {
		tags = s.opts.Tags
		for _, m := range s.opts.Mogrifiers {
			if sub := m.Pattern.FindStringSubmatch(name); sub != nil {
				name = expand(m.Name, sub)
				tags = slices.Clip(tags)
				for _, t := range m.Tags {
					tags = append(tags, Tag{Key: t.Key, Value: expand(t.Value, sub)})
				}
				break
			}
		}
	}
	b := append(s.buf[:0], name...)
	if !s.opts.DogStatsD {
		for _, t := range s.opts.Tags {
			b = append(b, ".__"...)
			b = append(b, t.Key...)
			b = append(b, '=')
			b = append(b, tagValue(t.Value)...)
		}
	}
	b = append(b, ':')
	b = append(b, val...)
	b = append(b, '|')
	b = append(b, t...)
	if rate < 1 {
		b = append(b, "|@"...)
		b = strconv.AppendFloat(b, rate, 'f', -1, 64)
	}
	if len(tags) > 0 {
		b = append(b, "|#"...)
		for i, t := range tags {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, t.Key...)
			b = append(b, ':')
			if i < len(s.opts.Tags) {
				b = append(b, tagValue(t.Value)...) // extra tags pass through gostats' name encoding upstream
			} else {
				b = append(b, t.Value...)
			}
		}
	}
	b = append(b, '\n')
	s.buf = b
	return b
}

// tagValue replaces the characters StatsD names reserve ('.', ':', '|')
// with '_', as lyft/gostats does for tag values.
func tagValue(v string) string {
	if !strings.ContainsAny(v, ".:|") {
		return v
	}
	return strings.NewReplacer(".", "_", ":", "_", "|", "_").Replace(v)
}

// write sends b, dialling first if needed; on error it drops the
// connection. Requires s.mu held.
func (s *StatsD) write(b []byte) error {
	if s.conn == nil {
		c, err := net.DialTimeout(s.opts.Protocol, s.opts.Addr, 2*time.Second)
		if err != nil {
			return fmt.Errorf("dial %s %s: %w", s.opts.Protocol, s.opts.Addr, err)
		}
		s.conn = c
	}
	_ = s.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := s.conn.Write(b); err != nil {
		_ = s.conn.Close()
		s.conn = nil
		return fmt.Errorf("send to %s: %w", s.opts.Addr, err)
	}
	return nil
}

// TooLong returns how many stat lines were not sent because they were
// longer than a UDP datagram can carry (maxDatagram), since the start.
func (s *StatsD) TooLong() int64 { return s.tooLong.Load() }
