package limits

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/internal/yamlconf"
)

// Defaults is a parsed defaults file: at most one default limit per name.
// The zero value holds no defaults. A Defaults is never modified after
// parsing and is safe for concurrent use.
type Defaults struct {
	list []Default
}

// Default is one default limit: the limit every id of Name gets unless an
// override says otherwise.
type Default struct {
	Name  Name
	Limit gcra.Limit
	File  string // the file it came from
	Line  int    // the line of its name
}

// All returns the defaults in file order. The caller may modify the
// returned slice.
func (d *Defaults) All() []Default {
	if d == nil {
		return nil
	}
	return slices.Clone(d.list)
}

// Len returns the number of defaults.
func (d *Defaults) Len() int {
	if d == nil {
		return 0
	}
	return len(d.list)
}

// Overrides is a parsed overrides file: a limit for particular ids. The
// zero value holds no overrides. An Overrides is never modified after
// parsing and is safe for concurrent use.
type Overrides struct {
	list     []Override
	warnings ErrorList
}

// Override is the limit for one bucket key, or for every bucket of one
// account (see the package documentation).
type Override struct {
	Name    Name
	ID      string // the id as written in the file
	Key     string // the bucket key it applies to, such as "3:12345678"
	Limit   gcra.Limit
	Comment string // the id's comment, if any
	File    string // the file it came from; empty for a runtime override
	Line    int    // the line of its id (the map form: of its key)
	// Runtime is true for an override set at runtime through the admin
	// API (see Set.RuntimeOverride), false for one from a file.
	Runtime bool
	// Updated is when a runtime override was last set; zero for a file's.
	Updated time.Time
}

// All returns the overrides in file order. The caller may modify the
// returned slice.
func (o *Overrides) All() []Override {
	if o == nil {
		return nil
	}
	return slices.Clone(o.list)
}

// Warnings returns the problems found that did not stop the file loading,
// in line order: override ids that can never match (ErrUnreachableID),
// which were left out of the overrides. The caller may modify the returned
// slice.
func (o *Overrides) Warnings() ErrorList {
	if o == nil {
		return nil
	}
	return slices.Clone(o.warnings)
}

// Len returns the number of overrides, one per id.
func (o *Overrides) Len() int {
	if o == nil {
		return 0
	}
	return len(o.list)
}

// LoadDefaults reads and parses the defaults file at path (see
// ParseDefaults).
func LoadDefaults(path string) (*Defaults, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load defaults: %w", err)
	}
	return ParseDefaults(path, data)
}

// LoadOverrides reads and parses the overrides file at path (see
// ParseOverrides).
func LoadOverrides(path string) (*Overrides, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load overrides: %w", err)
	}
	return ParseOverrides(path, data)
}

