package adaptive

// slot is one sub-bucket of a sliding window.
type slot struct {
	count   int64 // admitted requests
	samples int64 // latency samples
	latNs   int64 // sum of the samples' latencies, in nanoseconds
	errors  int64 // upstream errors
}

func (s *slot) add(o slot) {
	s.count += o.count
	s.samples += o.samples
	s.latNs += o.latNs
	s.errors += o.errors
}

func (s *slot) sub(o slot) {
	s.count -= o.count
	s.samples -= o.samples
	s.latNs -= o.latNs
	s.errors -= o.errors
}

// ring is a sliding window of len(slots) sub-buckets with running totals.
// Slot indexes are absolute (time / slot length); the window is the slots
// (head-n, head]. A ring is not safe for concurrent use: its owner locks.
type ring struct {
	head  int64 // absolute index of the newest slot
	total slot  // sum of every slot in the window
	slots []slot
}

func newRing(n int) ring { return ring{slots: make([]slot, n)} }

// advance moves the window so that cur is its newest slot, dropping the
// slots that leave it. A cur behind head (a clock stepping back) is treated
// as head.
func (r *ring) advance(cur int64) {
	if cur <= r.head {
		return
	}
	n := int64(len(r.slots))
	if cur-r.head >= n {
		clear(r.slots)
		r.total = slot{}
	} else {
		for i := r.head + 1; i <= cur; i++ {
			s := &r.slots[i%n]
			r.total.sub(*s)
			*s = slot{}
		}
	}
	r.head = cur
}

// at returns the slot with absolute index i, or nil when i is outside the
// window. requires advance called for the current time.
func (r *ring) at(i int64) *slot {
	n := int64(len(r.slots))
	if i > r.head || i <= r.head-n || i < 0 {
		return nil
	}
	return &r.slots[i%n]
}

// addAt adds d to the slot with absolute index i (clamped to head when it
// is newer) and to the totals. A slot already out of the window is ignored.
func (r *ring) addAt(i int64, d slot) {
	if i > r.head {
		i = r.head
	}
	if s := r.at(i); s != nil {
		s.add(d)
		r.total.add(d)
	}
}

// setAt replaces the slot with absolute index i by v, keeping the totals
// right. A slot out of the window is ignored.
func (r *ring) setAt(i int64, v slot) {
	if s := r.at(i); s != nil {
		r.total.sub(*s)
		*s = v
		r.total.add(v)
	}
}

// avgMs is the average latency of the window in milliseconds, and the
// number of samples it rests on.
func (r *ring) avgMs() (float64, int64) {
	if r.total.samples <= 0 {
		return 0, 0
	}
	return float64(r.total.latNs) / float64(r.total.samples) / 1e6, r.total.samples
}

// oldest is the absolute index of the oldest slot with an admitted request,
// or -1 when the window has none.
func (r *ring) oldest() int64 {
	if r.total.count <= 0 {
		return -1
	}
	n := int64(len(r.slots))
	for i := max(r.head-n+1, 0); i <= r.head; i++ {
		if r.slots[i%n].count > 0 {
			return i
		}
	}
	return -1
}

// countRing is a ring of admitted counts only, for per-client shares.
type countRing struct {
	head  int64
	total int64
	slots []int32
}

func (r *countRing) advance(cur int64) {
	if cur <= r.head {
		return
	}
	n := int64(len(r.slots))
	if cur-r.head >= n {
		clear(r.slots)
		r.total = 0
	} else {
		for i := r.head + 1; i <= cur; i++ {
			r.total -= int64(r.slots[i%n])
			r.slots[i%n] = 0
		}
	}
	r.head = cur
}

// inc counts one request in the head slot.
func (r *countRing) inc() {
	r.slots[r.head%int64(len(r.slots))]++
	r.total++
}

func (r *countRing) oldest() int64 {
	if r.total <= 0 {
		return -1
	}
	n := int64(len(r.slots))
	for i := max(r.head-n+1, 0); i <= r.head; i++ {
		if r.slots[i%n] > 0 {
			return i
		}
	}
	return -1
}
