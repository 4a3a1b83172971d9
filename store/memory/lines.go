package memory

import "math/bits"

// lineKey is how many of a key's bytes a line holds: those past the first
// inlineWindowKey, which stay in the bucket's slot. maxLineKey is the
// longest key kept in a slot and a line; a longer one goes to table.long.
const (
	lineKey    = 56
	maxLineKey = inlineWindowKey + lineKey
)

// lined reports whether a bucket of the kind given, inserted under a key
// of n bytes, keeps the key's rest in a line (unless its hash has one
// already): a GCRA bucket's key longer than its slot keeps and at most
// maxLineKey bytes. It is the one rule for where lines are used: what a
// new bucket counts (cost), which decisions prefetch a line, and where
// insert keeps the key.
func lined(n int, window bool) bool {
	return !window && n > inlineKey && n <= maxLineKey
}

// line holds the rest of the key of one bucket whose key was longer than
// a GCRA bucket's slot keeps, when inserted as one, and at most
// maxLineKey bytes (table.keepFar), under the bucket's hash, in
// one 64-byte cache line. Its place follows from the hash alone, as the
// slot's does, so that a decision can ask for both at once: a key kept in
// table.long is found through its slot, one memory access after it.
type line struct {
	hash uint64 // the bucket's hash; 0 marks an empty line
	key  [lineKey]byte
}

// lines is an open-addressing table of lines with linear probing, as
// table is: grown by doubling when three quarters full, halved on removal
// while less than an eighth full, no tombstones. It holds at most one
// line per hash: a second key of the same hash is kept in table.long
// (table.keepFar), so a slot finds its line by its hash alone, and neither
// holds a reference to the other that a move would have to mend.
type lines struct {
	lines []line
	shift uint // 64 - log2(len(lines))
	n     int  // lines held
	moved bool // lines moved since the shard last published them
	mem   *arena
}

const minLines = 8

func (l *lines) home(h uint64) int { return int(h >> l.shift) }

// find returns the index of the line under hash h, or -1.
func (l *lines) find(h uint64) int {
	if l.n == 0 {
		return -1
	}
	m := len(l.lines) - 1
	for i := l.home(h); ; i = (i + 1) & m {
		switch l.lines[i].hash {
		case h:
			return i
		case 0:
			return -1
		}
	}
}

// is reports whether the line under h, which is held, holds rest.
func (l *lines) is(h uint64, rest string) bool {
	return string(l.lines[l.find(h)].key[:len(rest)]) == rest
}

// add keeps rest, at most lineKey bytes, under h, and reports whether it
// could: false, nothing added, when a line under h is held already.
func (l *lines) add(h uint64, rest string) bool {
	if (l.n+1)*4 > len(l.lines)*3 {
		l.resize(max(minLines, 2*len(l.lines)))
	}
	m := len(l.lines) - 1
	i := l.home(h)
	for ; l.lines[i].hash != 0; i = (i + 1) & m {
		if l.lines[i].hash == h {
			return false
		}
	}
	l.lines[i].hash = h
	copy(l.lines[i].key[:], rest)
	l.n++
	return true
}

// remove drops the line under h, which is held, and halves the table
// while it is less than an eighth full.
func (l *lines) remove(h uint64) {
	l.lines[closeHole(l.lines, l.find(h), l.shift)] = line{}
	l.n--
	size := len(l.lines)
	for size > minLines && l.n*8 < size {
		size /= 2
	}
	if size != len(l.lines) {
		l.resize(size)
	}
}

// resize moves every line into a new table of size lines, a power of two.
func (l *lines) resize(size int) {
	old := l.lines
	l.lines = makeEntries[line](l.mem, size)
	l.shift = uint(64 - bits.TrailingZeros(uint(size)))
	l.moved = true
	rehash(l.lines, old, l.shift)
	freeEntries(l.mem, old)
}

// hashed is a slot or a line: an entry of a table with linear probing,
// whose home is given by the top bits of its hash, 0 when it is empty.
type hashed[E any] interface {
	*E
	hashOf() uint64
}

func (s *slot) hashOf() uint64 { return s.hash }
func (l *line) hashOf() uint64 { return l.hash }

// closeHole fills the hole left at i in a, a table whose homes are its
// entries' hashes shifted right by shift, by moving the entries after it
// back as far as their homes let them, and returns the place left empty,
// for the caller to clear: removal with no tombstones.
func closeHole[E any, P hashed[E]](a []E, i int, shift uint) int {
	m := len(a) - 1
	for j := (i + 1) & m; P(&a[j]).hashOf() != 0; j = (j + 1) & m {
		if !fills(i, j, int(P(&a[j]).hashOf()>>shift)) {
			continue
		}
		a[i] = a[j]
		i = j
	}
	return i
}

// rehash puts each entry of old that is not empty into a, empty, at its
// home (its hash shifted right by shift) or the first free place after.
func rehash[E any, P hashed[E]](a, old []E, shift uint) {
	m := len(a) - 1
	for k := range old {
		h := P(&old[k]).hashOf()
		if h == 0 {
			continue
		}
		i := int(h >> shift)
		for P(&a[i]).hashOf() != 0 {
			i = (i + 1) & m
		}
		a[i] = old[k]
	}
}

// fills reports whether, in a table with linear probing, the entry in j,
// whose home is k, may move back into the hole at i: when k is not
// cyclically within (i, j], it is found by a probe that passes i.
func fills(i, j, k int) bool {
	if i <= j {
		return k <= i || j < k
	}
	return k <= i && j < k
}
