package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
)

// RequestLogOptions configure a RequestLog.
type RequestLogOptions struct {
	// Path is the file the lines are appended to, created (mode 0644)
	// when missing. Required.
	Path string
	// Sample is the fraction of requests logged, chosen at random.
	// Default 1 (every request); range (0, 1].
	Sample float64
	// Buffer is how many lines may wait for the writer, and BufferBytes
	// how many bytes of them; past either a line is dropped and counted.
	// Defaults 8192 and 64 MiB: a line holds its request, up to 4 MiB.
	Buffer      int
	BufferBytes int64
	// Registerer, when not nil, receives sluice_request_log_lines_total
	// and sluice_request_log_dropped_total.
	Registerer prometheus.Registerer
	// Logger reports a failing file, once; default slog.Default().
	Logger *slog.Logger
}

// RequestLog writes sampled Envoy rate limit requests to a file, one line
// each in the format sluice replay reads: the request as /json takes it
// plus "time", the instant its decisions used (RFC 3339, UTC, to the
// nanosecond). Record (RLSOptions.RequestLog) never blocks the request: it
// encodes the request and hands the line to a writer goroutine through a
// bounded buffer, dropping (and counting) the line when the buffer is
// full. Create it with OpenRequestLog and Close it to flush. It is safe for
// concurrent use.
type RequestLog struct {
	f      *os.File
	lines  chan *[]byte
	stop   chan struct{}
	done   chan struct{}
	sample float64
	log    *slog.Logger
	once   sync.Once

	written, dropped atomic.Uint64
	err              error // the file's first write error; owned by the writer goroutine, read after done
	// queued is the bytes of the lines waiting for the writer, at most
	// maxQueued.
	queued    atomic.Int64
	maxQueued int64
}

// DefaultRequestLogBuffer and DefaultRequestLogBufferBytes are
// RequestLogOptions.Buffer's and BufferBytes' defaults.
const (
	DefaultRequestLogBuffer      = 8192
	DefaultRequestLogBufferBytes = 64 << 20
)

// maxLogLine bounds the lines kept for reuse; a longer one is left to the
// garbage collector.
const maxLogLine = 4096

var logLinePool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// OpenRequestLog opens (or creates) the file and starts the writer.
func OpenRequestLog(o RequestLogOptions) (*RequestLog, error) {
	if o.Path == "" {
		return nil, errors.New("request log: no file given")
	}
	if o.Sample == 0 {
		o.Sample = 1
	}
	if !(o.Sample > 0 && o.Sample <= 1) {
		return nil, fmt.Errorf("request log: sample %s is outside (0, 1]", strconv.FormatFloat(o.Sample, 'g', -1, 64))
	}
	if o.Buffer <= 0 {
		o.Buffer = DefaultRequestLogBuffer
	}
	if o.BufferBytes <= 0 {
		o.BufferBytes = DefaultRequestLogBufferBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	f, err := os.OpenFile(o.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("request log: %w", err)
	}
	l := &RequestLog{f: f, lines: make(chan *[]byte, o.Buffer), stop: make(chan struct{}), done: make(chan struct{}),
		sample: o.Sample, log: o.Logger, maxQueued: o.BufferBytes}
	if reg := o.Registerer; reg != nil {
		reg.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_request_log_lines_total",
				Help: "Requests written to the request log (--request-log)."},
				func() float64 { return float64(l.written.Load()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_request_log_dropped_total",
				Help: "Sampled requests not written to the request log: its buffer was full, or the file failed."},
				func() float64 { return float64(l.dropped.Load()) }),
		)
	}
	go l.write()
	return l, nil
}

// Record logs req, answered at at, if it is sampled. It never blocks:
// when the writer is behind, the line is dropped and counted.
func (l *RequestLog) Record(at time.Time, req *rlsv3.RateLimitRequest) {
	if l.sample < 1 && rand.Float64() >= l.sample {
		return
	}
	bp := logLinePool.Get().(*[]byte)
	*bp = AppendRequestLine((*bp)[:0], at, req)
	n := int64(len(*bp))
	if l.queued.Add(n) > l.maxQueued {
		l.queued.Add(-n)
		l.dropped.Add(1)
		putLine(bp)
		return
	}
	select {
	case l.lines <- bp:
	default:
		l.queued.Add(-n)
		l.dropped.Add(1)
		putLine(bp)
	}
}

func putLine(bp *[]byte) {
	if cap(*bp) <= maxLogLine {
		logLinePool.Put(bp)
	}
}

