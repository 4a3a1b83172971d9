// Package yamlconf reads Sluice's YAML configuration files strictly and
// reports every problem with its file, line and column. It is the one
// place that knows the YAML library; the three file formats (descriptors,
// limits and adaptive) keep their own schemas and messages on top of it.
//
// Parse decodes a file into a Doc, whose Root is a Node tree with
// positions. Aliases are followed, and every node visited is charged to a
// budget proportional to the file's size, so a small hostile file whose
// aliases expand exponentially fails quickly instead of exhausting memory
// ("aliases expand to too many nodes"); a file without aliases never runs
// out. A Node reads typed scalars (Int64, Bool, Float, Duration), and
// Entries and Items walk mappings (with repeated keys found) and lists.
//
// On top of that, Doc.Map walks a mapping against a schema of fields:
// unknown and repeated keys are errors, Doc.Require reports missing ones,
// and readers such as Doc.Float and Doc.Duration store a typed value or
// record an error naming the field's path. Every problem becomes an
// *Error in the Doc, and Doc.Err returns them all as one Errors.
//
// # Durations
//
// A duration is a Go duration string, as time.ParseDuration reads it: a
// sequence of decimal numbers with units ns, us (or µs), ms, s, m and h,
// such as "1s", "1.5h" or "2h45m", optionally signed; "0" needs no unit.
// Every format that takes a duration reads it with ParseDuration.
package yamlconf

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Options select how Parse reads a file. The zero value reads the first
// document and reports columns.
type Options struct {
	// OneDocument makes a second YAML document in the file an error
	// wrapping ErrExtraDocument. Otherwise documents after the first are
	// not read.
	OneDocument bool
	// LineOnly leaves the column out of the text of the Doc's errors, for
	// formats whose messages users already match as "file:line: ...".
	// Error.Col is set either way.
	LineOnly bool
}

// Doc is one decoded file and the problems found in it so far. The zero
// value is not usable; call Parse. A Doc and its Nodes are used by one
// goroutine at a time.
type Doc struct {
	file   string
	opts   Options
	root   *yaml.Node
	errs   Errors
	at     map[string]*yaml.Node // field path → its key, recorded by Map
	budget int                   // node visits left
	broke  bool                  // the budget ran out: every walk stops
}

// minBudget is the node budget of a tiny file. A file without aliases has
// no more YAML nodes than bytes and the formats visit each node at most
// twice, so the budget, four times the file's size, only ever stops alias
// expansion.
const minBudget = 1024

var syntaxLine = regexp.MustCompile(`(?s)^(?:yaml: )?line (\d+): (.*)$`)

// Parse decodes data, the contents of file (used in messages only). It
// always returns a Doc; when data is not valid YAML the Doc's Root is null
// and the error, an *Error wrapping ErrSyntax (or ErrExtraDocument), gives
// the line and libyaml's message without its "yaml: line N:" prefix. The
// error is not recorded in the Doc: the caller words it.
func Parse(file string, data []byte, opts Options) (*Doc, error) {
	d := &Doc{file: file, opts: opts, budget: minBudget + 4*len(data)}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return d, nil
		}
		return d, d.syntax(err)
	}
	if opts.OneDocument {
		var extra yaml.Node
		switch err := dec.Decode(&extra); {
		case err == nil:
			return d, d.newError(&extra, "", "a file holds one YAML document, found another", ErrExtraDocument)
		case !errors.Is(err, io.EOF):
			return d, d.syntax(err)
		}
	}
	d.root = &doc
	if doc.Kind == yaml.DocumentNode {
		d.root = nil
		if len(doc.Content) > 0 {
			d.root = doc.Content[0]
		}
	}
	return d, nil
}

// syntax turns a decoder error into an *Error with its line.
func (d *Doc) syntax(err error) *Error {
	msg, line := err.Error(), 0
	if m := syntaxLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	return &Error{File: d.file, Line: line, Msg: msg, Err: ErrSyntax, lineOnly: d.opts.LineOnly}
}

// File returns the file name given to Parse.
func (d *Doc) File() string { return d.file }

// Root returns the document's top node: null for an empty file, a file of
// comments or one that failed to parse.
func (d *Doc) Root() Node { return d.visit(d.root) }

// Errorf records a problem at node at (its line and column, or none for
// the zero Node) concerning field, which may be empty.
func (d *Doc) Errorf(at Node, field, format string, args ...any) {
	d.errs = append(d.errs, d.newError(at.n, field, fmt.Sprintf(format, args...), nil))
}

// Add records a problem built by the caller, such as one found after the
// walk. Its text follows the Doc's Options.LineOnly.
func (d *Doc) Add(e *Error) {
	e.lineOnly = d.opts.LineOnly
	d.errs = append(d.errs, e)
}

