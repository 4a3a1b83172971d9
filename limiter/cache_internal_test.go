package limiter

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

var cacheTestNow = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// heapAfter fills a new cache of size bytes with n over-limit windows and
// reports the cache, the heap it grew by (after a collection) and the
// newest transaction.
func heapAfter(size, n int) (*overLimitCache, int64, Transaction) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c := newOverLimitCache(size)
	w := Window{Limit: 0, Length: time.Hour}
	d := Decision{ResetIn: time.Hour, RetryIn: time.Hour, Count: 1}
	var txn Transaction
	key := []byte("domain_descriptor_key_value_0000000000_")
	for i := range n {
		// The same bytes each time: the keys take no heap.
		copy(key[28:], fmt.Appendf(key[28:28], "%010d", i))
		txn = Transaction{Key: string(key), Window: w, Cost: 1}
		c.remember(&txn, cacheTestNow, &d)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(c)
	return c, int64(after.HeapAlloc) - int64(before.HeapAlloc), txn
}

func TestLocalCacheStaysWithinItsBytes(t *testing.T) {
	for _, size := range []int{64 << 10, 1 << 20, 16 << 20} {
		t.Run(fmt.Sprintf("a cache of %d bytes holds what fits and takes no more", size), func(t *testing.T) {
			fits := size / slotSize
			c, heap, newest := heapAfter(size, 10*fits)
			if got := c.entries(); got != fits {
				t.Errorf("got %d entries, want %d: the slots of %d bytes in %d bytes", got, fits, slotSize, size)
			}
			if _, ok := c.lookup(&newest, cacheTestNow); !ok {
				t.Errorf("the newest entry: not found, want found")
			}
			// The slots, the cache itself, and a little noise.
			if limit := int64(size) + 8<<10; heap > limit {
				t.Errorf("heap grew by %d bytes for %d keys, want at most %d", heap, 10*fits, limit)
			}
		})
	}
}
