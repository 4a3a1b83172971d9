package memory

import (
	"encoding/binary"
	"math/bits"
	"unsafe"

	"github.com/sluice-rl/sluice/internal/keybuf"
)

// inlineKey is the longest key a GCRA bucket keeps in its slot, and
// inlineWindowKey a FixedWindow bucket's, whose window takes the slot's
// last 16 bytes. They are what a 64-byte slot has room for besides the
// hash, the expiry and the length. A GCRA bucket's longer key of up to
// maxLineKey bytes keeps its first inlineWindowKey bytes in the slot and
// the rest in a line found from its hash (lines.go); a longer one still,
// one whose hash another's line has taken, and a FixedWindow bucket's, is
// kept in table.long and costs a second memory access, after the slot's,
// to compare (longkeys.go). (Lines cost memory, LineOverhead, for speed:
// that of the library's GCRA decisions. A FixedWindow bucket, the Envoy
// service's, is answered over the network, whose cost would hide the
// gain.)
const (
	inlineKey       = 40
	inlineWindowKey = 24
)

// A key SpendGCRAShort finds by its words is held in its slot, of either
// kind.
const _ = uint(inlineWindowKey - keybuf.Max)

// windowBit marks, in slot.klen, a FixedWindow bucket, longBit a key
// kept in table.long and lineBit one whose rest is kept in table.lines.
// The key's length takes the bits below them.
const (
	windowBit = 1 << 31
	longBit   = 1 << 30
	lineBit   = 1 << 29
	// maxKeyLen bounds a key's length: a longer one is refused.
	maxKeyLen = lineBit - 1
)

// slot is one bucket in a shard's table: the hash of its key, its state
// and its key, in one 64-byte cache line, so that finding a bucket and
// reading and changing its state is one memory access. It holds no
// pointer: the collector never scans the tables.
//
// A GCRA bucket's state is its theoretical arrival time, which is also
// when the bucket is full again: exp. A FixedWindow bucket's window, its
// first Unix second and its count, takes the last 16 bytes of key (see
// window), after its first inlineWindowKey. A key is kept where its
// bucket's kind, when inserted, keeps it; a bucket made a FixedWindow one
// moves a key too long for that kind's slot to table.long, and one made a
// GCRA bucket leaves its key where it is (setKind). A key with a line
// keeps its first inlineWindowKey bytes in key, whatever its bucket's
// kind, so that it stays where it is too.
type slot struct {
	hash uint64 // the key's hash with its low bit set; 0 marks an empty slot
	exp  int64  // the Unix nanosecond at which the bucket is full again; GCRA: its TAT
	klen uint32 // the key's length, with windowBit, longBit and lineBit
	kref uint32 // for a key longer than the slot keeps: its record's offset in table.long, in words
	key  [inlineKey]byte
}

// keyLen returns the length of the key held in s.
func (s *slot) keyLen() int { return int(s.klen & maxKeyLen) }

// isWindow reports whether s holds a FixedWindow bucket.
func (s *slot) isWindow() bool { return s.klen&windowBit != 0 }

// inlineLen is the longest key a bucket of the kind given keeps in its
// slot.
func inlineLen(window bool) int {
	if window {
		return inlineWindowKey
	}
	return inlineKey
}

// isLong reports whether s's key is kept in table.long.
func (s *slot) isLong() bool { return s.klen&longBit != 0 }

// hasLine reports whether the rest of s's key is kept in table.lines.
func (s *slot) hasLine() bool { return s.klen&lineBit != 0 }

// window returns a FixedWindow bucket's first Unix second and count.
func (s *slot) window() (start, count int64) {
	return int64(binary.LittleEndian.Uint64(s.key[inlineWindowKey:])), int64(binary.LittleEndian.Uint64(s.key[inlineWindowKey+8:]))
}

// setWindow stores a FixedWindow bucket's first Unix second and count.
func (s *slot) setWindow(start, count int64) {
	binary.LittleEndian.PutUint64(s.key[inlineWindowKey:], uint64(start))
	binary.LittleEndian.PutUint64(s.key[inlineWindowKey+8:], uint64(count))
}