// write is the writer goroutine: it writes lines as they come, flushing
// whenever none is waiting, until Close.
func (l *RequestLog) write() {
	defer close(l.done)
	w := bufio.NewWriterSize(l.f, 64<<10)
	put := func(bp *[]byte) {
		defer l.queued.Add(-int64(len(*bp)))
		if l.err == nil {
			if _, err := w.Write(*bp); err != nil {
				l.fail(err)
			}
		}
		if l.err != nil {
			l.dropped.Add(1)
		} else {
			l.written.Add(1)
		}
		putLine(bp)
	}
	flush := func() {
		if l.err == nil {
			if err := w.Flush(); err != nil {
				l.fail(err)
			}
		}
	}
	for {
		select {
		case bp := <-l.lines:
			put(bp)
			if len(l.lines) == 0 {
				flush()
			}
		case <-l.stop:
			for {
				select {
				case bp := <-l.lines:
					put(bp)
				default:
					flush()
					return
				}
			}
		}
	}
}

// fail records the file's first error and reports it.
func (l *RequestLog) fail(err error) {
	l.err = err
	l.log.Error("request log: writing failed; further lines are dropped", "path", l.f.Name(), "err", err)
}

// Close writes the lines still waiting, flushes and closes the file. Lines
// recorded after Close are dropped. It waits at most until ctx ends.
func (l *RequestLog) Close(ctx context.Context) error {
	var err error
	l.once.Do(func() {
		close(l.stop)
		select {
		case <-l.done:
			err = l.err
		case <-ctx.Done():
			err = fmt.Errorf("request log: lines still waiting: %w", ctx.Err())
		}
		if cerr := l.f.Close(); err == nil {
			err = cerr
		}
	})
	return err
}

// Written and Dropped count the lines written and dropped so far.
func (l *RequestLog) Written() uint64 { return l.written.Load() }

// Dropped counts the sampled lines not written: the buffer was full, or
// the file failed.
func (l *RequestLog) Dropped() uint64 { return l.dropped.Load() }

// AppendRequestLine appends req answered at at as one request log line
// (with its newline): the request in proto3 JSON as /json takes it, with
// "time" first, then domain and descriptors; fields at their defaults are
// left out.
func AppendRequestLine(b []byte, at time.Time, req *rlsv3.RateLimitRequest) []byte {
	b = append(b, `{"time":"`...)
	b = at.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","domain":`...)
	b = appendJSONString(b, req.GetDomain())
	b = append(b, `,"descriptors":[`...)
	for i, d := range req.GetDescriptors() {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"entries":[`...)
		for j, e := range d.GetEntries() {
			if j > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"key":`...)
			b = appendJSONString(b, e.GetKey())
			b = append(b, `,"value":`...)
			b = appendJSONString(b, e.GetValue())
			b = append(b, '}')
		}
		b = append(b, ']')
		if l := d.GetLimit(); l != nil {
			b = append(b, `,"limit":{"requests_per_unit":`...)
			b = strconv.AppendUint(b, uint64(l.GetRequestsPerUnit()), 10)
			b = append(b, `,"unit":`...)
			if name, ok := typev3.RateLimitUnit_name[int32(l.GetUnit())]; ok {
				b = appendJSONString(b, name)
			} else {
				b = strconv.AppendInt(b, int64(l.GetUnit()), 10)
			}
			if m := l.GetUnitMultiplier(); m != nil {
				b = append(b, `,"unit_multiplier":`...)
				b = strconv.AppendUint(b, uint64(m.GetValue()), 10)
			}
			b = append(b, '}')
		}
		if h := d.GetHitsAddend(); h != nil {
			b = append(b, `,"hits_addend":`...)
			b = strconv.AppendUint(b, h.GetValue(), 10)
		}
		if d.GetIsNegativeHits() {
			b = append(b, `,"is_negative_hits":true`...)
		}
		b = append(b, '}')
	}
	b = append(b, ']')
	if h := req.GetHitsAddend(); h != 0 {
		b = append(b, `,"hits_addend":`...)
		b = strconv.AppendUint(b, uint64(h), 10)
	}
	return append(b, "}\n"...)
}

// appendJSONString appends s as a JSON string; invalid UTF-8 (which
// neither gRPC nor /json lets through) becomes U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		i++
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// Decide answers req as ShouldRateLimit does, per-rule statistics
// included, but without the call's own metrics (its count and latency),
// tracing or error logging: for sluice replay, which replays a request log
// on a simulated clock, where a call takes no time. Its error is the
// *limiter.Error that ShouldRateLimit would answer as a gRPC status.
func (s *RLS) Decide(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return s.shouldRateLimit(ctx, req)
}
