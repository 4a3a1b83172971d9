//go:build !amd64 && !arm64

package peers

// prefetch does nothing on this architecture.
func prefetch(addr uintptr) {}
