package descriptors

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// LoadOptions change how LoadWith reads a configuration. The zero value
// is Load's behaviour.
type LoadOptions struct {
	// MergeDomains merges files that declare the same domain into one
	// domain, as envoyproxy/ratelimit does with MERGE_DOMAIN_CONFIG=true:
	// the later file's top-level descriptors join the earlier file's
	// (files in name order), and a top-level descriptor with the same key
	// and value as one already loaded for the domain is an error. When
	// false (the default) a domain declared twice is an error.
	MergeDomains bool
	// DotFiles also loads files and directories whose names start with a
	// dot (envoyproxy/ratelimit's RUNTIME_IGNOREDOTFILES=false). A file
	// reached twice, through a link, is still loaded once. Default false:
	// they are skipped.
	DotFiles bool
}

// Load reads the configuration at path: one file, or every file named
// *.yaml or *.yml in a directory and its subdirectories, in name order.
// Files and directories whose names start with a dot are skipped, so a
// Kubernetes ConfigMap volume (its "..data" link and "..2026_11_21_..."
// directories) loads each file once, through its top-level link, and
// editor or VCS leftovers are ignored. Symbolic links are followed; a file
// reached twice is loaded once. An empty directory gives an empty Config.
//
// Problems in the files are returned together as an ErrorList, each with
// file and line; a file that cannot be read is reported as is. Nothing is
// returned but the error when anything is wrong.
func Load(path string) (*Config, error) {
	return LoadWith(path, LoadOptions{})
}

// LoadWith is Load with options.
func LoadWith(path string, o LoadOptions) (*Config, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load descriptors: %w", err)
	}
	files := []string{path}
	if info.IsDir() {
		w := &walker{seen: make(map[string]bool), dotFiles: o.DotFiles}
		if err := w.walk(path, 0); err != nil {
			return nil, fmt.Errorf("load descriptors: %w", err)
		}
		files = w.files
	}
	var (
		domains []*Domain
		errs    ErrorList
		byName  = make(map[string]int) // domain name → index in domains, when merging
	)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("load descriptors: %w", err)
		}
		d, err := Parse(f, data)
		if err != nil {
			errs = append(errs, err.(ErrorList)...)
			continue
		}
		if i, ok := byName[d.name]; ok && o.MergeDomains {
			merged, mergeErrs := mergeDomains(domains[i], d)
			errs = append(errs, mergeErrs...)
			domains[i] = merged
			continue
		}
		byName[d.name] = len(domains)
		domains = append(domains, d)
	}
	c, err := New(domains...)
	if err != nil {
		errs = append(errs, err.(ErrorList)...)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return c, nil
}

// mergeDomains returns a new domain with a's descriptors and then b's, both
// of the same name, as envoyproxy/ratelimit merges a domain declared in two
// files: b's top-level descriptors are added to a's top level; one with the
// same key and value (or the same key and no value) as one of a's is an
// error in b's file, and is left out. Nested descriptors are never merged:
// they belong to their top-level descriptor. a and b are not changed.
func mergeDomains(a, b *Domain) (*Domain, ErrorList) {
	m := &Domain{name: a.name, file: a.file, line: a.line,
		rules: append(append(make([]*Rule, 0, len(a.rules)+len(b.rules)), a.rules...), b.rules...)}
	m.root.byKey = make(map[string]*keyIndex, len(a.root.byKey)+len(b.root.byKey))
	for key, k := range a.root.byKey {
		c := &keyIndex{any: k.any, wild: append([]*node(nil), k.wild...)}
		if k.exact != nil {
			c.exact = make(map[string]*node, len(k.exact))
			for v, n := range k.exact {
				c.exact[v] = n
			}
		}
		m.root.byKey[key] = c
	}
	var (
		errs    ErrorList
		dropped = make(map[*node]bool)
	)
	clash := func(n *node) {
		composite, kind := n.key, "key"
		if n.value != "" {
			composite, kind = n.key+"_"+n.value, "key_value"
		}
		errs = append(errs, &Error{File: b.file, Line: b.topLine(n),
			Msg: fmt.Sprintf("duplicate descriptor %s %q in domain %q, already defined in %s (merged domain)", kind, composite, b.name, a.file)})
		dropped[n] = true
	}
	for key, k := range b.root.byKey {
		have := m.root.byKey[key]
		if have == nil {
			have = &keyIndex{}
			m.root.byKey[key] = have
		}
		if k.any != nil {
			if have.any != nil {
				clash(k.any)
			} else {
				have.any = k.any
			}
		}
		for v, n := range k.exact {
			if _, dup := have.exact[v]; dup {
				clash(n)
				continue
			}
			if have.exact == nil {
				have.exact = make(map[string]*node)
			}
			have.exact[v] = n
		}
		for _, n := range k.wild { // in b's file order, after a's
			if !dropped[n] {
				have.wild = append(have.wild, n)
			}
		}
	}
	if len(dropped) > 0 {
		// Keep only the rules reachable in the merged tree.
		kept := m.rules[:len(a.rules):len(a.rules)]
		for _, r := range b.rules {
			if !dropped[b.topNode(r)] {
				kept = append(kept, r)
			}
		}
		m.rules = kept
	}
	if len(errs) == 0 {
		return m, nil
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Line < errs[j].Line })
	return m, errs
}

// topNode is the top-level node on r's path.
func (d *Domain) topNode(r *Rule) *node {
	k := d.root.byKey[r.levels[0].key]
	if k == nil {
		return nil
	}
	if r.levels[0].value == "" {
		return k.any
	}
	return k.exact[r.levels[0].value]
}

// topLine is the line of top-level node n: the line of its own rule when it
// has one, else of the first rule below it, else of the domain.
func (d *Domain) topLine(n *node) int {
	if n.rule != nil {
		return n.rule.Line
	}
	for _, r := range d.rules {
		if d.topNode(r) == n {
			return r.Line
		}
	}
	return d.line
}

// maxWalkDepth bounds how deep Load descends into subdirectories.
const maxWalkDepth = 16

// walker collects the configuration files of a directory tree.
type walker struct {
	files    []string
	seen     map[string]bool // real paths of the files and directories visited
	dotFiles bool            // also visit names starting with a dot
}

func (w *walker) walk(dir string, depth int) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	if w.seen[real] || depth > maxWalkDepth {
		return nil
	}
	w.seen[real] = true
	entries, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		dot := strings.HasPrefix(name, ".")
		if dot && !w.dotFiles {
			continue
		}
		full := filepath.Join(dir, name)
		info, err := os.Stat(full) // follows links
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && (dot || !isYAML(name)) {
				continue // a dangling link to something we would not load, or an editor's lock link
			}
			return err
		}
		if info.IsDir() {
			if err := w.walk(full, depth+1); err != nil {
				return err
			}
			continue
		}
		if !info.Mode().IsRegular() || !isYAML(name) {
			continue
		}
		real, err := filepath.EvalSymlinks(full)
		if err != nil {
			return err
		}
		if !w.seen[real] {
			w.seen[real] = true
			w.files = append(w.files, full)
		}
	}
	return nil
}

func isYAML(name string) bool {
	ext := strings.ToLower(filepath.Ext(name))
	return ext == ".yaml" || ext == ".yml"
}
