package peers

import (
	"syscall"
	"testing"
	"unsafe"
)

// hugePageLines returns n zeroed lines in memory mapped outside Go's heap
// with transparent huge pages asked for (MADV_HUGEPAGE), aligned to 2 MiB
// as the memory store's arena aligns its tables, unmapped when tb ends;
// or nil, logged, if the kernel refuses.
func hugePageLines(tb testing.TB, n int) [][8]int64 {
	const huge = 2 << 20
	size := n * int(unsafe.Sizeof([8]int64{}))
	mem, err := syscall.Mmap(-1, 0, size+huge, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		tb.Log("no huge-page table:", err)
		return nil
	}
	tb.Cleanup(func() { _ = syscall.Munmap(mem) })
	off := int(-uintptr(unsafe.Pointer(&mem[0])) & (huge - 1))
	table := mem[off : off+size]
	if err := syscall.Madvise(table, syscall.MADV_HUGEPAGE); err != nil {
		tb.Log("no huge pages:", err)
		return nil
	}
	return unsafe.Slice((*[8]int64)(unsafe.Pointer(&table[0])), n)
}
