package replay

import (
	"errors"
	"fmt"
	"time"
)

// errTime is a "time" that is not RFC 3339.
var errTime = errors.New("time must be RFC 3339, such as 2026-11-23T15:04:05.25Z or 2026-11-23T16:04:05+01:00")

// parseTime parses an RFC 3339 time with optional fractional seconds (up
// to nanoseconds), as time.Parse(time.RFC3339Nano, ...) does, without
// allocating: YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM), with an
// upper-case 'T' and 'Z' as time.Parse wants them.
func parseTime(b []byte) (time.Time, error) {
	bad := func() (time.Time, error) { return time.Time{}, fmt.Errorf("%w: got %q", errTime, b) }
	if len(b) < len("2006-01-02T15:04:05Z") {
		return bad()
	}
	num := func(from, to int) (int, bool) {
		n := 0
		for _, c := range b[from:to] {
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, true
	}
	year, ok1 := num(0, 4)
	month, ok2 := num(5, 7)
	day, ok3 := num(8, 10)
	hour, ok4 := num(11, 13)
	minute, ok5 := num(14, 16)
	sec, ok6 := num(17, 19)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || b[4] != '-' || b[7] != '-' ||
		b[10] != 'T' || b[13] != ':' || b[16] != ':' {
		return bad()
	}
	if month < 1 || month > 12 || day < 1 || day > daysIn(month, year) || hour > 23 || minute > 59 || sec > 59 {
		return bad()
	}
	i := 19
	nsec := 0
	if b[i] == '.' {
		i++
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			if i-start < 9 {
				nsec = nsec*10 + int(b[i]-'0')
			} else {
				return bad() // more digits than nanoseconds
			}
			i++
		}
		if i == start {
			return bad()
		}
		for k := i - start; k < 9; k++ {
			nsec *= 10
		}
	}
	if i >= len(b) {
		return bad()
	}
	offset := 0
	switch b[i] {
	case 'Z':
		i++
	case '+', '-':
		if len(b)-i != 6 || b[i+3] != ':' {
			return bad()
		}
		oh, ok1 := num(i+1, i+3)
		om, ok2 := num(i+4, i+6)
		if !ok1 || !ok2 || oh > 23 || om > 59 {
			return bad()
		}
		offset = oh*3600 + om*60
		if b[i] == '-' {
			offset = -offset
		}
		i += 6
	default:
		return bad()
	}
	if i != len(b) {
		return bad()
	}
	unix := daysFromCivil(year, month, day)*86400 + int64(hour*3600+minute*60+sec) - int64(offset)
	return time.Unix(unix, int64(nsec)).UTC(), nil
}

func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// daysFromCivil is the number of days from 1970-01-01 to the given date
// of the proleptic Gregorian calendar (Howard Hinnant's algorithm).
func daysFromCivil(y, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 {
		era = (y - 399) / 400 // floor: year 0000 in January or February
	}
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return int64(era)*146097 + int64(doe) - 719468
}
