//go:build !amd64

package keybuf

import (
	"encoding/binary"
	"unsafe"
)

// store16 writes lo then hi, little-endian, at p. Here it does so in two
// 8-byte stores: only amd64 has the one-store version.
func store16(p *byte, lo, hi uint64) {
	b := unsafe.Slice(p, Max)
	binary.LittleEndian.PutUint64(b, lo)
	binary.LittleEndian.PutUint64(b[8:], hi)
}