// table is an open-addressing hash table with linear probing, grown by
// doubling when three quarters full and shrunk by halving, when swept,
// while less than an eighth full. A bucket's home slot is given by the
// top bits of its hash (the shard is chosen by the low ones), and removal
// shifts the buckets after it back, so that no tombstones build up.
type table struct {
	slots  []slot
	shift  uint // 64 - log2(len(slots))
	n      int  // buckets held
	lines  lines
	long   longKeys
	cursor int  // where the next sweep starts
	moved  bool // slots moved since the shard last published them
	mem    *arena
}

const minSlots = 8

// newTable returns an empty table whose slots and lines mem holds when
// they are large enough (see arena); nil keeps them all in Go's heap.
func newTable(mem *arena) table {
	return table{slots: make([]slot, minSlots), shift: 64 - 3, moved: true, lines: lines{mem: mem}, mem: mem}
}

func (t *table) mask() int { return len(t.slots) - 1 }

func (t *table) home(h uint64) int { return int(h >> t.shift) }

// find returns the slot holding key, whose hash is h (low bit set), and
// true; or the empty slot where it would go, and false.
func (t *table) find(h uint64, key string) (int, bool) {
	m := t.mask()
	for i := t.home(h); ; i = (i + 1) & m {
		s := &t.slots[i]
		if s.hash == 0 {
			return i, false
		}
		if s.hash != h {
			continue
		}
		// A key in its slot is compared here, where a call would cost
		// more than the comparison.
		if s.klen&(longBit|lineBit) == 0 {
			if s.keyLen() == len(key) && string(s.key[:len(key)]) == key {
				return i, true
			}
		} else if t.farKeyIs(s, key) {
			return i, true
		}
	}
}

// findShort is find for a key of n <= keybuf.Max bytes given as
// keybuf.Words gives it, compared with a slot's key without writing it
// out.
func (t *table) findShort(h, lo, hi uint64, n int) (int, bool) {
	m := t.mask()
	for i := t.home(h); ; i = (i + 1) & m {
		s := &t.slots[i]
		if s.hash == 0 {
			return i, false
		}
		if s.hash == h && s.keyLen() == n && keybuf.Equal((*[keybuf.Max]byte)(s.key[:]), lo, hi, n) {
			return i, true
		}
	}
}

// gcraTAT returns, for the slot find answered, slot (-1 when the bucket
// is missing) and the TAT a GCRA spend starts from: the bucket's, or
// nowNs for a bucket missing, full again or a fixed window's.
func (t *table) gcraTAT(slot int, found bool, nowNs int64) (int, int64) {
	if !found {
		return -1, nowNs
	}
	if e := &t.slots[slot]; !e.isWindow() && e.exp > nowNs {
		return slot, e.exp
	}
	return slot, nowNs
}

// setTAT makes the bucket in slot a GCRA bucket with TAT tat, which may
// be dropped once full again, past it.
func (t *table) setTAT(slot int, tat int64) {
	e := &t.slots[slot]
	e.exp = tat
	e.klen &^= windowBit // as setKind(slot, false), which leaves the key where it is
}

// setKind makes the bucket in slot a FixedWindow bucket when window, else
// a GCRA one, and reports whether it could: false, the bucket left as it
// was, when it is to be a FixedWindow bucket, its key is too long for
// that kind's slot and was kept in it, and table.long has no room for
// it. A GCRA bucket's key stays where it is (table.long keeps a key that
// a GCRA bucket's slot could hold until the bucket is removed). A
// FixedWindow bucket's window is left for the caller to set.
func (t *table) setKind(slot int, window bool) bool {
	s := &t.slots[slot]
	if !window {
		s.klen &^= windowBit
		return true
	}
	if n := s.keyLen(); s.klen&(longBit|lineBit) == 0 && n > inlineWindowKey {
		if !t.addLong(s, s.hash, unsafe.String(&s.key[0], n)) {
			return false
		}
		s.klen |= longBit
	}
	s.klen |= windowBit
	return true
}

