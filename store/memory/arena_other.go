//go:build !linux || race

package memory

import "unsafe"

// arena, outside Linux and in builds with the race detector, gives no
// memory: every table comes from Go's heap (see arena_linux.go).
type arena struct{}

func newArena() *arena { return nil }

func (a *arena) alloc(int) unsafe.Pointer { return nil }

func (a *arena) free(unsafe.Pointer, int) {}

func (a *arena) release() {}

func (a *arena) mapped() int { return 0 }

func (a *arena) used() int { return 0 }
