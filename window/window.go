// Package window implements Envoy's fixed-window rate limit arithmetic, as
// envoyproxy/ratelimit computes it: windows aligned to the Unix epoch, a
// counter per window, over the limit once the count after a hit exceeds it.
//
// Everything here is pure; the functions are safe for concurrent use.
package window

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Unit is the length of a window as Envoy names it. The zero value is
// Unknown and not valid.
type Unit int32

// The units, numbered as envoy.config.ratelimit RateLimitUnit numbers them.
const (
	Unknown Unit = 0
	Second  Unit = 1
	Minute  Unit = 2
	Hour    Unit = 3
	Day     Unit = 4
	Month   Unit = 5
	Year    Unit = 6
	Week    Unit = 7
)

var unitNames = map[Unit]string{
	Unknown: "unknown", Second: "second", Minute: "minute", Hour: "hour",
	Day: "day", Week: "week", Month: "month", Year: "year",
}

// ParseUnit reads a unit name, case-insensitively: second, minute, hour,
// day, week, month or year.
func ParseUnit(s string) (Unit, error) {
	for u, name := range unitNames {
		if u != Unknown && strings.EqualFold(s, name) {
			return u, nil
		}
	}
	return Unknown, fmt.Errorf("unknown unit %q, must be one of second, minute, hour, day, week, month, year", s)
}

// String returns the unit's lower-case name.
func (u Unit) String() string {
	if n, ok := unitNames[u]; ok {
		return n
	}
	return fmt.Sprintf("unit(%d)", int32(u))
}

// Seconds is the unit's length in seconds (a month is 30 days, a year 365
// days, as in envoyproxy/ratelimit), or 0 for an unknown unit.
func (u Unit) Seconds() int64 {
	switch u {
	case Second:
		return 1
	case Minute:
		return 60
	case Hour:
		return 60 * 60
	case Day:
		return 24 * 60 * 60
	case Week:
		return 7 * 24 * 60 * 60
	case Month:
		return 30 * 24 * 60 * 60
	case Year:
		return 365 * 24 * 60 * 60
	}
	return 0
}

// MaxLength is the longest window, 100 years: longer ones (a year with a
// unit_multiplier over 100) would overflow time.Duration on their way to
// the stores.
const MaxLength = 100 * 365 * 24 * time.Hour

// Duration is the unit's length.
func (u Unit) Duration() time.Duration { return time.Duration(u.Seconds()) * time.Second }

// Start is the Unix second at which the window of length seconds that
// contains now began. length must be positive.
func Start(now time.Time, length int64) int64 {
	s := now.Unix()
	return s - mod(s, length)
}

// ResetIn is how long until the current window of length seconds ends, in
// whole seconds as envoyproxy/ratelimit reports it: between 1 and length.
func ResetIn(now time.Time, length int64) time.Duration {
	return time.Duration(length-mod(now.Unix(), length)) * time.Second
}

func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// Result is the outcome of adding hits to a window's counter.
type Result struct {
	Before    int64 // the count before the hits
	After     int64 // the count after the hits
	Over      bool  // After > limit
	Remaining int64 // limit - After, or 0 when over
}

// Hit computes what adding hits to a window whose counter is count means
// for a limit of limit requests per window. Envoy counts every hit, over the
// limit or not, so the caller stores After whatever the answer. After
// saturates at math.MaxInt64 rather than wrap around.
func Hit(count, hits, limit int64) Result {
	after := count + hits
	if hits > math.MaxInt64-count {
		after = math.MaxInt64
	}
	r := Result{Before: count, After: after}
	if after > limit {
		r.Over = true
		return r
	}
	r.Remaining = limit - after
	return r
}
