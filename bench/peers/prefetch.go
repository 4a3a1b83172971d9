//go:build amd64 || arm64

package peers

// prefetch asks the processor to start loading the cache line at addr,
// without waiting for it (the memory store's own, for the floor).
//
//go:noescape
func prefetch(addr uintptr)

// ticks reads the processor's cycle counter without ordering the read
// after the instructions ahead of it (for the floor: a clock read that
// does not wait on the line's load).
//
//go:noescape
func ticks() int64

const haveTicks = true
