package yamlconf

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestErrorText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc string
		err  Error
		want string
	}{
		{desc: "every part is printed in order",
			err:  Error{File: "a.yaml", Line: 3, Col: 5, Field: "rules.asset", Msg: "bad"},
			want: "a.yaml:3:5: rules.asset: bad"},
		{desc: "an empty field is left out", err: Error{File: "a.yaml", Line: 3, Col: 5, Msg: "bad"}, want: "a.yaml:3:5: bad"},
		{desc: "an unknown column is left out", err: Error{File: "a.yaml", Line: 3, Msg: "bad"}, want: "a.yaml:3: bad"},
		{desc: "an unknown line leaves out the column too", err: Error{File: "a.yaml", Col: 5, Msg: "bad"}, want: "a.yaml: bad"},
		{desc: "a line without a file is printed alone", err: Error{Line: 3, Col: 5, Msg: "bad"}, want: "3:5: bad"},
		{desc: "a value built in code has only its field", err: Error{Field: "window", Msg: "bad"}, want: "window: bad"},
		{desc: "the zero error is empty", err: Error{}, want: ""},
		{desc: "line-only errors keep the column out of the text",
			err: Error{File: "a.yaml", Line: 3, Col: 5, Msg: "bad", lineOnly: true}, want: "a.yaml:3: bad"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestErrorsAreOneErrorThatErrorsAsLooksThrough(t *testing.T) {
	t.Parallel()
	d, _ := Parse("a.yaml", []byte("a: 1\nb: 2\n"), Options{})
	d.Map(d.Root(), "", Fields{"a": func(Node, string) {}}, nil)
	d.Add(&Error{File: "a.yaml", Line: 1, Msg: "added", Err: ErrSyntax})
	if got := d.ErrorCount(); got != 2 {
		t.Errorf("got %d errors counted, want 2", got)
	}
	err := d.Err()
	if got, want := err.Error(), "a.yaml:2:1: unknown field \"b\"\na.yaml:1: added"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	var e *Error
	if !errors.As(err, &e) || e.Line != 2 || e.Col != 1 {
		t.Errorf("got %+v, want the first *Error, at 2:1", e)
	}
	if !errors.Is(err, ErrSyntax) {
		t.Errorf("got %v, want it to wrap ErrSyntax through the added error", err)
	}
	list := d.Errors()
	list.SortByLine()
	if list[0].Msg != "added" {
		t.Errorf("got %q first after sorting, want the line 1 error", list[0].Msg)
	}
	if fresh, _ := Parse("b.yaml", nil, Options{}); fresh.Err() != nil {
		t.Errorf("got %v from a Doc without problems, want nil", fresh.Err())
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc      string
		yaml      string
		opts      Options
		wantErr   string // the error's text; "" for none
		wantCause error
		wantShape Shape
	}{
		{desc: "an empty file is null", yaml: "", wantShape: Null},
		{desc: "a file of comments is null", yaml: "# nothing\n", wantShape: Null},
		{desc: "an empty document is null", yaml: "---\n", wantShape: Null},
		{desc: "a map is a map", yaml: "a: 1\n", wantShape: Map},
		{desc: "a syntax error gives the line libyaml reports and its message's message",
			yaml: "a:\n  - b\n  c: d\n", wantErr: "f.yaml:1: did not find expected '-' indicator", wantCause: ErrSyntax, wantShape: Null},
		{desc: "a later document is not read by default", yaml: "a: 1\n---\nb: [\n", wantShape: Map},
		{desc: "a later document is an error with OneDocument", yaml: "a: 1\n---\nb: 2\n", opts: Options{OneDocument: true},
			wantErr: "f.yaml:2:1: a file holds one YAML document, found another", wantCause: ErrExtraDocument, wantShape: Null},
		{desc: "a syntax error in a later document is reported with OneDocument", yaml: "a: 1\n---\nb: [\n", opts: Options{OneDocument: true},
			wantErr: "f.yaml:3: did not find expected node content", wantCause: ErrSyntax, wantShape: Null},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			d, err := Parse("f.yaml", []byte(tt.yaml), tt.opts)
			if got := errText(err); got != tt.wantErr {
				t.Errorf("got error %q, want %q", got, tt.wantErr)
			}
			if tt.wantCause != nil && !errors.Is(err, tt.wantCause) {
				t.Errorf("got %v, want it to wrap %v", err, tt.wantCause)
			}
			if got := d.Root().Shape(); got != tt.wantShape {
				t.Errorf("got root kind %d, want %d", got, tt.wantShape)
			}
			if d.File() != "f.yaml" {
				t.Errorf("got file %q, want f.yaml", d.File())
			}
		})
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// value parses "v: <text>" and returns the value node.
func value(t *testing.T, text string) Node {
	t.Helper()
	d, err := Parse("v.yaml", []byte("v: "+text+"\n"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for e := range d.Root().Entries() {
		return e.Value
	}
	t.Fatalf("no value in %q", text)
	return Node{}
}

func TestScalars(t *testing.T) {
	t.Parallel()
	tests := []struct {
		text      string
		wantInt   any // int64, or nil when not an integer
		wantBool  any // bool, or nil
		wantFloat any // float64, or nil
		wantDur   any // time.Duration, or nil
	}{
		{text: "12", wantInt: int64(12), wantFloat: 12.0},
		{text: "-3", wantInt: int64(-3), wantFloat: -3.0},
		{text: "0x10", wantInt: int64(16)},
		{text: "1_000", wantInt: int64(1000), wantFloat: 1000.0},
		{text: "9223372036854775808", wantFloat: 9223372036854775808.0},
		{text: "1.5", wantFloat: 1.5},
		{text: "2.0", wantFloat: 2.0},
		{text: "1e3", wantFloat: 1000.0},
		{text: ".inf"},
		{text: ".nan"},
		{text: `"12"`},
		{text: "true", wantBool: true},
		{text: "False", wantBool: false},
		{text: "yes", wantBool: true},
		{text: "off", wantBool: false},
		{text: `"true"`},
		{text: "maybe"},
		{text: "~"},
		{text: "[1]"},
		{text: "1s", wantDur: time.Second},
		{text: `"90m"`, wantDur: 90 * time.Minute},
		{text: "1h30m", wantDur: 90 * time.Minute},
		{text: "1.5h", wantDur: 90 * time.Minute},
		{text: "300ms", wantDur: 300 * time.Millisecond},
		{text: "2us", wantDur: 2 * time.Microsecond},
		{text: "2µs", wantDur: 2 * time.Microsecond},
		{text: "-1s", wantDur: -time.Second},
		{text: "0", wantInt: int64(0), wantFloat: 0.0, wantDur: time.Duration(0)},
		{text: "60", wantInt: int64(60), wantFloat: 60.0},
		{text: "sixty"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s reads as the types that accept it", tt.text), func(t *testing.T) {
			t.Parallel()
			n := value(t, tt.text)
			check := func(what string, got any, ok bool, want any) {
				t.Helper()
				if !ok {
					got = nil
				}
				if got != want {
					t.Errorf("%s: got %v, want %v", what, got, want)
				}
			}
			i, ok := n.Int64()
			check("Int64", i, ok, tt.wantInt)
			b, ok := n.Bool()
			check("Bool", b, ok, tt.wantBool)
			f, ok := n.Float()
			check("Float", f, ok, tt.wantFloat)
			dur, ok := n.Duration()
			check("Duration", dur, ok, tt.wantDur)
		})
	}
}

func TestNodes(t *testing.T) {
	t.Parallel()
	d, err := Parse("n.yaml", []byte("a: &x {k: 1}\nb: *x\nc: [1, two]\nd: ~\ne: 1.5\n<<: {f: 2}\n"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for e := range d.Root().Entries() {
		got = append(got, fmt.Sprintf("%s@%d:%d=%s/%d", e.Name, e.Key.Line(), e.Key.Col(), e.Value.Describe(), e.Value.Len()))
	}
	want := []string{`a@1:1=a map/1`, `b@2:1=a map/1`, `c@3:1=a list/2`, `d@4:1=nothing/0`, `e@5:1="1.5"/0`, `<<@6:1=a map/1`}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("got %q, want %q", got, want)
	}
	for e := range d.Root().Entries() {
		if got, want := e.Key.IsMerge(), e.Name == "<<"; got != want {
			t.Errorf("%s: got IsMerge %t, want %t", e.Name, got, want)
		}
		if got, want := e.Value.IsFloat(), e.Name == "e"; got != want {
			t.Errorf("%s: got IsFloat %t, want %t", e.Name, got, want)
		}
	}
	var items []string
	for e := range d.Root().Entries() {
		for item := range e.Value.Items() {
			items = append(items, item.Text())
		}
	}
	if strings.Join(items, ",") != "1,two" {
		t.Errorf("got items %q, want 1,two", items)
	}
	for e := range d.Root().Entries() {
		if got, want := e.Value.IsCollection(), e.Name == "a" || e.Name == "b" || e.Name == "c" || e.Name == "<<"; got != want {
			t.Errorf("%s: got IsCollection %t, want %t", e.Name, got, want)
		}
		if e.Value.IsZero() {
			t.Errorf("%s: got IsZero for a node of the file, want false", e.Name)
		}
	}
	var zero Node
	if !zero.IsZero() || zero.IsCollection() {
		t.Errorf("got IsZero %t IsCollection %t for the zero Node, want true, false", zero.IsZero(), zero.IsCollection())
	}
	if zero.Shape() != Null || zero.Line() != 0 || zero.Col() != 0 || zero.Text() != "" || zero.Describe() != "nothing" {
		t.Errorf("got a zero Node that is not a missing one: %d %d %d %q", zero.Shape(), zero.Line(), zero.Col(), zero.Text())
	}
}

func TestEntriesFindRepeatedKeys(t *testing.T) {
	t.Parallel()
	d, _ := Parse("r.yaml", []byte("a: 1\nb: 2\na: 3\n? [x]\n: 4\na: 5\n"), Options{})
	var got []string
	for e := range d.Root().Entries() {
		got = append(got, fmt.Sprintf("%q dup=%t first=%d", e.Name, e.Dup(), e.First.Line()))
	}
	want := []string{`"a" dup=false first=0`, `"b" dup=false first=0`, `"a" dup=true first=1`, `"" dup=false first=0`, `"a" dup=true first=1`}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestMap(t *testing.T) {
	t.Parallel()
	type config struct {
		Name    string
		On      bool
		Count   int
		Big     int64
		Rate    float64
		Every   time.Duration
		Tags    []string
		Sub     string
		Unknown string
	}
	read := func(d *Doc, c *config) {
		d.Map(d.Root(), "", Fields{
			"name":  d.String(&c.Name),
			"on":    d.Bool(&c.On),
			"count": d.Int(&c.Count),
			"big":   d.Int64(&c.Big, 1, 1<<32-1),
			"rate":  d.Float(&c.Rate),
			"every": d.Duration(&c.Every),
			"tags":  d.Strings(&c.Tags),
			"sub": func(v Node, path string) {
				d.Map(v, path, Fields{"x": d.String(&c.Sub)}, func(k Node) {
					d.Errorf(k, path, "no %q here", k.Text())
				})
			},
		}, nil)
	}
	tests := []struct {
		desc    string
		yaml    string
		want    config
		wantErr string // the whole error text; "" for none
	}{
		{desc: "every field reads its type",
			yaml: "name: n\non: true\ncount: 3\nbig: 7\nrate: 1.5\nevery: 2m\ntags: [a, b]\nsub: {x: y}\n",
			want: config{Name: "n", On: true, Count: 3, Big: 7, Rate: 1.5, Every: 2 * time.Minute, Tags: []string{"a", "b"}, Sub: "y"}},
		{desc: "an empty file sets nothing", yaml: ""},
		{desc: "an unknown key is reported at the key", yaml: "nmae: n\n", wantErr: `m.yaml:1:1: unknown field "nmae"`},
		{desc: "a custom unknown message names the parent field", yaml: "sub:\n  z: 1\n", wantErr: `m.yaml:2:3: sub: no "z" here`},
		{desc: "a repeated key is reported at the repeat with its path",
			yaml: "sub:\n  x: a\n  x: b\n", want: config{Sub: "a"}, wantErr: "m.yaml:3:3: sub.x: duplicate key"},
		{desc: "a null key is an unknown field named by its text", yaml: "~: 1\n", wantErr: `m.yaml:1:1: unknown field "~"`},
		{desc: "a key that is not a string is reported", yaml: "? [a]\n: 1\n", wantErr: "m.yaml:1:3: has a key that is a list, want a field name"},
		{desc: "a value that should be a mapping is reported", yaml: "sub: 5\n", wantErr: "m.yaml:1:6: sub: must be a mapping"},
		{desc: "a top level that is not a mapping is reported", yaml: "- a\n", wantErr: "m.yaml:1:1: must be a mapping"},
		{desc: "a null scalar is reported as missing a value", yaml: "name:\n", wantErr: "m.yaml:1:6: name: must be a string"},
		{desc: "a list for a scalar is reported", yaml: "count: [1]\n", wantErr: "m.yaml:1:8: count: must be an integer"},
		{desc: "a wrong boolean is reported", yaml: "on: maybe\n", wantErr: `m.yaml:1:5: on: invalid boolean "maybe", must be true or false`},
		{desc: "a fractional integer is reported", yaml: "count: 1.5\n", wantErr: `m.yaml:1:8: count: invalid integer "1.5"`},
		{desc: "an integer out of range is reported", yaml: "big: 0\n", wantErr: "m.yaml:1:6: big: invalid value 0, must be between 1 and 4294967295"},
		{desc: "a quoted number is reported", yaml: "rate: '1'\n", wantErr: `m.yaml:1:7: rate: invalid number "1"`},
		{desc: "a duration without a unit is reported", yaml: "every: 60\n",
			wantErr: `m.yaml:1:8: every: invalid duration "60", want a Go duration such as 60s or 1m`},
		{desc: "a list with a map in it is reported", yaml: "tags: [a, {b: c}]\n", wantErr: "m.yaml:1:11: tags: must be a list of strings"},
		{desc: "a scalar for a list is reported", yaml: "tags: a\n", wantErr: "m.yaml:1:7: tags: must be a list of strings"},
		{desc: "every problem is reported, in file order",
			yaml: "name: [x]\nrate: fast\nbogus: 1\n", wantErr: "m.yaml:1:7: name: must be a string\n" +
				`m.yaml:2:7: rate: invalid number "fast"` + "\n" + `m.yaml:3:1: unknown field "bogus"`},
		{desc: "a value shared by an alias is read", yaml: "name: &n shared\nsub: {x: *n}\n", want: config{Name: "shared", Sub: "shared"}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			d, err := Parse("m.yaml", []byte(tt.yaml), Options{})
			if err != nil {
				t.Fatal(err)
			}
			var c config
			read(d, &c)
			if got := errText(d.Err()); got != tt.wantErr {
				t.Errorf("got error %q, want %q", got, tt.wantErr)
			}
			if fmt.Sprint(c) != fmt.Sprint(tt.want) {
				t.Errorf("got %+v, want %+v", c, tt.want)
			}
		})
	}
}

func TestAtGivesTheKeyOfAFieldMapSaw(t *testing.T) {
	t.Parallel()
	d, _ := Parse("a.yaml", []byte("top: 1\nsub:\n    inner: 2\n"), Options{})
	d.Map(d.Root(), "", Fields{
		"top": func(Node, string) {},
		"sub": func(v Node, path string) { d.Map(v, path, Fields{"inner": func(Node, string) {}}, nil) },
	}, nil)
	tests := []struct {
		path     string
		wantLine int
		wantCol  int
	}{
		{path: "top", wantLine: 1, wantCol: 1},
		{path: "sub.inner", wantLine: 3, wantCol: 5},
		{path: "missing"},
	}
	for _, tt := range tests {
		if line, col := d.At(tt.path); line != tt.wantLine || col != tt.wantCol {
			t.Errorf("At(%q): got %d:%d, want %d:%d", tt.path, line, col, tt.wantLine, tt.wantCol)
		}
	}
}

func TestRequire(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc    string
		yaml    string
		wantOK  bool
		wantErr string
	}{
		{desc: "present fields are enough", yaml: "a: 1\nb: x\n", wantOK: true},
		{desc: "a missing field is reported at the map", yaml: "a: 1\n", wantErr: `r.yaml:1:1: missing field "b"`},
		{desc: "a null field is missing", yaml: "a: 1\nb: ~\n", wantErr: `r.yaml:1:1: missing field "b"`},
		{desc: "a null map lacks every field", yaml: "", wantErr: "r.yaml: missing field \"a\"\nr.yaml: missing field \"b\""},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			d, _ := Parse("r.yaml", []byte(tt.yaml), Options{})
			if ok := d.Require(d.Root(), "", "a", "b"); ok != tt.wantOK {
				t.Errorf("got %t, want %t", ok, tt.wantOK)
			}
			if got := errText(d.Err()); got != tt.wantErr {
				t.Errorf("got %q, want %q", got, tt.wantErr)
			}
		})
	}
}

func TestLineOnlyKeepsTheColumnOutOfTheText(t *testing.T) {
	t.Parallel()
	d, _ := Parse("l.yaml", []byte("a: 1\n  b: 2\n"), Options{LineOnly: true})
	if d.Err() != nil {
		t.Fatalf("got %v before the walk, want nothing", d.Err())
	}
	_, err := Parse("l.yaml", []byte("a: 1\n b: 2\n"), Options{LineOnly: true})
	if got, want := errText(err), "l.yaml:2: mapping values are not allowed in this context"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	d, _ = Parse("l.yaml", []byte("x: 1\n"), Options{LineOnly: true})
	d.Map(d.Root(), "", nil, nil)
	d.Add(&Error{File: "l.yaml", Line: 1, Col: 3, Msg: "added"})
	list := d.Errors()
	if got, want := list.Error(), "l.yaml:1: unknown field \"x\"\nl.yaml:1: added"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if list[0].Col != 1 {
		t.Errorf("got column %d, want 1 still recorded", list[0].Col)
	}
}

func TestAliasesThatExpandExponentiallyAreStopped(t *testing.T) {
	t.Parallel()
	// Each list holds the previous one twice: 2^40 nodes from a small file.
	var b strings.Builder
	b.WriteString("l0: &l0 [a, b]\n")
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&b, "l%d: &l%d [*l%d, *l%d]\n", i, i, i-1, i-1)
	}
	d, err := Parse("bomb.yaml", []byte(b.String()), Options{})
	if err != nil {
		t.Fatal(err)
	}
	visited := 0
	var walk func(n Node)
	walk = func(n Node) {
		visited++
		for e := range n.Entries() {
			walk(e.Value)
		}
		for item := range n.Items() {
			walk(item)
		}
	}
	walk(d.Root())
	if limit := minBudget + 4*b.Len(); visited > limit+1 {
		t.Errorf("got %d nodes visited, want at most the budget %d", visited, limit)
	}
	errs := d.Errors()
	if len(errs) != 1 || errs[0].Msg != "aliases expand to too many nodes" || errs[0].Line == 0 {
		t.Errorf("got %v, want one error about aliases with its line", d.Err())
	}
}

