//go:build amd64 || arm64

package peers

// prefetch asks the processor to start loading the cache line at addr,
// without waiting for it (the memory store's own, for the floor).
//
//go:noescape
func prefetch(addr uintptr)
