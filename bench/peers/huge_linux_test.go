package peers

import (
	"os"
	"slices"
	"strconv"
	"strings"
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

// hugePages reads /proc/self/smaps and returns, over the mappings that
// asked for transparent huge pages (madvise MADV_HUGEPAGE, the flag hg),
// the bytes mapped and the bytes the kernel holds in huge pages
// (AnonHugePages): in this process, the memory store's arena and
// hugePageLines' tables. ok is false if smaps cannot be read.
func hugePages() (asked, huge uint64, ok bool) {
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, 0, false
	}
	var size, anonHuge uint64
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "Size:":
			size = kB(f)
		case "AnonHugePages:":
			anonHuge = kB(f)
		case "VmFlags:":
			// The last field of a mapping's entry.
			if slices.Contains(f[1:], "hg") {
				asked += size
				huge += anonHuge
			}
			size, anonHuge = 0, 0
		}
	}
	return asked, huge, true
}

// kB is the bytes of an smaps field such as "Size: 2048 kB".
func kB(f []string) uint64 {
	n, _ := strconv.ParseUint(f[1], 10, 64)
	return n << 10
}
