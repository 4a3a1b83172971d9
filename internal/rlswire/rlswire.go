// Package rlswire decodes the usual Envoy rate limit request
// (envoy.service.ratelimit.v3.RateLimitRequest) from its protobuf wire
// form with a few allocations, where the generic protobuf decoder makes
// five or so per descriptor.
//
// Unmarshal decodes a request of the plain shape every Envoy sends: a
// domain, descriptors of entries (key and value), a hits_addend per
// request or per descriptor, is_negative_hits. Anything else — a
// descriptor's limit override, a field this version of the message does
// not know, a string that is not UTF-8, a malformed message — it declines,
// and the caller decodes the message with the protobuf decoder, which
// keeps unknown fields and words the errors. What Unmarshal accepts it
// decodes to a message proto.Equal to the protobuf decoder's
// (FuzzUnmarshal).
//
// Arrays.Unmarshal does the same into arrays reused from request to
// request (Get, Release): the gRPC server then allocates only the one
// copy of a request's bytes.
package rlswire

import (
	"sync"
	"unicode/utf8"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// MaxBytes is the largest message Unmarshal decodes. The strings of a
// message share the one copy of its bytes, which any of them keeps alive
// (a hot key held by the dashboard, say): bounded, that is at most this
// much per string kept.
const MaxBytes = 2 << 10

// The field numbers of the messages, from their .proto files.
const (
	reqDomain      = 1 // string
	reqDescriptors = 2 // repeated RateLimitDescriptor
	reqHitsAddend  = 3 // uint32

	descEntries        = 1 // repeated Entry
	descLimit          = 2 // RateLimitOverride: declined
	descHitsAddend     = 3 // google.protobuf.UInt64Value
	descIsNegativeHits = 4 // bool

	entryKey   = 1 // string
	entryValue = 2 // string

	wrapperValue = 1 // uint64, in UInt64Value
)

// Unmarshal decodes b into req, reset first, and reports whether it did.
// When it reports false, req is left reset, and b is for the protobuf
// decoder. It allocates one copy of b's bytes for all the strings, one
// array each for the descriptors, the entries and their pointers, and a
// UInt64Value per descriptor that has a hits_addend.
func Unmarshal(b []byte, req *rlsv3.RateLimitRequest) bool {
	var a Arrays
	return a.Unmarshal(b, req)
}

// Arrays holds the descriptors and entries of a decoded request, and
// their pointers, for the next request once nothing reads this one. The
// zero value is ready to use; Get takes one from the package's pool and
// Release gives it back. An Arrays is not safe for concurrent use.
type Arrays struct {
	descs   []ratelimitv3.RateLimitDescriptor
	dptrs   []*ratelimitv3.RateLimitDescriptor
	entries []ratelimitv3.RateLimitDescriptor_Entry
	eptrs   []*ratelimitv3.RateLimitDescriptor_Entry
}

var pool = sync.Pool{New: func() any { return new(Arrays) }}

// Get returns Arrays from the package's pool.
func Get() *Arrays { return pool.Get().(*Arrays) }

// Release clears a, so that it keeps no request's strings, and gives it
// back to the pool when its arrays are of a usual size. Nothing may read
// the request a decoded last after this.
func (a *Arrays) Release() {
	a.clear()
	if cap(a.descs) <= maxPooledDescriptors && cap(a.entries) <= maxPooledEntries {
		pool.Put(a)
	}
}

// The largest arrays Release keeps for reuse: most requests have a
// descriptor or a few, of an entry or a few each.
const (
	maxPooledDescriptors = 64
	maxPooledEntries     = 256
)

// clear zeroes what the last request used, and forgets it.
func (a *Arrays) clear() {
	clear(a.descs)
	clear(a.dptrs)
	clear(a.entries)
	clear(a.eptrs)
	a.descs, a.dptrs, a.entries, a.eptrs = a.descs[:0], a.dptrs[:0], a.entries[:0], a.eptrs[:0]
}

// Unmarshal is the package's Unmarshal, with the descriptors and entries
// in a's arrays, which replace those of the last request a decoded: that
// request must no longer be read. It allocates the copy of b's bytes, and
// the arrays only when they are too short.
func (a *Arrays) Unmarshal(b []byte, req *rlsv3.RateLimitRequest) bool {
	a.clear()
	req.Reset()
	if len(b) > MaxBytes {
		return false
	}
	nDesc, nEntries, ok := count(b)
	if !ok {
		return false
	}
	// Strings are cut from one copy of the message; nothing else refers
	// to it.
	text := string(b)
	a.descs, a.dptrs = sized(a.descs, nDesc), sized(a.dptrs, nDesc)
	a.entries, a.eptrs = sized(a.entries, nEntries), sized(a.eptrs, nEntries)
	if nDesc > 0 {
		req.Descriptors = a.dptrs[:nDesc:nDesc]
	}
	d, e := 0, 0
	for off := 0; off < len(b); {
		num, _, n := consumeTag(b[off:])
		off += n
		switch num {
		case reqDomain:
			v, n := consumeBytes(b[off:])
			req.Domain = text[off+n-len(v) : off+n]
			off += n
		case reqDescriptors:
			v, n := consumeBytes(b[off:])
			start := off + n - len(v)
			off += n
			desc := &a.descs[d]
			a.dptrs[d] = desc
			d++
			k := e
			e = descriptor(v, text[start:start+len(v)], desc, a.entries, e)
			if e > k {
				desc.Entries = a.eptrs[k:e:e]
			}
			for i := k; i < e; i++ {
				a.eptrs[i] = &a.entries[i]
			}
		default: // reqHitsAddend, as count checked
			v, n := protowire.ConsumeVarint(b[off:])
			req.HitsAddend = uint32(v)
			off += n
		}
	}
	return true
}

// sized returns s with length n, reusing its array when large enough.
func sized[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// descriptor fills desc from its message v (text holds the same bytes),
// its entries into entries from index e on; it returns the index after
// the last. v is as count checked it.
func descriptor(v []byte, text string, desc *ratelimitv3.RateLimitDescriptor, entries []ratelimitv3.RateLimitDescriptor_Entry, e int) int {
	for off := 0; off < len(v); {
		num, _, n := consumeTag(v[off:])
		off += n
		switch num {
		case descEntries:
			m, n := consumeBytes(v[off:])
			start := off + n - len(m)
			off += n
			entry(m, text[start:start+len(m)], &entries[e])
			e++
		case descHitsAddend:
			m, n := consumeBytes(v[off:])
			off += n
			var x uint64
			for o := 0; o < len(m); {
				_, _, k := consumeTag(m[o:])
				o += k
				x, k = protowire.ConsumeVarint(m[o:])
				o += k
			}
			desc.HitsAddend = wrapperspb.UInt64(x)
		default: // descIsNegativeHits
			x, n := protowire.ConsumeVarint(v[off:])
			off += n
			desc.IsNegativeHits = x != 0
		}
	}
	return e
}

// entry fills en from its message m (text holds the same bytes); m is as
// count checked it.
func entry(m []byte, text string, en *ratelimitv3.RateLimitDescriptor_Entry) {
	for off := 0; off < len(m); {
		num, _, n := consumeTag(m[off:])
		off += n
		s, n := consumeBytes(m[off:])
		str := text[off+n-len(s) : off+n]
		off += n
		if num == entryKey {
			en.Key = str
		} else {
			en.Value = str
		}
	}
}

// count checks that b is a request of the plain shape and counts its
// descriptors and their entries.
func count(b []byte) (nDesc, nEntries int, ok bool) {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return 0, 0, false
		}
		b = b[n:]
		switch {
		case num == reqDomain && typ == protowire.BytesType:
			v, n := consumeBytes(b)
			if n < 0 || !utf8.Valid(v) {
				return 0, 0, false
			}
			b = b[n:]
		case num == reqDescriptors && typ == protowire.BytesType:
			v, n := consumeBytes(b)
			if n < 0 {
				return 0, 0, false
			}
			k, ok := countEntries(v)
			if !ok {
				return 0, 0, false
			}
			nDesc++
			nEntries += k
			b = b[n:]
		case num == reqHitsAddend && typ == protowire.VarintType:
			_, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, 0, false
			}
			b = b[n:]
		default:
			return 0, 0, false
		}
	}
	return nDesc, nEntries, true
}

