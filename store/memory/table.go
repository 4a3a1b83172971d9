package memory

import (
	"encoding/binary"
	"math/bits"

	"github.com/sluice-rl/sluice/internal/keybuf"
)

// inlineKey is the longest key a GCRA bucket keeps in its slot, and
// inlineWindowKey a FixedWindow bucket's, whose window takes the slot's
// last 16 bytes. They are what a 64-byte slot has room for besides the
// hash, the expiry and the length. A longer key of up to maxWideKey bytes
// makes its bucket a wide one, a slot and a second line beside it, in a
// table of its own (wide.go); a longer one still is kept in table.long
// and costs a second memory access, after the slot's, to compare
// (longkeys.go).
const (
	inlineKey       = 40
	inlineWindowKey = 24
)

// A key SpendGCRAShort finds by its words is held in its slot, of either
// kind.
const _ = uint(inlineWindowKey - keybuf.Max)

// windowBit marks, in slot.klen, a FixedWindow bucket, and longBit a key
// kept in table.long. The key's length takes the bits below them.
const (
	windowBit = 1 << 31
	longBit   = 1 << 30
	// maxKeyLen bounds a key's length: a longer one is refused. It
	// leaves bit 29 free (it was a mark of lines, before wide buckets),
	// so that the bound stays 512 MiB.
	maxKeyLen = 1<<29 - 1
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
// length and its bucket's kind keep it (wideFor, inlineLen). A key's
// GCRA bucket and its windows of each length are buckets apart, under
// hashes of their own (Store.opHash): a bucket never changes kind. A wide
// bucket's slot is the first half of its entry (wide).
type slot struct {
	hash uint64 // the key's hash with its low bit set; 0 marks an empty slot
	exp  int64  // the Unix nanosecond at which the bucket is full again; GCRA: its TAT
	klen uint32 // the key's length, with windowBit and longBit
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

// window returns a FixedWindow bucket's first Unix second and count.
func (s *slot) window() (start, count int64) {
	return int64(binary.LittleEndian.Uint64(s.key[inlineWindowKey:])), int64(binary.LittleEndian.Uint64(s.key[inlineWindowKey+8:]))
}

// setWindow stores a FixedWindow bucket's first Unix second and count.
func (s *slot) setWindow(start, count int64) {
	binary.LittleEndian.PutUint64(s.key[inlineWindowKey:], uint64(start))
	binary.LittleEndian.PutUint64(s.key[inlineWindowKey+8:], uint64(count))
}

// base returns s: the slot of an entry of either table (see scanEntries).
func (s *slot) base() *slot { return s }

// table is an open-addressing hash table with linear probing, grown by
// doubling when three quarters full and shrunk by halving, when swept,
// while less than an eighth full. A bucket's home slot is given by the
// top bits of its hash (the shard is chosen by the low ones), and removal
// shifts the buckets after it back, so that no tombstones build up.
type table struct {
	slots  []slot
	shift  uint // 64 - log2(len(slots))
	n      int  // buckets held in slots
	wide   wides
	long   longKeys
	cursor int  // where the next sweep starts
	moved  bool // slots moved since the shard last published them
	mem    *arena
}

const minSlots = 8

// newTable returns an empty table whose slots and wide buckets mem holds
// when they are large enough (see arena); nil keeps them all in Go's
// heap.
func newTable(mem *arena) table {
	return table{slots: make([]slot, minSlots), shift: 64 - 3, moved: true, mem: mem}
}

// A bucket's ref is where it is held: the index of its slot, or, with
// wideRef set, of its entry in wide; -1 for none. Its state and its key's
// length are in the slot at (table.at).
const wideRef = 1 << (bits.UintSize - 2)

// at returns the slot of the bucket at r.
func (t *table) at(r int) *slot {
	if r&wideRef != 0 {
		return &t.wide.e[r&^wideRef].slot
	}
	return &t.slots[r]
}

// window returns the first Unix second and count of the FixedWindow
// bucket at ref r.
func (t *table) window(r int) (start, count int64) {
	if r&wideRef != 0 {
		return t.wide.e[r&^wideRef].window()
	}
	return t.slots[r].window()
}

// setWindow stores the first Unix second and count of the FixedWindow
// bucket at ref r.
func (t *table) setWindow(r int, start, count int64) {
	if r&wideRef != 0 {
		t.wide.e[r&^wideRef].setWindow(start, count)
		return
	}
	t.slots[r].setWindow(start, count)
}

// count returns the buckets held.
func (t *table) count() int { return t.n + t.wide.n }

func (t *table) mask() int { return len(t.slots) - 1 }

func (t *table) home(h uint64) int { return int(h >> t.shift) }

// find returns the ref of the bucket holding key, whose hash is h (low
// bit set), in the table that holds it as a bucket of the kind given (a
// FixedWindow one when window), and true; or, when that table is the
// slots, the empty slot where it would go, and false; or -1 and false.
func (t *table) find(h uint64, key string, window bool) (int, bool) {
	if wideFor(len(key), window) {
		i, ok := t.wide.find(h, key)
		if ok {
			i |= wideRef
		}
		return i, ok
	}
	return t.findSlot(h, key)
}

// findSlot is find for a key whose bucket is not wide: the slot holding
// key and true, or the empty slot where it would go and false.
func (t *table) findSlot(h uint64, key string) (int, bool) {
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
		if s.klen&longBit == 0 {
			if s.keyLen() == len(key) && string(s.key[:len(key)]) == key {
				return i, true
			}
		} else if s.keyLen() == len(key) && t.long.is(s.kref, len(key), key) {
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
// nowNs for a bucket missing or full again.
func (t *table) gcraTAT(slot int, found bool, nowNs int64) (int, int64) {
	if !found {
		return -1, nowNs
	}
	if e := &t.slots[slot]; e.exp > nowNs {
		return slot, e.exp
	}
	return slot, nowNs
}

// setTAT sets the TAT of the GCRA bucket in slot to tat; the bucket may
// be dropped once full again, past it.
func (t *table) setTAT(slot int, tat int64) { t.slots[slot].exp = tat }

// insert adds key, with hash h, which the table does not hold, as a
// FixedWindow bucket when window, else a GCRA one, and returns its ref,
// or -1 when a key longer than its slot keeps finds no room in table.long
// (past 32 GiB of such keys), or is longer than maxKeyLen. It may grow
// the table of slots or of wide buckets, moving each of its buckets. The
// key is copied: the caller's may live in memory it reuses.
func (t *table) insert(h uint64, key string, window bool) int {
	if len(key) > maxKeyLen {
		return -1
	}
	if wideFor(len(key), window) {
		return t.wide.insert(t.mem, h, key, window) | wideRef
	}
	if (t.n+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	i, _ := t.findSlot(h, key)
	s := &t.slots[i]
	s.klen = uint32(len(key))
	if len(key) <= inlineLen(window) {
		copy(s.key[:], key)
	} else if !t.addLong(s, h, key) {
		s.klen = 0
		return -1
	} else {
		s.klen |= longBit
	}
	if window {
		s.klen |= windowBit
	}
	s.hash = h
	t.n++
	return i
}

// remove deletes the bucket at ref r. Buckets after it in its run may
// move back, into r among others.
func (t *table) remove(r int) {
	if r&wideRef != 0 {
		t.wide.remove(r &^ wideRef)
		return
	}
	i := r
	if s := &t.slots[i]; s.isLong() {
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
	freeEntries(t.mem, t.wide.e)
	*t = newTable(t.mem)
}
