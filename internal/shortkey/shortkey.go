// Package shortkey holds what a limits.Set knows of one limit name for
// limiter.SpendFor to build the bucket key of an account id under it in
// registers, with no call: the key's prefix as two words, and the name's
// default limit compiled. Everything a decision reads of it is in one
// struct, so that the lookup and the checks are inlined into SpendFor and
// the store's slot is asked for before any call (BENCHMARKS.md).
package shortkey

import "github.com/sluice-rl/sluice/gcra"

// Name is a limit name as SpendFor's direct path needs it.
type Name struct {
	// Lo and Hi are the key's prefix, "<enum>:", as keybuf.Load gives
	// it, and Len its length.
	Lo, Hi uint64
	Len    int
	// Params is the name's default limit, compiled
	// (gcra.Limit.ValidParams).
	Params gcra.Params
	// OK is whether the path may be taken at all: the name's ids are
	// account ids (limits.FormatRegID), its default is there and valid,
	// and its prefix is 1 to 7 bytes, as keybuf.JoinNear joins.
	OK bool
	// Bit is the name's bit among a Set's enums of overrides: 1 << (enum
	// % 64). A Set whose overrides have that bit may have one for the
	// key, which this path does not look up.
	Bit uint64
}
