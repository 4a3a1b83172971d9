package limits

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/internal/yamlconf"
)

// Sentinel errors for callers to branch on with errors.Is.
var (
	// ErrUnknownName reports a limit name that is neither built in nor a
	// valid user-defined name.
	ErrUnknownName = errors.New("unknown limit name")
	// ErrInvalidID reports an id that does not fit its limit's format.
	ErrInvalidID = errors.New("invalid id")
	// ErrInvalidLimit reports a burst, count or period that is missing, not
	// positive, gives an emission interval under 1ns, or a bucket that takes
	// more than gcra.MaxBurstOffset (100 years) to fill. It is
	// gcra.ErrInvalidLimit, so either can be tested for.
	ErrInvalidLimit = gcra.ErrInvalidLimit
	// ErrDuplicate reports a name, override or YAML key given twice, or two
	// user-defined names with the same enum number.
	ErrDuplicate = errors.New("duplicate")
	// ErrSyntax reports a file that is not YAML, or whose YAML does not
	// have the expected shape: unknown or missing keys, wrong node kinds.
	ErrSyntax = errors.New("malformed limits file")
	// ErrUnreachableID reports an override id that is valid but can never
	// match, because requests are counted under another key: a subdomain
	// for CertificatesPerDomain, counted under its eTLD+1. Boulder's own
	// override files have such ids, so it is a warning (see
	// Overrides.Warnings) that a strict check may treat as an error.
	ErrUnreachableID = errors.New("override id can never match")
)

// Error is one problem found in a limits file. The zero value is an empty
// error; errors from this package always set Reason and Err. Besides its
// sentinel it unwraps to a *yamlconf.Error with the same position and
// reason, the form every configuration format of this module shares.
type Error struct {
	File   string // file name as given to the parser; may be empty
	Line   int    // 1-based line; 0 when unknown
	Col    int    // 1-based column; 0 when unknown (not printed)
	Name   string // limit name, when the problem concerns one
	ID     string // override id, when the problem concerns one
	Reason string // what is wrong, naming the name, id and rule
	Err    error  // the sentinel this error wraps, such as ErrInvalidID
}

// Error returns "file:line: reason", leaving out what is unknown.
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(e.Line))
		}
		b.WriteString(": ")
	} else if e.Line > 0 {
		b.WriteString("line ")
		b.WriteString(strconv.Itoa(e.Line))
		b.WriteString(": ")
	}
	b.WriteString(e.Reason)
	return b.String()
}

// Unwrap returns the sentinel error e wraps and e as a *yamlconf.Error.
func (e *Error) Unwrap() []error {
	pos := &yamlconf.Error{File: e.File, Line: e.Line, Col: e.Col, Msg: e.Reason}
	if e.Err == nil {
		return []error{pos}
	}
	return []error{e.Err, pos}
}

// ErrorList is every problem found while loading limits, in file and line
// order. A nil or empty ErrorList is never returned as an error.
type ErrorList []*Error

// Error returns the errors one per line.
func (l ErrorList) Error() string {
	var b strings.Builder
	for i, e := range l {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap returns the errors, so that errors.Is and errors.As look at each.
func (l ErrorList) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}

// IDError reports an id that breaks its limit's format. It wraps
// ErrInvalidID.
type IDError struct {
	Name string // the limit name
	ID   string // the id as given
	Rule string // the rule broken, such as "must be a /48 IPv6 range"
}

// Error returns `invalid id "…" for Name: rule`, the id shortened as
// Quote does.
func (e *IDError) Error() string {
	return "invalid id " + Quote(e.ID) + " for " + e.Name + ": " + e.Rule
}

// MaxQuoted is the most bytes of a caller's text Quote keeps.
const MaxQuoted = 128

// Quote quotes s for an error message, as strconv.Quote does, shortened
// to its first MaxQuoted bytes (and their count) when longer, so that a
// message never echoes a megabyte a caller sent.
func Quote(s string) string {
	if len(s) <= MaxQuoted {
		return strconv.Quote(s)
	}
	cut := MaxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "… (" + strconv.Itoa(len(s)) + " bytes)"
}

// Unwrap returns ErrInvalidID.
func (e *IDError) Unwrap() error { return ErrInvalidID }
