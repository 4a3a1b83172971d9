package yamlconf

import (
	"bytes"
	"errors"
	"io"

	"go.yaml.in/yaml/v3"
)

// Documents decodes every YAML document in data, the contents of file
// (used in messages only), into plain Go values as Node.Value does, for
// multi-document files such as Kubernetes manifests. An empty document
// ("---" twice in a row) is nil. A syntax error is an *Error wrapping
// ErrSyntax; a mapping with a repeated key, or aliases that expand too
// far, is an error with its line, and Documents returns no values then.
func Documents(file string, data []byte) ([]any, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	// One budget for the whole file, as Parse charges one document.
	d := &Doc{file: file, budget: minBudget + 4*len(data)}
	var out []any
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, d.syntax(err)
		}
		var root *yaml.Node
		if len(doc.Content) > 0 {
			root = doc.Content[0]
		}
		n := d.visit(root)
		d.noRepeats(n)
		out = append(out, n.Value())
	}
	if err := d.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// noRepeats records an error for each key repeated in a mapping below n.
func (d *Doc) noRepeats(n Node) {
	switch n.Shape() {
	case Map:
		for e := range n.Entries() {
			if e.Dup() {
				d.Errorf(e.Key, "", "key %s repeated (first at line %d)", e.Key.Describe(), e.First.Line())
			}
			d.noRepeats(e.Value)
		}
	case List:
		for item := range n.Items() {
			d.noRepeats(item)
		}
	}
}
