package memory

import (
	"encoding/binary"
	"math"
)

// longKeys holds a table's keys longer than their slots keep (inlineKey,
// inlineWindowKey), one after another in one buffer that holds no
// pointer: comparing such a key with a caller's is one memory access past
// its slot (kept as strings, it was two: the string's header, then its
// bytes), and the collector has neither a header nor a string per bucket
// to mark.
//
// Each key is a record of 8-byte words: a header, then the key's bytes,
// padded with zeros to a whole word. The header holds the key's length in
// its low 32 bits, with deadBit set once the key is removed, and the top
// 32 bits of the key's hash in its high ones, which find the record's
// slot again when compactLong moves it. A slot holds its record's offset in
// words (slot.kref).
type longKeys struct {
	buf  []byte
	dead int // bytes of removed records in buf
}

// deadBit marks, in a record's header, a removed key.
const deadBit = 1 << 31

// maxLongWords bounds buf, in words: a slot's kref is a uint32.
const maxLongWords = math.MaxUint32

// compactAt is the fewest removed bytes that make remove compact buf:
// below it, a few dead records are not worth a copy.
const compactAt = 4 << 10

// recordSize is the bytes of the record of a key of n bytes.
func recordSize(n int) int { return 8 + (n+7)&^7 }

// is reports whether the key of n bytes at word w is key.
func (l *longKeys) is(w uint32, n int, key string) bool {
	return string(l.key(w, n)) == key
}

// key returns the bytes of the key of n bytes at word w, in buf.
func (l *longKeys) key(w uint32, n int) []byte {
	off := int(w)*8 + 8
	return l.buf[off : off+n]
}

// add appends a record of key, whose hash is h, and returns its word
// offset; ok is false, the key not added, when buf would pass
// maxLongWords words or the key's length does not fit its header.
func (l *longKeys) add(h uint64, key string) (w uint32, ok bool) {
	off := len(l.buf)
	size := recordSize(len(key))
	if uint64(len(key)) >= deadBit || uint64(off+size)/8 > maxLongWords {
		return 0, false
	}
	if off+size > cap(l.buf) {
		// An eighth more than needed, where append would leave up to a
		// quarter (or all of it, while small) unused: the buffer's
		// memory stays within an eighth of its records'.
		n := off + size
		buf := make([]byte, off, n+n/8)
		copy(buf, l.buf)
		l.buf = buf
	}
	l.buf = l.buf[:off+size]
	binary.LittleEndian.PutUint64(l.buf[off:], h&^(1<<32-1)|uint64(len(key)))
	clear(l.buf[off+8+copy(l.buf[off+8:], key) : off+size])
	return uint32(off / 8), true
}

// kill marks the record of n bytes at word w removed.
func (l *longKeys) kill(w uint32, n int) {
	off := int(w) * 8
	binary.LittleEndian.PutUint64(l.buf[off:], binary.LittleEndian.Uint64(l.buf[off:])|deadBit)
	l.dead += recordSize(n)
}

// addLong keeps key, longer than its slot keeps, with hash h, for the
// slot s is to hold it, and reports whether it could.
func (t *table) addLong(s *slot, h uint64, key string) bool {
	w, ok := t.long.add(h, key)
	if !ok && t.long.dead > 0 {
		t.compactLong()
		w, ok = t.long.add(h, key)
	}
	s.kref = w
	return ok
}

// removeLong drops the key of the slot s, kept in the buffer, and
// compacts the keys once removed ones are an eighth of the buffer and at
// least compactAt bytes: the buffer's memory stays within about a quarter
// more than the records of the keys held, plus compactAt.
func (t *table) removeLong(s *slot) {
	t.long.kill(s.kref, s.keyLen())
	if t.long.dead >= compactAt && t.long.dead*8 >= len(t.long.buf) {
		t.compactLong()
	}
}

// compactLong copies the live records into a new buffer, an eighth
// larger than they need, and points their slots at their new places.
// Each record's slot is found from the top of its hash, as find does,
// going on past empty slots: in a table of more than 2^32 slots, where a
// bucket's home takes more bits than the header keeps, the search starts
// at the first home those bits allow.
func (t *table) compactLong() {
	old := t.long.buf
	live := len(old) - t.long.dead
	buf := make([]byte, 0, live+live/8)
	m := t.mask()
	for off := 0; off < len(old); {
		hdr := binary.LittleEndian.Uint64(old[off:])
		n := int(uint32(hdr) &^ deadBit)
		size := recordSize(n)
		if uint32(hdr)&deadBit == 0 {
			w, i := uint32(off/8), int(hdr>>32<<32>>t.shift)
			for range len(t.slots) {
				if s := &t.slots[i]; s.hash != 0 && s.isLong() && s.kref == w {
					s.kref = uint32(len(buf) / 8)
					buf = append(buf, old[off:off+size]...)
					break
				}
				i = (i + 1) & m
			}
		}
		off += size
	}
	t.long = longKeys{buf: buf}
}