func TestParseDuration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{in: "1s", want: time.Second},
		{in: "180m", want: 3 * time.Hour},
		{in: "1h30m", want: 90 * time.Minute},
		{in: "0", want: 0},
		{in: "60", wantErr: true},
		{in: "1d", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q parses as %v", tt.in, tt.want), func(t *testing.T) {
			t.Parallel()
			got, err := ParseDuration(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("got %v, %v; want %v and error %t", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// FuzzParse walks whatever decodes, as the formats do, reading every
// scalar as every type: nothing may panic, the walk stays within the
// budget, and every problem names the file and a line.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"", "a: 1\n", "a: [1, 2, {b: c}]\n", "a: &x {k: v}\nb: *x\n<<: *x\n", "- a\n- b: 1.5\n",
		"a: 1\n---\nb: 2\n", "a:\n  - b\n  c: d\n", "l0: &l0 [a, b]\nl1: &l1 [*l0, *l0]\nl2: [*l1, *l1]\n",
		"? [x]\n: 1\na: yes\nb: 0x10\nc: 1h30m\n",
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, one bool) {
		d, err := Parse("fuzz.yaml", data, Options{OneDocument: one})
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.File != "fuzz.yaml" || !(errors.Is(err, ErrSyntax) || errors.Is(err, ErrExtraDocument)) {
				t.Fatalf("got %T %v, want an *Error for fuzz.yaml wrapping a sentinel", err, err)
			}
			if d.Root().Shape() != Null {
				t.Fatalf("got a root of kind %d with an error, want null", d.Root().Shape())
			}
		}
		visited := 0
		var walk func(n Node, path string)
		walk = func(n Node, path string) {
			visited++
			n.Int64()
			n.Bool()
			n.Float()
			n.Duration()
			_ = n.Describe()
			if n.Shape() == Map {
				d.Map(n, path, Fields{}, func(k Node) {})
			}
			for e := range n.Entries() {
				walk(e.Value, Join(path, e.Name))
			}
			for item := range n.Items() {
				walk(item, path)
			}
		}
		walk(d.Root(), "")
		if limit := minBudget + 4*len(data); visited > limit+1 {
			t.Fatalf("got %d nodes visited, want at most %d", visited, limit)
		}
		for _, e := range d.Errors() {
			if e.File != "fuzz.yaml" || e.Line <= 0 || e.Msg == "" {
				t.Fatalf("got error %+v, want the file, a line and a message", *e)
			}
		}
	})
}

func TestValueReadsUntypedYAMLAsGoYAMLv2Does(t *testing.T) {
	t.Parallel()
	d, err := Parse("v.yaml", []byte(`a: 1
b: 1.5
c: yes
d: "yes"
e: text
f: ~
g: [1, two, {h: false}]
i:
  j: k
  y: yes
  01: one
  ~: none
`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"a": int64(1), "b": 1.5, "c": true, "d": "yes", "e": "text", "f": nil,
		"g": []any{int64(1), "two", map[string]any{"h": false}},
		"i": map[string]any{"j": "k", "true": true, "1": "one", "<nil>": "none"},
	}
	if got := d.Root().Value(); !reflect.DeepEqual(got, want) {
		t.Errorf("got %#v, want %#v", got, want)
	}
}
