package yamlconf

import (
	"errors"
	"slices"
	"strconv"
	"strings"
)

// Sentinel errors a Parse error wraps, for errors.Is.
var (
	// ErrSyntax reports a file that is not valid YAML.
	ErrSyntax = errors.New("invalid YAML")
	// ErrExtraDocument reports a second YAML document in a file opened
	// with Options.OneDocument.
	ErrExtraDocument = errors.New("more than one YAML document")
)

// Error is one problem in a configuration file, located by file, line and
// column. The zero value is an empty error. Errors are not modified once
// returned and are safe for concurrent use.
type Error struct {
	File  string // the file name as given to Parse; "" for a value built in code
	Line  int    // 1-based; 0 when unknown
	Col   int    // 1-based; 0 when unknown
	Field string // the field's path, such as "rules.asset.maxRate"; may be empty
	Msg   string // what is wrong, naming the bad value
	Err   error  // the cause for errors.Is, such as ErrSyntax; usually nil

	lineOnly bool // Error leaves Col out (see Options.LineOnly)
}

// Error returns "file:line:col: field: message", leaving out what is
// unknown or empty: "file:line: message", "file: message", "message".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		if e.File != "" {
			b.WriteByte(':')
		}
		b.WriteString(strconv.Itoa(e.Line))
		if e.Col > 0 && !e.lineOnly {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(e.Col))
		}
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the cause e wraps, or nil.
func (e *Error) Unwrap() error { return e.Err }

// Errors is every problem found in one or more files. A Doc collects them;
// Err returns them as one error, which errors.As and errors.Is look
// through. An Errors is not safe for concurrent modification.
type Errors []*Error

// Error lists the problems one per line.
func (l Errors) Error() string {
	msgs := make([]string, len(l))
	for i, e := range l {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// Unwrap gives the problems to errors.Is and errors.As.
func (l Errors) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}

// Err returns l as an error, or nil when l is empty.
func (l Errors) Err() error {
	if len(l) == 0 {
		return nil
	}
	return l
}

// SortByLine orders l by line, keeping the order of problems on one line.
func (l Errors) SortByLine() {
	slices.SortStableFunc(l, func(a, b *Error) int { return a.Line - b.Line })
}
