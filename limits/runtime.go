package limits

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// RuntimeFile labels the errors of a runtime override, where a file's
// errors name the file and line: "runtime override: invalid burst 0 for
// NewOrdersPerAccount, must be > 0".
const RuntimeFile = "runtime override"

// RuntimeSpec is an override as an administrator writes it at runtime, and
// as a store keeps it: a limit name, an id in canonical form, and the limit.
// A nil Burst or Count, or an empty Period, is missing. The zero value is
// not a valid override.
type RuntimeSpec struct {
	Name    string
	ID      string
	Burst   *int64
	Count   *int64
	Period  string // a Go duration, such as 1s or 180m
	Comment string
	Updated time.Time // when it was set; kept as given
}

// RuntimeError is the error of a runtime override that Set.RuntimeOverride
// refuses: the field the first problem is about (name, id, burst, count,
// period or comment; empty when none of them) and every problem, each a *Error labelled
// RuntimeFile. Errors.Is and errors.As look at each problem, so
// errors.Is(err, ErrInvalidLimit) holds for a bad burst.
type RuntimeError struct {
	Field string
	Errs  ErrorList
}

// Error returns the problems separated by "; ".
func (e *RuntimeError) Error() string {
	msgs := make([]string, len(e.Errs))
	for i, err := range e.Errs {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

// Unwrap returns the problems.
func (e *RuntimeError) Unwrap() []error { return e.Errs.Unwrap() }

// RuntimeOverride validates spec as the overrides file validates an
// override, with the same messages, labelled RuntimeFile instead of a file
// and line: the name must be built in or defined in s's files, the id valid
// and in canonical form for the name's format (an id that can never match,
// ErrUnreachableID, is an error here), and burst, count and period present
// and valid. It returns the override, Runtime and with spec's Updated time,
// or a *RuntimeError.
func (s *Set) RuntimeOverride(spec RuntimeSpec) (Override, error) {
	if s == nil {
		s, _ = New(nil, nil) // cannot fail without files
	}
	fail := func(field string, errs ...*Error) (Override, error) {
		for _, e := range errs {
			e.File, e.Line, e.Col = RuntimeFile, 0, 0
		}
		return Override{}, &RuntimeError{Field: field, Errs: errs}
	}
	if _, known := s.names[spec.Name]; !known {
		reason := fmt.Sprintf("unknown limit name %s: a runtime override needs a built-in name or one defined in the limits files", Quote(spec.Name))
		if _, err := ParseName(spec.Name); err != nil {
			reason = err.Error()
		}
		return fail("name", &Error{Name: spec.Name, ID: spec.ID, Reason: reason, Err: ErrUnknownName})
	}
	if !utf8.ValidString(spec.Comment) {
		return fail("comment", &Error{Name: spec.Name, ID: spec.ID, Reason: fmt.Sprintf("invalid comment %s for %s: not UTF-8", Quote(spec.Comment), spec.Name), Err: ErrSyntax})
	}
	// Build the override as a one-entry file in the list form (JSON is
	// YAML), so that it meets exactly the file's rules and messages.
	entry := map[string]any{}
	if spec.Burst != nil {
		entry["burst"] = *spec.Burst
	}
	if spec.Count != nil {
		entry["count"] = *spec.Count
	}
	if spec.Period != "" {
		entry["period"] = spec.Period
	}
	id := map[string]any{"id": spec.ID}
	if spec.Comment != "" {
		id["comment"] = spec.Comment
	}
	entry["ids"] = []any{id}
	data, err := json.MarshalIndent([]any{map[string]any{spec.Name: entry}}, "", " ")
	if err != nil {
		panic("limits: a map of strings and integers does not encode: " + err.Error()) // a bug
	}
	parsed, err := ParseOverrides(RuntimeFile, data)
	var list ErrorList
	switch {
	case errors.As(err, &list):
		return fail(fieldOf(list), list...)
	case err != nil:
		return fail("", &Error{Name: spec.Name, ID: spec.ID, Reason: err.Error(), Err: ErrSyntax})
	case len(parsed.warnings) > 0:
		return fail("id", parsed.warnings...)
	case parsed.Len() != 1:
		panic(fmt.Sprintf("limits: a runtime override parsed into %d overrides", parsed.Len())) // a bug
	}
	o := parsed.list[0]
	o.File, o.Line, o.Runtime, o.Updated = "", 0, true, spec.Updated
	return o, nil
}

// fieldOf names the field of a runtime override the first of errs is
// about: name, id, burst, count, period, or "" when it is none of them
// (RuntimeOverride names the comment itself).
func fieldOf(errs ErrorList) string {
	if len(errs) == 0 {
		return ""
	}
	e := errs[0]
	switch {
	case errors.Is(e.Err, ErrUnknownName):
		return "name"
	case errors.Is(e.Err, ErrInvalidID), errors.Is(e.Err, ErrUnreachableID):
		return "id"
	}
	for _, name := range []string{"burst", "count", "period"} {
		if strings.HasPrefix(e.Reason, "invalid "+name+" ") || strings.HasPrefix(e.Reason, "missing "+name+" ") {
			return name
		}
	}
	return ""
}

// RuntimeKey returns the key of the runtime override for name and id, the
// name known to s and the id in canonical form, checked as RuntimeOverride
// checks them; the error is a *RuntimeError.
func (s *Set) RuntimeKey(name, id string) (string, error) {
	one := int64(1)
	o, err := s.RuntimeOverride(RuntimeSpec{Name: name, ID: id, Burst: &one, Count: &one, Period: "1s"})
	return o.Key, err
}

// WithRuntime returns a Set with the defaults and file overrides of s and
// the runtime overrides rt (by key; each override's own Key counts),
// which take precedence over a file's override of the same key (see
// Resolve). It replaces any runtime overrides s has; a nil or empty rt
// leaves just the files. s is not changed, and the Sets share what they
// can, so building one is cheap. A nil s is a Set with no files.
func (s *Set) WithRuntime(rt map[string]Override) *Set {
	if s == nil {
		s, _ = New(nil, nil) // cannot fail without files
	}
	c := *s
	c.runtime = nil
	c.enums = c.fileEnums
	if len(rt) > 0 {
		c.runtime = make(map[string]*Override, len(rt))
		for _, o := range rt {
			o.Runtime = true
			c.runtime[o.Key] = &o
			c.enums |= enumBit(o.Key)
		}
	}
	return &c
}

// Runtime returns the Set's runtime overrides, sorted by key. The caller
// may modify the returned slice.
func (s *Set) Runtime() []Override {
	if s == nil {
		return nil
	}
	out := make([]Override, 0, len(s.runtime))
	for _, k := range slices.Sorted(maps.Keys(s.runtime)) {
		out = append(out, *s.runtime[k])
	}
	return out
}

// FileOverride returns the override with key key from the Set's overrides
// file, ignoring any runtime one: what applies once a runtime override of
// the key is removed.
func (s *Set) FileOverride(key string) (Override, bool) {
	if s == nil {
		return Override{}, false
	}
	o, ok := s.overrides[key]
	if !ok {
		return Override{}, false
	}
	return *o, true
}

// lookup returns the override of key that applies: the runtime one, else
// the file's.
func (s *Set) lookup(key string) (*Override, bool) {
	if o, ok := s.runtime[key]; ok {
		return o, true
	}
	o, ok := s.overrides[key]
	return o, ok
}

// lookupBytes is lookup for a key in bytes, without making it a string.
func (s *Set) lookupBytes(key []byte) (*Override, bool) {
	if o, ok := s.runtime[string(key)]; ok {
		return o, true
	}
	o, ok := s.overrides[string(key)]
	return o, ok
}
