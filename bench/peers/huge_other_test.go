//go:build !linux

package peers

import "testing"

// hugePageLines has no huge pages to give outside Linux.
func hugePageLines(testing.TB, int) [][8]int64 { return nil }

// hugePages has no huge pages to count outside Linux.
func hugePages() (asked, huge uint64, ok bool) { return 0, 0, false }
