package keybuf

// store16 writes lo then hi, little-endian, at p in one 16-byte store.
//
//go:noescape
func store16(p *byte, lo, hi uint64)
