//go:build amd64 || arm64

package memory

// prefetch asks the processor to start loading the cache line at addr,
// without waiting for it. It never faults: addr may be any address, even
// one no longer (or never) mapped.
//
//go:noescape
func prefetch(addr uintptr)
