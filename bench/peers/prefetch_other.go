//go:build !amd64 && !arm64

package peers

// prefetch does nothing on this architecture.
func prefetch(addr uintptr) {}

// ticks is not read on this architecture; haveTicks is false.
func ticks() int64 { return 0 }

const haveTicks = false
