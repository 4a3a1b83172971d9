package yamlconf

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestDocuments(t *testing.T) {
	tests := []struct {
		name    string
		data    string
		want    []any
		wantErr string
	}{
		{name: "every document is decoded in order",
			data: "kind: A\ncount: 1\n---\nkind: B\nlist: [x, 2.5, true]\n",
			want: []any{map[string]any{"kind": "A", "count": int64(1)}, map[string]any{"kind": "B", "list": []any{"x", 2.5, true}}}},
		{name: "a quoted number stays text",
			data: "port: \"8080\"\n", want: []any{map[string]any{"port": "8080"}}},
		{name: "an empty document is nil",
			data: "a: 1\n---\n---\nb: 2\n", want: []any{map[string]any{"a": int64(1)}, nil, map[string]any{"b": int64(2)}}},
		{name: "an empty file has no documents", data: "", want: nil},
		{name: "a syntax error in a later document names its line",
			data: "a: 1\n---\nb: [\n", wantErr: "m.yaml:3"},
		{name: "a repeated key is an error naming both lines",
			data: "a: 1\n---\nspec:\n  x: 1\n  x: 2\n", wantErr: `m.yaml:5:3: key "x" repeated (first at line 4)`},
		{name: "aliases that expand too far are an error",
			data:    "a: &a [1, 1, 1, 1, 1, 1, 1, 1]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c]\ne: [*d, *d, *d, *d, *d, *d, *d, *d]\n",
			wantErr: "aliases expand to too many nodes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Documents("m.yaml", []byte(tt.data))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("got %v, want no error", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %#v, want %#v", got, tt.want)
			}
		})
	}
	if _, err := Documents("m.yaml", []byte("a: [\n")); !errors.Is(err, ErrSyntax) {
		t.Errorf("got %v, want ErrSyntax", err)
	}
}

// FuzzDocuments: any input gives values or an error naming the file,
// never both, and never a panic or a hang; a file of aliases stops at the
// node budget.
func FuzzDocuments(f *testing.F) {
	for _, s := range []string{
		"", "a: 1\n", "a: 1\n---\nb: [x, 2]\n", "---\n---\n", "a: &x {k: v}\nb: *x\n",
		"l0: &l0 [a, b]\nl1: &l1 [*l0, *l0]\nl2: [*l1, *l1]\n", "a: 1\na: 2\n", "- [\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := Documents("fuzz.yaml", data)
		if err != nil {
			var e *Error
			var list Errors
			if !(errors.As(err, &e) && e.File == "fuzz.yaml") && !(errors.As(err, &list) && len(list) > 0 && list[0].File == "fuzz.yaml") {
				t.Fatalf("got %T %v, want errors naming fuzz.yaml", err, err)
			}
			if got != nil {
				t.Fatalf("got values %v with the error %v, want none", got, err)
			}
		}
	})
}