// ParseDefaults parses a defaults file, a YAML map from limit name to
// {burst, count, period}, where period is a Go duration such as 1s or 180m
// (as yamlconf.ParseDuration reads it):
//
//	NewOrdersPerAccount:
//	  burst: 300
//	  count: 300
//	  period: 180m
//
// Parsing is strict: unknown names and keys, missing or non-positive burst,
// count and period, an emission interval (period/count) under 1ns, a
// bucket that takes more than gcra.MaxBurstOffset to fill, and duplicate keys are errors. filename only labels the errors. All problems
// are reported together as an ErrorList; an empty file yields no defaults.
func ParseDefaults(filename string, data []byte) (*Defaults, error) {
	p := newParser(filename, data)
	d := &Defaults{}
	switch root := p.doc.Root(); root.Shape() {
	case yamlconf.Null:
	case yamlconf.Map:
		p.mapping(root, "defaults", func(k, v yamlconf.Node) {
			n, ok := p.name(k, k.Text())
			if !ok {
				return
			}
			lim, _, ok := p.limit(v, k, n.Text, "", n.Text, false)
			if ok {
				d.list = append(d.list, Default{Name: n, Limit: lim, File: filename, Line: k.Line()})
			}
		})
	default:
		p.errorf(root, "", "", ErrSyntax, "defaults must be a map from limit name to {burst, count, period}, got %s", root.Describe())
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	return d, nil
}

// ParseOverrides parses an overrides file in either of Boulder's forms. The
// list form gives ids to each entry; an id is a string (or a number) or a
// map {id, comment}:
//
//	# overrides.yaml, list form
//	- NewOrdersPerAccount:
//	    burst: 300
//	    count: 600
//	    period: 180m
//	    ids:
//	      - 12345678
//	      - id: 87654321
//	        comment: a big customer
//
// The older map form puts the name and id in the key, split at the first
// colon (the id may itself contain colons):
//
//	NewRegistrationsPerIPAddress:10.0.0.2:
//	  burst: 20
//	  count: 40
//	  period: 1s
//
// Ids must be in canonical form (see ValidateID). Parsing is as strict as
// for ParseDefaults, and an id given twice for one name (after
// canonicalisation: the same bucket key) is an error too. All problems are
// reported together as an ErrorList; an empty file yields no overrides (the
// caller decides whether that is acceptable on a reload).
func ParseOverrides(filename string, data []byte) (*Overrides, error) {
	p := newParser(filename, data)
	o := &Overrides{}
	seen := map[string]int{} // bucket key → line of its first override
	add := func(ov located) {
		if first, dup := seen[ov.Key]; dup {
			p.errorf(ov.at, ov.Name.Text, ov.ID, ErrDuplicate,
				"duplicate override for %s id %q (bucket key %s), first at line %d", ov.Name.Text, ov.ID, ov.Key, first)
			return
		}
		seen[ov.Key] = ov.Line
		o.list = append(o.list, ov.Override)
	}
	switch root := p.doc.Root(); root.Shape() {
	case yamlconf.Null:
	case yamlconf.List:
		for item := range root.Items() {
			if item.Shape() != yamlconf.Map {
				p.errorf(item, "", "", ErrSyntax, "override entry must be a map from a limit name to {burst, count, period, ids}, got %s", item.Describe())
				continue
			}
			if item.Len() == 0 {
				p.errorf(item, "", "", ErrSyntax, "override entry is empty, want a limit name and {burst, count, period, ids}")
				continue
			}
			p.mapping(item, "override entry", func(k, v yamlconf.Node) {
				n, ok := p.name(k, k.Text())
				if !ok {
					return
				}
				lim, ids, ok := p.limit(v, k, n.Text, "", n.Text, true)
				for _, id := range p.ids(ids, n) {
					if ok {
						id.Limit = lim
						add(id)
					}
				}
			})
		}
	case yamlconf.Map:
		p.mapping(root, "overrides", func(k, v yamlconf.Node) {
			nameText, id, found := strings.Cut(k.Text(), ":")
			if !found || nameText == "" || id == "" {
				p.errorf(k, nameText, id, ErrSyntax, "override key %q must be formatted 'Name:id'", k.Text())
				return
			}
			n, ok := p.name(k, nameText)
			if !ok {
				return
			}
			ov, idOK := p.override(k, n, id, "")
			lim, _, ok := p.limit(v, k, n.Text, id, k.Text(), false)
			if ok && idOK {
				ov.Limit = lim
				add(ov)
			}
		})
	default:
		p.errorf(root, "", "", ErrSyntax, "overrides must be a list of {Name: {burst, count, period, ids}} or a map from 'Name:id' to {burst, count, period}, got %s", root.Describe())
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	o.warnings = p.warnings
	return o, nil
}

// maxErrors bounds the errors kept for one file: YAML aliases let a small
// file repeat one mistake a great many times.
const maxErrors = 100

// parser collects the errors found in one file. It is used by one
// goroutine at a time.
type parser struct {
	doc      *yamlconf.Doc
	errs     ErrorList
	warnings ErrorList        // problems that do not stop the load
	dropped  int              // errors found beyond maxErrors
	enums    map[int64]string // enum number → user-defined name using it
}

// newParser decodes data, recording a YAML syntax error or a second
// document; the Doc's root is then null.
func newParser(filename string, data []byte) *parser {
	doc, err := yamlconf.Parse(filename, data, yamlconf.Options{OneDocument: true, LineOnly: true})
	p := &parser{doc: doc, enums: map[int64]string{}}
	var e *yamlconf.Error
	switch {
	case errors.As(err, &e) && errors.Is(err, yamlconf.ErrExtraDocument):
		p.add(e.Line, e.Col, "", "", ErrSyntax, "a limits file holds one YAML document, found another")
	case errors.As(err, &e):
		p.add(e.Line, e.Col, "", "", ErrSyntax, "invalid YAML: "+e.Msg)
	}
	return p
}

// add records an error at line and col.
func (p *parser) add(line, col int, name, id string, sentinel error, reason string) {
	if len(p.errs) >= maxErrors {
		p.dropped++
		return
	}
	p.errs = append(p.errs, &Error{File: p.doc.File(), Line: line, Col: col, Name: name, ID: id, Reason: reason, Err: sentinel})
}

// errorf records an error at n.
func (p *parser) errorf(n yamlconf.Node, name, id string, sentinel error, format string, args ...any) {
	p.add(n.Line(), n.Col(), name, id, sentinel, fmt.Sprintf(format, args...))
}

// err returns the errors found, sorted by line, or nil. The Doc's own
// problem, aliases that expand too far, is a syntax error kept even past
// maxErrors.
func (p *parser) err() error {
	for _, e := range p.doc.Errors() {
		p.errs = append(p.errs, &Error{File: e.File, Line: e.Line, Col: e.Col, Reason: e.Msg, Err: ErrSyntax})
	}
	if len(p.errs) == 0 {
		return nil
	}
	slices.SortStableFunc(p.errs, func(a, b *Error) int { return a.Line - b.Line })
	if p.dropped > 0 {
		last := p.errs[len(p.errs)-1]
		p.errs = append(p.errs, &Error{File: p.doc.File(), Line: last.Line, Err: last.Err,
			Reason: fmt.Sprintf("and %d more errors", p.dropped)})
	}
	return p.errs
}

// mapping calls fn for each key and value of the map n, reporting
// non-string and duplicate keys instead. what names the map in errors.
func (p *parser) mapping(n yamlconf.Node, what string, fn func(k, v yamlconf.Node)) {
	for e := range n.Entries() {
		switch {
		case e.Key.IsCollection():
			p.errorf(e.Key, "", "", ErrSyntax, "%s has a key that is %s, want a string", what, e.Key.Describe())
		case e.Dup():
			p.errorf(e.Key, "", "", ErrDuplicate, "duplicate key %q in %s, first at line %d", e.Name, what, e.First.Line())
		default:
			fn(e.Key, e.Value)
		}
	}
}

// name parses a limit name written at node k, and checks that a
// user-defined name's enum number is not taken by another name.
func (p *parser) name(k yamlconf.Node, text string) (Name, bool) {
	n, err := ParseName(text)
	if err != nil {
		p.errorf(k, text, "", ErrUnknownName, "%s", err)
		return Name{}, false
	}
	if !n.BuiltIn {
		if other, ok := p.enums[n.Enum]; ok && other != n.Text {
			p.errorf(k, text, "", ErrDuplicate, "%s", collision(other, n))
			return Name{}, false
		}
		p.enums[n.Enum] = n.Text
	}
	return n, true
}

// collision describes two user-defined names with one enum number.
func collision(other string, n Name) string {
	return fmt.Sprintf("limit names %q and %q have the same enum number %d; rename one", other, n.Text, n.Enum)
}

// limit decodes a {burst, count, period} map v, found under key k, for the
// limit name (and override id, in the map form). subject names it in
// messages. With withIDs the map must also have ids, returned unchecked.
func (p *parser) limit(v, k yamlconf.Node, name, id, subject string, withIDs bool) (lim gcra.Limit, ids yamlconf.Node, ok bool) {
	want := "burst, count and period"
	if withIDs {
		want = "burst, count, period and ids"
	}
	if v.Shape() != yamlconf.Map {
		at := v
		if v.IsNull() {
			at = k
		}
		p.errorf(at, name, id, ErrSyntax, "%s must be a map with %s, got %s", subject, want, v.Describe())
		return lim, ids, false
	}
	var burst, count, period yamlconf.Node // the zero Node when absent
	ok = true
	p.mapping(v, subject, func(fk, fv yamlconf.Node) {
		switch {
		case fk.Text() == "burst":
			burst = fv
		case fk.Text() == "count":
			count = fv
		case fk.Text() == "period":
			period = fv
		case fk.Text() == "ids" && withIDs:
			ids = fv
		default:
			p.errorf(fk, name, id, ErrSyntax, "unknown key %q in %s, want %s", fk.Text(), subject, want)
			ok = false
		}
	})
	missing := func(field string, n yamlconf.Node) bool {
		if !n.IsNull() {
			return false
		}
		at := n
		if n.IsZero() {
			at = v
		}
		p.errorf(at, name, id, ErrSyntax, "missing %s for %s", field, subject)
		ok = false
		return true
	}
	integer := func(field string, n yamlconf.Node) int64 {
		if missing(field, n) {
			return 0
		}
		x, isInt := n.Int64()
		switch {
		case !isInt:
			p.errorf(n, name, id, ErrInvalidLimit, "invalid %s %s for %s, must be an integer", field, n.Describe(), subject)
			ok = false
		case x <= 0:
			p.errorf(n, name, id, ErrInvalidLimit, "invalid %s %d for %s, must be > 0", field, x, subject)
			ok = false
		}
		return x
	}
	lim.Burst = integer("burst", burst)
	lim.Count = integer("count", count)
	if !missing("period", period) {
		d, isDuration := period.Duration()
		switch {
		case !isDuration:
			p.errorf(period, name, id, ErrInvalidLimit, "invalid period %s for %s, must be a duration such as 1s or 180m", period.Describe(), subject)
			ok = false
		case d <= 0:
			p.errorf(period, name, id, ErrInvalidLimit, "invalid period %s for %s, must be > 0", d, subject)
			ok = false
		case lim.Count > 0 && int64(d)/lim.Count <= 0:
			p.errorf(period, name, id, ErrInvalidLimit, "invalid period %s for %s with count %d, the emission interval period/count must be at least 1ns", d, subject, lim.Count)
			ok = false
		}
		lim.Period = d
	}
	if ok && lim.Valid() != nil {
		// Everything else is checked above: the burst offset is too long.
		p.errorf(burst, name, id, ErrInvalidLimit, "invalid burst %d for %s with count %d and period %s: an empty bucket would take more than %s (%d years) to fill",
			lim.Burst, subject, lim.Count, lim.Period, gcra.MaxBurstOffset, gcra.MaxBurstOffset/(365*24*time.Hour))
		ok = false
	}
	if withIDs && ids.IsZero() {
		p.errorf(v, name, id, ErrSyntax, "missing ids for %s", subject)
		ok = false
	}
	return lim, ids, ok
}

// located is an override and the node of its id, for messages.
type located struct {
	Override
	at yamlconf.Node
}

// ids decodes the ids list of a list-form entry for n, each a string or
// number, or a map {id, comment}, and returns the valid ones.
func (p *parser) ids(list yamlconf.Node, n Name) []located {
	if list.IsZero() {
		return nil
	}
	if list.Shape() != yamlconf.List {
		p.errorf(list, n.Text, "", ErrSyntax, "ids for %s must be a list, got %s", n.Text, list.Describe())
		return nil
	}
	if list.Len() == 0 {
		p.errorf(list, n.Text, "", ErrSyntax, "ids for %s is empty, want at least one id", n.Text)
		return nil
	}
	var out []located
	for item := range list.Items() {
		var id, comment yamlconf.Node // the zero Node when absent
		switch item.Shape() {
		case yamlconf.Scalar, yamlconf.Null:
			id = item
		case yamlconf.Map:
			if unquoted(item) {
				// "- 2001:db8::" reads as the map {"2001:db8:": null}.
				for e := range item.Entries() {
					p.errorf(e.Key, n.Text, e.Name+":", ErrSyntax, "id %q of %s must be quoted: YAML reads an id ending in ':' as a map key", e.Name+":", n.Text)
				}
				continue
			}
			bad := false
			p.mapping(item, "id of "+n.Text, func(k, v yamlconf.Node) {
				switch k.Text() {
				case "id":
					id = v
				case "comment":
					comment = v
				default:
					p.errorf(k, n.Text, "", ErrSyntax, "unknown key %q in id of %s, want id and comment", k.Text(), n.Text)
					bad = true
				}
			})
			if id.IsZero() {
				p.errorf(item, n.Text, "", ErrSyntax, "missing id in id of %s", n.Text)
				continue
			}
			if bad {
				continue
			}
		default:
			p.errorf(item, n.Text, "", ErrSyntax, "id of %s must be a string or a map {id, comment}, got %s", n.Text, item.Describe())
			continue
		}
		if id.IsCollection() {
			p.errorf(id, n.Text, "", ErrSyntax, "id of %s must be a string, got %s", n.Text, id.Describe())
			continue
		}
		c := ""
		if !comment.IsZero() {
			if comment.IsCollection() {
				p.errorf(comment, n.Text, id.Text(), ErrSyntax, "comment for %s id %q must be a string, got %s", n.Text, id.Text(), comment.Describe())
				continue
			}
			c = comment.Text()
		}
		value := id.Text()
		if id.IsNull() {
			value = ""
		}
		if ov, ok := p.override(id, n, value, c); ok {
			out = append(out, ov)
		}
	}
	return out
}

// unquoted reports whether the id map m is an unquoted id that YAML read
// as a key: one string key, neither id nor comment, with a null value.
func unquoted(m yamlconf.Node) bool {
	if m.Len() != 1 {
		return false
	}
	for e := range m.Entries() {
		return !e.Key.IsCollection() && e.Name != "id" && e.Name != "comment" && e.Value.IsNull()
	}
	return false
}

// override checks the override id of n written at node at, and returns the
// override without its limit.
func (p *parser) override(at yamlconf.Node, n Name, id, comment string) (located, bool) {
	k, rule := overrideID(n.Format, id)
	if want, ok := unreachable(n.Format, id); rule != "" && ok {
		if len(p.warnings) < maxErrors {
			p.warnings = append(p.warnings, &Error{File: p.doc.File(), Line: at.Line(), Col: at.Col(), Name: n.Text, ID: id, Err: ErrUnreachableID,
				Reason: fmt.Sprintf("override id %q for %s can never match: requests are counted under %q (bucket key %s); write %q to apply it",
					id, n.Text, want, enumPrefix(n.Enum)+want, want)})
		}
		return located{}, false
	}
	if rule != "" {
		err := &IDError{Name: n.Text, ID: id, Rule: rule}
		p.errorf(at, n.Text, id, ErrInvalidID, "%s", err)
		return located{}, false
	}
	return located{Override: Override{
		Name:    n,
		ID:      id,
		Key:     enumPrefix(n.Enum) + k,
		Comment: comment,
		File:    p.doc.File(),
		Line:    at.Line(),
	}, at: at}, true
}