// countEntries checks that v is a descriptor of the plain shape, with at
// most one hits_addend, and counts its entries.
func countEntries(v []byte) (int, bool) {
	k, hits := 0, false
	for len(v) > 0 {
		num, typ, n := consumeTag(v)
		if n < 0 {
			return 0, false
		}
		v = v[n:]
		switch {
		case num == descEntries && typ == protowire.BytesType:
			m, n := consumeBytes(v)
			if n < 0 || !plainEntry(m) {
				return 0, false
			}
			k++
			v = v[n:]
		case num == descHitsAddend && typ == protowire.BytesType && !hits:
			// Twice would merge the two messages: left to protobuf.
			m, n := consumeBytes(v)
			if n < 0 || !plainUInt64Value(m) {
				return 0, false
			}
			hits = true
			v = v[n:]
		case num == descIsNegativeHits && typ == protowire.VarintType:
			_, n := protowire.ConsumeVarint(v)
			if n < 0 {
				return 0, false
			}
			v = v[n:]
		default:
			return 0, false
		}
	}
	return k, true
}

// plainEntry reports whether m is an entry of keys and values in UTF-8
// and nothing else.
func plainEntry(m []byte) bool {
	for len(m) > 0 {
		num, typ, n := consumeTag(m)
		if n < 0 || (num != entryKey && num != entryValue) || typ != protowire.BytesType {
			return false
		}
		m = m[n:]
		s, n := consumeBytes(m)
		if n < 0 || !utf8.Valid(s) {
			return false
		}
		m = m[n:]
	}
	return true
}

// plainUInt64Value reports whether m is a UInt64Value of values and
// nothing else.
func plainUInt64Value(m []byte) bool {
	for len(m) > 0 {
		num, typ, n := consumeTag(m)
		if n < 0 || num != wrapperValue || typ != protowire.VarintType {
			return false
		}
		m = m[n:]
		_, n = protowire.ConsumeVarint(m)
		if n < 0 {
			return false
		}
		m = m[n:]
	}
	return true
}

// consumeTag is protowire.ConsumeTag, the usual one-byte tag decoded in
// line.
func consumeTag(b []byte) (protowire.Number, protowire.Type, int) {
	if len(b) > 0 && b[0] < 0x80 && b[0] >= 8 {
		return protowire.Number(b[0] >> 3), protowire.Type(b[0] & 7), 1
	}
	return protowire.ConsumeTag(b)
}

// consumeBytes is protowire.ConsumeBytes, the usual one-byte length
// decoded in line.
func consumeBytes(b []byte) ([]byte, int) {
	if len(b) > 0 && b[0] < 0x80 {
		if n := 1 + int(b[0]); n <= len(b) {
			return b[1:n], n
		}
	}
	return protowire.ConsumeBytes(b)
}