// keepFar keeps key, with hash h, longer than s's slot keeps, outside
// it, for s: when line (see lined) and no line has h already, its first
// inlineWindowKey bytes in s.key and the rest in a line, with lineBit
// set; else in table.long, with longBit set. It reports whether it
// could: false when table.long has no room.
func (t *table) keepFar(s *slot, h uint64, key string, line bool) bool {
	if line && t.lines.add(h, key[inlineWindowKey:]) {
		copy(s.key[:inlineWindowKey], key)
		s.klen |= lineBit
		return true
	}
	if !t.addLong(s, h, key) {
		return false
	}
	s.klen |= longBit
	return true
}

// farKeyIs reports whether s, whose key is kept in part or whole outside
// it, holds key.
func (t *table) farKeyIs(s *slot, key string) bool {
	n := s.keyLen()
	if n != len(key) {
		return false
	}
	if s.hasLine() {
		return string(s.key[:inlineWindowKey]) == key[:inlineWindowKey] && t.lines.is(s.hash, key[inlineWindowKey:])
	}
	return t.long.is(s.kref, n, key)
}

// insert adds key, with hash h, which the table does not hold, as a
// FixedWindow bucket when window, else a GCRA one, and returns its slot,
// or -1 when a key longer than its slot keeps finds no room in table.long
// (past 32 GiB of such keys), or is longer than maxKeyLen. It may grow
// the table or its lines, moving every slot or line. The key is copied:
// the caller's may live in memory it reuses.
func (t *table) insert(h uint64, key string, window bool) int {
	if len(key) > maxKeyLen {
		return -1
	}
	if (t.n+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	i, _ := t.find(h, key)
	s := &t.slots[i]
	s.klen = uint32(len(key))
	if len(key) <= inlineLen(window) {
		copy(s.key[:], key)
	} else if !t.keepFar(s, h, key, lined(len(key), window)) {
		s.klen = 0
		return -1
	}
	if window {
		s.klen |= windowBit
	}
	s.hash = h
	t.n++
	return i
}

// remove deletes the bucket in slot i. Buckets after it in its run may
// move back, into i among others.
func (t *table) remove(i int) {
	switch s := &t.slots[i]; {
	case s.hasLine():
		t.lines.remove(s.hash)
	case s.isLong():
		t.removeLong(s)
	}
	t.slots[closeHole(t.slots, i, t.shift)] = slot{}
	t.n--
}

// grow doubles the table.
func (t *table) grow() { t.resize(2 * len(t.slots)) }

// minShrunk is the fewest slots shrink leaves: as many as one sweep
// looks at (slotsPerBucket * sweepBudget). A sweep reaches every slot of a table that
// small and removes every expired bucket, so its count swings between
// none and the inserts since the last sweep; halving it further only
// makes it grow again, an allocation and a move of every slot each time
// (a shard churning through short-lived buckets did so again and again).
const minShrunk = slotsPerBucket * sweepBudget

// shrink halves the table while it is less than an eighth full and longer
// than minShrunk, and reports whether it did: a table whose buckets have
// mostly expired gives its memory back. It moves every slot. (The table
// grows at three quarters full, so a shrunk table, less than a quarter
// full, is far from growing again.)
func (t *table) shrink() bool {
	size := len(t.slots)
	for size > minShrunk && t.n*8 < size {
		size /= 2
	}
	if size == len(t.slots) {
		return false
	}
	t.resize(size)
	return true
}

// resize moves every bucket into a new table of size slots, a power of
// two.
func (t *table) resize(size int) {
	old := t.slots
	t.slots = makeEntries[slot](t.mem, size)
	t.shift = uint(64 - bits.TrailingZeros(uint(size)))
	rehash(t.slots, old, t.shift)
	freeEntries(t.mem, old)
	t.cursor = 0
	t.moved = true
}

// clear empties the table, giving its memory back.
func (t *table) clear() {
	freeEntries(t.mem, t.slots)
	freeEntries(t.mem, t.lines.lines)
	*t = newTable(t.mem)
}
