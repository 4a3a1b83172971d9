package yamlconf

import (
	"time"

	"go.yaml.in/yaml/v3"
)

// Fields is the schema of a mapping for Doc.Map: each known key and the
// function that reads its value. A reader gets the value and the field's
// path ("rules.asset.maxRate") to name in its errors.
type Fields map[string]func(v Node, path string)

// Join returns the path of the field name inside the field at path.
func Join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// Map reads mapping n, the value of the field at path ("" for the top
// level), with fields. A null n is an empty mapping. It records an error
// for a value that is not a mapping ("must be a mapping"), a key that is
// not a string, a repeated key ("duplicate key", at the repeat, the
// field's path named) and a key not in fields: unknown, when not nil,
// reports that one instead of the default `unknown field "name"`. Each
// key's position is recorded for At, and each known field's reader is
// called in file order.
func (d *Doc) Map(n Node, path string, fields Fields, unknown func(k Node)) {
	switch n.Shape() {
	case Null:
		return
	case Map:
	default:
		d.Errorf(n, path, "must be a mapping")
		return
	}
	for e := range n.Entries() {
		switch {
		case e.Key.IsCollection():
			d.Errorf(e.Key, path, "has a key that is %s, want a field name", e.Key.Describe())
			continue
		case e.Dup():
			d.Errorf(e.Key, Join(path, e.Name), "duplicate key")
			continue
		}
		field := Join(path, e.Name)
		if d.at == nil {
			d.at = make(map[string]*yaml.Node)
		}
		d.at[field] = e.Key.n
		read, ok := fields[e.Name]
		switch {
		case ok:
			read(e.Value, field)
		case unknown != nil:
			unknown(e.Key)
		default:
			d.Errorf(e.Key, path, "unknown field %q", e.Name)
		}
	}
}

// Require records `missing field "name"` for each name that mapping n, the
// value of the field at path, lacks or leaves null, and reports whether
// none is missing. A null n lacks every name.
func (d *Doc) Require(n Node, path string, names ...string) bool {
	ok := true
	for _, name := range names {
		found := false
		for e := range n.Entries() {
			if e.Name == name && !e.Value.IsNull() {
				found = true
				break
			}
		}
		if !found {
			d.Errorf(n, path, "missing field %q", name)
			ok = false
		}
	}
	return ok
}

// Scalar returns the text of scalar v, the value of the field at path, or
// records "must be " + what and reports false when v is null, a mapping or
// a list.
func (d *Doc) Scalar(v Node, path, what string) (string, bool) {
	if v.Shape() != Scalar {
		d.Errorf(v, path, "must be %s", what)
		return "", false
	}
	return v.Text(), true
}

// String returns a reader that stores a scalar's text in dst.
func (d *Doc) String(dst *string) func(Node, string) {
	return func(v Node, path string) {
		if s, ok := d.Scalar(v, path, "a string"); ok {
			*dst = s
		}
	}
}

// Strings returns a reader that stores a list of scalars in dst.
func (d *Doc) Strings(dst *[]string) func(Node, string) {
	return func(v Node, path string) {
		if v.Shape() != List {
			d.Errorf(v, path, "must be a list of strings")
			return
		}
		out := make([]string, 0, v.Len())
		for item := range v.Items() {
			if item.Shape() != Scalar {
				d.Errorf(item, path, "must be a list of strings")
				return
			}
			out = append(out, item.Text())
		}
		*dst = out
	}
}

// Bool returns a reader that stores a boolean (see Node.Bool) in dst.
func (d *Doc) Bool(dst *bool) func(Node, string) {
	return func(v Node, path string) {
		if _, ok := d.Scalar(v, path, "true or false"); !ok {
			return
		}
		b, ok := v.Bool()
		if !ok {
			d.Errorf(v, path, "invalid boolean %q, must be true or false", v.Text())
			return
		}
		*dst = b
	}
}

// Int returns a reader that stores an integer (see Node.Int64) in dst.
func (d *Doc) Int(dst *int) func(Node, string) {
	return func(v Node, path string) {
		if _, ok := d.Scalar(v, path, "an integer"); !ok {
			return
		}
		i, ok := v.Int64()
		if !ok || int64(int(i)) != i {
			d.Errorf(v, path, "invalid integer %q", v.Text())
			return
		}
		*dst = int(i)
	}
}

// Int64 returns a reader that stores in dst an integer (see Node.Int64)
// between lo and hi inclusive.
func (d *Doc) Int64(dst *int64, lo, hi int64) func(Node, string) {
	return func(v Node, path string) {
		if _, ok := d.Scalar(v, path, "an integer"); !ok {
			return
		}
		i, ok := v.Int64()
		switch {
		case !ok:
			d.Errorf(v, path, "invalid integer %q", v.Text())
		case i < lo || i > hi:
			d.Errorf(v, path, "invalid value %d, must be between %d and %d", i, lo, hi)
		default:
			*dst = i
		}
	}
}

// Float returns a reader that stores a number (see Node.Float) in dst.
func (d *Doc) Float(dst *float64) func(Node, string) {
	return func(v Node, path string) {
		if _, ok := d.Scalar(v, path, "a number"); !ok {
			return
		}
		f, ok := v.Float()
		if !ok {
			d.Errorf(v, path, "invalid number %q", v.Text())
			return
		}
		*dst = f
	}
}

// Duration returns a reader that stores a duration (see ParseDuration)
// in dst.
func (d *Doc) Duration(dst *time.Duration) func(Node, string) {
	return func(v Node, path string) {
		if _, ok := d.Scalar(v, path, "a duration"); !ok {
			return
		}
		t, ok := v.Duration()
		if !ok {
			d.Errorf(v, path, "invalid duration %q, want a Go duration such as 60s or 1m", v.Text())
			return
		}
		*dst = t
	}
}
