package limits

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/gcra"
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
	list []Override
}

// Override is the limit for one bucket key, or for every bucket of one
// account (see the package documentation).
type Override struct {
	Name    Name
	ID      string // the id as written in the file
	Key     string // the bucket key it applies to, such as "3:12345678"
	Limit   gcra.Limit
	Comment string // the id's comment, if any
	File    string // the file it came from
	Line    int    // the line of its id (the map form: of its key)
}

// All returns the overrides in file order. The caller may modify the
// returned slice.
func (o *Overrides) All() []Override {
	if o == nil {
		return nil
	}
	return slices.Clone(o.list)
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
// {burst, count, period}, where period is a Go duration such as 1s or 180m:
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
	p := &parser{file: filename, enums: map[int64]string{}}
	d := &Defaults{}
	root := p.root(data)
	switch {
	case root == nil:
	case root.Kind != yaml.MappingNode:
		p.errorf(root, "", "", ErrSyntax, "defaults must be a map from limit name to {burst, count, period}, got %s", kind(root))
	default:
		p.mapping(root, "defaults", func(k, v *yaml.Node) {
			n, ok := p.name(k, k.Value)
			if !ok {
				return
			}
			lim, _, ok := p.limit(v, k, n.Text, "", n.Text, false)
			if ok {
				d.list = append(d.list, Default{Name: n, Limit: lim, File: filename, Line: k.Line})
			}
		})
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
	p := &parser{file: filename, enums: map[int64]string{}}
	o := &Overrides{}
	seen := map[string]int{} // bucket key → line of its first override
	add := func(ov Override) {
		if first, dup := seen[ov.Key]; dup {
			p.add(ov.Line, ov.Name.Text, ov.ID, ErrDuplicate,
				fmt.Sprintf("duplicate override for %s id %q (bucket key %s), first at line %d", ov.Name.Text, ov.ID, ov.Key, first))
			return
		}
		seen[ov.Key] = ov.Line
		o.list = append(o.list, ov)
	}
	root := p.root(data)
	switch {
	case root == nil:
	case root.Kind == yaml.SequenceNode:
		for _, item := range root.Content {
			item = deref(item)
			if item.Kind != yaml.MappingNode {
				p.errorf(item, "", "", ErrSyntax, "override entry must be a map from a limit name to {burst, count, period, ids}, got %s", kind(item))
				continue
			}
			if len(item.Content) == 0 {
				p.errorf(item, "", "", ErrSyntax, "override entry is empty, want a limit name and {burst, count, period, ids}")
				continue
			}
			p.mapping(item, "override entry", func(k, v *yaml.Node) {
				n, ok := p.name(k, k.Value)
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
	case root.Kind == yaml.MappingNode:
		p.mapping(root, "overrides", func(k, v *yaml.Node) {
			nameText, id, found := strings.Cut(k.Value, ":")
			if !found || nameText == "" || id == "" {
				p.errorf(k, nameText, id, ErrSyntax, "override key %q must be formatted 'Name:id'", k.Value)
				return
			}
			n, ok := p.name(k, nameText)
			if !ok {
				return
			}
			ov, idOK := p.override(k, n, id, "")
			lim, _, ok := p.limit(v, k, n.Text, id, k.Value, false)
			if ok && idOK {
				ov.Limit = lim
				add(ov)
			}
		})
	default:
		p.errorf(root, "", "", ErrSyntax, "overrides must be a list of {Name: {burst, count, period, ids}} or a map from 'Name:id' to {burst, count, period}, got %s", kind(root))
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	return o, nil
}

// maxErrors bounds the errors kept for one file: YAML aliases let a small
// file repeat one mistake a great many times.
const maxErrors = 100

// parser collects the errors found in one file. It is used by one
// goroutine at a time.
type parser struct {
	file    string
	errs    ErrorList
	dropped int              // errors found beyond maxErrors
	enums   map[int64]string // enum number → user-defined name using it
}

// add records an error at line.
func (p *parser) add(line int, name, id string, sentinel error, reason string) {
	if len(p.errs) >= maxErrors {
		p.dropped++
		return
	}
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Name: name, ID: id, Reason: reason, Err: sentinel})
}

// errorf records an error at n's line.
func (p *parser) errorf(n *yaml.Node, name, id string, sentinel error, format string, args ...any) {
	p.add(n.Line, name, id, sentinel, fmt.Sprintf(format, args...))
}

// err returns the errors found, sorted by line, or nil.
func (p *parser) err() error {
	if len(p.errs) == 0 {
		return nil
	}
	slices.SortStableFunc(p.errs, func(a, b *Error) int { return a.Line - b.Line })
	if p.dropped > 0 {
		last := p.errs[len(p.errs)-1]
		p.errs = append(p.errs, &Error{File: p.file, Line: last.Line, Err: last.Err,
			Reason: fmt.Sprintf("and %d more errors", p.dropped)})
	}
	return p.errs
}

var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): `)

// root decodes data and returns its top node, or nil for an empty (or
// null) document or a syntax error.
func (p *parser) root(data []byte) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if !errors.Is(err, io.EOF) {
			p.syntax(err)
		}
		return nil
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		p.errorf(&extra, "", "", ErrSyntax, "a limits file holds one YAML document, found another")
		return nil
	case !errors.Is(err, io.EOF):
		p.syntax(err)
		return nil
	}
	n := &doc
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil
		}
		n = n.Content[0]
	}
	n = deref(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	return n
}

// syntax records a YAML syntax error, with its line when the message has
// one.
func (p *parser) syntax(err error) {
	msg := err.Error()
	line := 0
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = msg[len(m[0]):]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	p.add(line, "", "", ErrSyntax, "invalid YAML: "+msg)
}

// deref follows aliases to the node they stand for.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

// kind describes n's kind for error messages.
func kind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a map"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "an alias"
}

// mapping calls fn for each key and value of the map n, reporting
// non-string and duplicate keys instead. what names the map in errors.
func (p *parser) mapping(n *yaml.Node, what string, fn func(k, v *yaml.Node)) {
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			p.errorf(k, "", "", ErrSyntax, "%s has a key that is %s, want a string", what, kind(k))
			continue
		}
		if first, dup := seen[k.Value]; dup {
			p.errorf(k, "", "", ErrDuplicate, "duplicate key %q in %s, first at line %d", k.Value, what, first)
			continue
		}
		seen[k.Value] = k.Line
		fn(k, v)
	}
}

// name parses a limit name written at node k, and checks that a
// user-defined name's enum number is not taken by another name.
func (p *parser) name(k *yaml.Node, text string) (Name, bool) {
	n, err := ParseName(text)
	if err != nil {
		p.add(k.Line, text, "", ErrUnknownName, err.Error())
		return Name{}, false
	}
	if !n.BuiltIn {
		if other, ok := p.enums[n.Enum]; ok && other != n.Text {
			p.add(k.Line, text, "", ErrDuplicate, collision(other, n))
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
func (p *parser) limit(v, k *yaml.Node, name, id, subject string, withIDs bool) (lim gcra.Limit, ids *yaml.Node, ok bool) {
	want := "burst, count and period"
	if withIDs {
		want = "burst, count, period and ids"
	}
	if v.Kind != yaml.MappingNode {
		line := v.Line
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			line = k.Line
		}
		p.add(line, name, id, ErrSyntax, fmt.Sprintf("%s must be a map with %s, got %s", subject, want, kind(v)))
		return lim, nil, false
	}
	var burst, count, period *yaml.Node
	ok = true
	p.mapping(v, subject, func(fk, fv *yaml.Node) {
		switch {
		case fk.Value == "burst":
			burst = fv
		case fk.Value == "count":
			count = fv
		case fk.Value == "period":
			period = fv
		case fk.Value == "ids" && withIDs:
			ids = fv
		default:
			p.add(fk.Line, name, id, ErrSyntax, fmt.Sprintf("unknown key %q in %s, want %s", fk.Value, subject, want))
			ok = false
		}
	})
	missing := func(field string, n *yaml.Node) bool {
		if n == nil || n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			line := v.Line
			if n != nil {
				line = n.Line
			}
			p.add(line, name, id, ErrSyntax, fmt.Sprintf("missing %s for %s", field, subject))
			ok = false
			return true
		}
		return false
	}
	integer := func(field string, n *yaml.Node) int64 {
		if missing(field, n) {
			return 0
		}
		var x int64
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&x) != nil {
			p.add(n.Line, name, id, ErrInvalidLimit, fmt.Sprintf("invalid %s %s for %s, must be an integer", field, kind(n), subject))
			ok = false
			return 0
		}
		if x <= 0 {
			p.add(n.Line, name, id, ErrInvalidLimit, fmt.Sprintf("invalid %s %d for %s, must be > 0", field, x, subject))
			ok = false
		}
		return x
	}
	lim.Burst = integer("burst", burst)
	lim.Count = integer("count", count)
	if !missing("period", period) {
		d, err := time.ParseDuration(period.Value)
		switch {
		case period.Kind != yaml.ScalarNode || err != nil:
			p.add(period.Line, name, id, ErrInvalidLimit, fmt.Sprintf("invalid period %s for %s, must be a duration such as 1s or 180m", kind(period), subject))
			ok = false
		case d <= 0:
			p.add(period.Line, name, id, ErrInvalidLimit, fmt.Sprintf("invalid period %s for %s, must be > 0", d, subject))
			ok = false
		case lim.Count > 0 && int64(d)/lim.Count <= 0:
			p.add(period.Line, name, id, ErrInvalidLimit, fmt.Sprintf("invalid period %s for %s with count %d, the emission interval period/count must be at least 1ns", d, subject, lim.Count))
			ok = false
		}
		lim.Period = d
	}
	if ok && lim.Valid() != nil {
		// Everything else is checked above: the burst offset is too long.
		p.add(burst.Line, name, id, ErrInvalidLimit, fmt.Sprintf("invalid burst %d for %s with count %d and period %s: an empty bucket would take more than %s (%d years) to fill",
			lim.Burst, subject, lim.Count, lim.Period, gcra.MaxBurstOffset, gcra.MaxBurstOffset/(365*24*time.Hour)))
		ok = false
	}
	if withIDs && ids == nil {
		p.add(v.Line, name, id, ErrSyntax, fmt.Sprintf("missing ids for %s", subject))
		ok = false
	}
	return lim, ids, ok
}

// ids decodes the ids list of a list-form entry for n, each a string or
// number, or a map {id, comment}, and returns the valid ones.
func (p *parser) ids(list *yaml.Node, n Name) []Override {
	if list == nil {
		return nil
	}
	if list.Kind != yaml.SequenceNode {
		p.errorf(list, n.Text, "", ErrSyntax, "ids for %s must be a list, got %s", n.Text, kind(list))
		return nil
	}
	if len(list.Content) == 0 {
		p.errorf(list, n.Text, "", ErrSyntax, "ids for %s is empty, want at least one id", n.Text)
		return nil
	}
	var out []Override
	for _, item := range list.Content {
		item = deref(item)
		var id, comment *yaml.Node
		switch item.Kind {
		case yaml.ScalarNode:
			id = item
		case yaml.MappingNode:
			if len(item.Content) == 2 {
				k, v := deref(item.Content[0]), deref(item.Content[1])
				if k.Kind == yaml.ScalarNode && k.Value != "id" && k.Value != "comment" && v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
					// "- 2001:db8::" reads as the map {"2001:db8:": null}.
					p.errorf(k, n.Text, k.Value+":", ErrSyntax, "id %q of %s must be quoted: YAML reads an id ending in ':' as a map key", k.Value+":", n.Text)
					continue
				}
			}
			bad := false
			p.mapping(item, "id of "+n.Text, func(k, v *yaml.Node) {
				switch k.Value {
				case "id":
					id = v
				case "comment":
					comment = v
				default:
					p.errorf(k, n.Text, "", ErrSyntax, "unknown key %q in id of %s, want id and comment", k.Value, n.Text)
					bad = true
				}
			})
			if id == nil {
				p.errorf(item, n.Text, "", ErrSyntax, "missing id in id of %s", n.Text)
				continue
			}
			if bad {
				continue
			}
		default:
			p.errorf(item, n.Text, "", ErrSyntax, "id of %s must be a string or a map {id, comment}, got %s", n.Text, kind(item))
			continue
		}
		if id.Kind != yaml.ScalarNode {
			p.errorf(id, n.Text, "", ErrSyntax, "id of %s must be a string, got %s", n.Text, kind(id))
			continue
		}
		c := ""
		if comment != nil {
			if comment.Kind != yaml.ScalarNode {
				p.errorf(comment, n.Text, id.Value, ErrSyntax, "comment for %s id %q must be a string, got %s", n.Text, id.Value, kind(comment))
				continue
			}
			c = comment.Value
		}
		value := id.Value
		if id.Tag == "!!null" {
			value = ""
		}
		if ov, ok := p.override(id, n, value, c); ok {
			out = append(out, ov)
		}
	}
	return out
}

// override checks the override id of n written at node at, and returns the
// override without its limit.
func (p *parser) override(at *yaml.Node, n Name, id, comment string) (Override, bool) {
	k, rule := overrideID(n.Format, id)
	if rule != "" {
		err := &IDError{Name: n.Text, ID: id, Rule: rule}
		p.add(at.Line, n.Text, id, ErrInvalidID, err.Error())
		return Override{}, false
	}
	return Override{
		Name:    n,
		ID:      id,
		Key:     enumPrefix(n.Enum) + k,
		Comment: comment,
		File:    p.file,
		Line:    at.Line,
	}, true
}