func (d *Doc) newError(at *yaml.Node, field, msg string, cause error) *Error {
	e := &Error{File: d.file, Field: field, Msg: msg, Err: cause, lineOnly: d.opts.LineOnly}
	if at != nil {
		e.Line, e.Col = at.Line, at.Column
	}
	return e
}

// Errors returns the problems recorded so far, in the order found. The
// caller may modify the returned slice.
func (d *Doc) Errors() Errors { return append(Errors(nil), d.errs...) }

// ErrorCount returns the number of problems recorded so far.
func (d *Doc) ErrorCount() int { return len(d.errs) }

// Err returns the problems recorded so far as an Errors, or nil.
func (d *Doc) Err() error { return d.Errors().Err() }

// At returns the line and column of the key of the field at path, as
// recorded by Map, or 0, 0 when Map has not seen it.
func (d *Doc) At(path string) (line, col int) {
	if k := d.at[path]; k != nil {
		return k.Line, k.Column
	}
	return 0, 0
}

// visit follows n's aliases and charges the visit to the budget. It
// returns the zero Node once the budget is spent, after recording the
// problem once.
func (d *Doc) visit(n *yaml.Node) Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 32; i++ {
		n = n.Alias
	}
	if n == nil || d.broke {
		return Node{}
	}
	if d.budget--; d.budget < 0 {
		d.broke = true
		d.errs = append(d.errs, d.newError(n, "", "aliases expand to too many nodes", nil))
		return Node{}
	}
	return Node{n: n, d: d}
}

// Shape is what a Node holds.
type Shape uint8

// The shapes of Node. A missing node, an empty value and an explicit null
// ("~", "null") are all Null.
const (
	Null Shape = iota
	Scalar
	Map
	List
)

// Node is one node of a Doc, aliases already followed. The zero Node is
// a missing one: Null, at line 0.
type Node struct {
	n *yaml.Node
	d *Doc
}

// Shape returns n's shape.
func (n Node) Shape() Shape {
	switch {
	case n.n == nil:
		return Null
	case n.n.Kind == yaml.ScalarNode && n.n.Tag == "!!null":
		return Null
	case n.n.Kind == yaml.ScalarNode:
		return Scalar
	case n.n.Kind == yaml.MappingNode:
		return Map
	case n.n.Kind == yaml.SequenceNode:
		return List
	}
	return Null
}

// IsNull reports whether n is missing, empty or null.
func (n Node) IsNull() bool { return n.Shape() == Null }

// IsZero reports whether n is the zero Node, standing for a missing one,
// as opposed to a node of the file (which may be null).
func (n Node) IsZero() bool { return n.n == nil }

// IsCollection reports whether n is a mapping or a list.
func (n Node) IsCollection() bool { k := n.Shape(); return k == Map || k == List }

// Line returns n's 1-based line, or 0 for the zero Node.
func (n Node) Line() int {
	if n.n == nil {
		return 0
	}
	return n.n.Line
}

// Col returns n's 1-based column, or 0 for the zero Node.
func (n Node) Col() int {
	if n.n == nil {
		return 0
	}
	return n.n.Column
}

// Text returns a scalar's text as written, without quotes ("~" for that
// null), and "" for other nodes.
func (n Node) Text() string {
	if n.n == nil || n.n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.n.Value
}

// IsFloat reports whether n is an unquoted floating-point number, such as
// 1.5, 2.0 or 1e3.
func (n Node) IsFloat() bool { return n.Shape() == Scalar && n.n.Tag == "!!float" }

// IsMerge reports whether n is a merge key ("<<").
func (n Node) IsMerge() bool { return n.Shape() == Scalar && n.n.Tag == "!!merge" }

// Describe names n for messages: "a map", "a list", "nothing" for null,
// and a scalar's quoted text.
func (n Node) Describe() string {
	switch n.Shape() {
	case Map:
		return "a map"
	case List:
		return "a list"
	case Scalar:
		return strconv.Quote(n.n.Value)
	}
	return "nothing"
}

// Int64 reads an integer as YAML does: unquoted, in decimal, 0x hex, 0o
// octal (also YAML 1.1's leading 0), or 0b binary, with optional _
// separators. It reports false for anything else, floating-point numbers
// such as 2.0 and 1e3 and quoted text included.
func (n Node) Int64() (int64, bool) {
	var v int64
	if n.Shape() != Scalar || n.n.Tag != "!!int" || n.n.Decode(&v) != nil {
		return 0, false
	}
	return v, true
}

