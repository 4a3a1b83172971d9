package descriptors

import "strings"

// levelIndex indexes the descriptors of one list (one level of the tree)
// for matching. It is built once and never changed.
type levelIndex struct {
	byKey map[string]*keyIndex
}

// keyIndex holds the nodes of one level that share a key.
type keyIndex struct {
	exact map[string]*node // nodes with a value, wildcards included, by value
	wild  []*node          // nodes with a wildcard value, in file order
	any   *node            // the node without a value, if any
}

// node is one descriptor of the configuration.
type node struct {
	key, value string
	pat        pattern     // compiled value when it contains '*'
	rule       *Rule       // nil when the descriptor has no rate_limit
	children   *levelIndex // nil when it has no nested descriptors
}

// find selects the node for one request entry: exact value, then the first
// matching wildcard in file order, then the node without a value.
func (l *levelIndex) find(e Entry) *node {
	k := l.byKey[e.Key]
	if k == nil {
		return nil
	}
	if n, ok := k.exact[e.Value]; ok {
		return n
	}
	for _, n := range k.wild {
		if n.pat.match(e.Value) {
			return n
		}
	}
	return k.any
}

// add indexes n, a node of this level. Duplicates are rejected before.
func (l *levelIndex) add(n *node) {
	if l.byKey == nil {
		l.byKey = make(map[string]*keyIndex)
	}
	k := l.byKey[n.key]
	if k == nil {
		k = &keyIndex{}
		l.byKey[n.key] = k
	}
	switch {
	case n.value == "":
		k.any = n
	default:
		if k.exact == nil {
			k.exact = make(map[string]*node)
		}
		k.exact[n.value] = n
		if n.pat.wild {
			k.wild = append(k.wild, n)
		}
	}
}

// pattern is a value with '*' wildcards, split at the stars: the value
// must start with prefix, end with suffix, and contain the middle parts in
// order, without overlap, in between.
type pattern struct {
	wild   bool
	prefix string
	middle []string
	suffix string
}

func compilePattern(s string) pattern {
	if !strings.Contains(s, "*") {
		return pattern{}
	}
	parts := strings.Split(s, "*")
	p := pattern{wild: true, prefix: parts[0], suffix: parts[len(parts)-1]}
	for _, m := range parts[1 : len(parts)-1] {
		if m != "" {
			p.middle = append(p.middle, m)
		}
	}
	return p
}

// match reports whether v matches the pattern, each '*' standing for any
// run of characters, the empty one included. Taking each middle part at its
// leftmost place leaves the most room for the rest, so the greedy scan is
// exact.
func (p *pattern) match(v string) bool {
	if len(v) < len(p.prefix)+len(p.suffix) ||
		!strings.HasPrefix(v, p.prefix) || !strings.HasSuffix(v, p.suffix) {
		return false
	}
	rest := v[len(p.prefix) : len(v)-len(p.suffix)]
	for _, m := range p.middle {
		i := strings.Index(rest, m)
		if i < 0 {
			return false
		}
		rest = rest[i+len(m):]
	}
	return true
}