// Bool reads a boolean: true or false (also True, TRUE, False, FALSE),
// and the YAML 1.1 words yes, no, on, off, y and n in any of their cases,
// which go-yaml v2 (and so envoyproxy/ratelimit) reads as booleans.
func (n Node) Bool() (bool, bool) {
	var b bool
	if n.Shape() != Scalar || n.n.Decode(&b) != nil {
		return false, false
	}
	return b, true
}

// Float reads a finite number, written as an unquoted integer or decimal.
func (n Node) Float() (float64, bool) {
	if n.Shape() != Scalar || (n.n.Tag != "!!int" && n.n.Tag != "!!float") {
		return 0, false
	}
	f, err := strconv.ParseFloat(n.n.Value, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// Duration reads a scalar with ParseDuration. Quoted or not, "90s" is 90
// seconds; a bare number other than 0 has no unit and is refused.
func (n Node) Duration() (time.Duration, bool) {
	if n.Shape() != Scalar {
		return 0, false
	}
	d, err := ParseDuration(n.n.Value)
	return d, err == nil
}

// ParseDuration reads the duration spellings every Sluice file format
// accepts: Go durations, as time.ParseDuration reads them ("1s", "180m",
// "1h30m", "1.5h", "300ms", "-1s", "0"). It is the one duration parser of
// the configuration files, so that a spelling valid in one is valid in all.
func ParseDuration(s string) (time.Duration, error) {
	return time.ParseDuration(s)
}

// Entry is one key: value pair of a mapping.
type Entry struct {
	Key   Node
	Value Node
	// Name is the key's text when the key is a scalar, null keys included
	// ("~", or "" for an empty key); "" for a mapping or list key.
	Name string
	// First is the earlier key when this key repeats one (same Name); the
	// zero Node otherwise.
	First Node
}

// Dup reports whether e's key repeats an earlier key of its mapping.
func (e Entry) Dup() bool { return e.First.n != nil }

// Entries yields the pairs of mapping n in order; nothing when n is not a
// mapping. Merge keys ("<<") are yielded as they are, for the caller to
// expand or refuse (IsMerge). A walk stops early when the Doc's node
// budget runs out.
func (n Node) Entries() iter.Seq[Entry] {
	return func(yield func(Entry) bool) {
		if n.Shape() != Map {
			return
		}
		var seen map[string]*yaml.Node
		c := n.n.Content
		for i := 0; i+1 < len(c); i += 2 {
			k, v := n.d.visit(c[i]), n.d.visit(c[i+1])
			if k.n == nil || v.n == nil {
				return
			}
			e := Entry{Key: k, Value: v}
			if k.n.Kind == yaml.ScalarNode {
				e.Name = k.n.Value
				if first, dup := seen[e.Name]; dup {
					e.First = Node{n: first, d: n.d}
				} else {
					if seen == nil {
						seen = make(map[string]*yaml.Node)
					}
					seen[e.Name] = k.n
				}
			}
			if !yield(e) {
				return
			}
		}
	}
}

// Items yields the items of list n in order; nothing when n is not a list.
// A walk stops early when the Doc's node budget runs out.
func (n Node) Items() iter.Seq[Node] {
	return func(yield func(Node) bool) {
		if n.Shape() != List {
			return
		}
		for _, c := range n.n.Content {
			item := n.d.visit(c)
			if item.n == nil || !yield(item) {
				return
			}
		}
	}
}

// Len returns the number of pairs of a mapping or items of a list, and 0
// for other nodes.
func (n Node) Len() int {
	switch n.Shape() {
	case Map:
		return len(n.n.Content) / 2
	case List:
		return len(n.n.Content)
	}
	return 0
}

// Value is n as a plain Go value, the way go-yaml v2 (and so
// envoyproxy/ratelimit) reads untyped YAML: a list as []any, an integer as
// int64, a floating-point number as float64, a boolean (unquoted YAML 1.1
// words too: yes, no, on, off, y, n) as bool, null as nil, any other
// scalar as its text, and a mapping as map[string]any whose keys are the
// keys' values printed by fmt ("y: 1" is keyed "true", "~: 1" "<nil>", as
// upstream's conversion does); a repeated key keeps its last value.
func (n Node) Value() any {
	switch n.Shape() {
	case Null:
		return nil
	case Map:
		m := make(map[string]any, n.Len())
		for e := range n.Entries() {
			m[fmt.Sprint(e.Key.Value())] = e.Value.Value()
		}
		return m
	case List:
		l := make([]any, 0, n.Len())
		for item := range n.Items() {
			l = append(l, item.Value())
		}
		return l
	}
	if i, ok := n.Int64(); ok {
		return i
	}
	if n.IsFloat() {
		if f, ok := n.Float(); ok {
			return f
		}
	}
	if n.n.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) == 0 {
		if b, ok := n.Bool(); ok {
			return b
		}
	}
	return n.n.Value
}
