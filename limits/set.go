package limits

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/internal/keybuf"
	"github.com/sluice-rl/sluice/internal/shortkey"
)

// Set is an immutable snapshot of defaults and overrides: it answers which
// limit applies to a name and id. Build one with New or Load. A nil *Set
// has no defaults and no overrides. A Set is safe for concurrent use; to
// change limits, build a new Set and swap it in.
type Set struct {
	names     map[string]*entry    // built-in names and every name in the files
	overrides map[string]*Override // by bucket key, interned at load
	runtime   map[string]*Override // set at runtime, by key; see WithRuntime
	// fileEnums and enums say which names may have overrides, so that a
	// name with none is resolved without looking its key up. Bit enum%64
	// is set for the enum number of every override in the file
	// (fileEnums), and of every override, file or runtime (enums). See
	// mayOverride.
	fileEnums, enums uint64
	ndefaults        int
	// fast finds a name's entry without hashing the name: slot
	// nameSlot(name) holds the entry of one name (the first in enum order
	// of those sharing the slot), checked against the name's text; the
	// others are found in names. See entry.
	fast [nameSlots]*entry
	// byAddr finds a name's entry by the address of its text, for
	// Short: slot addrSlot(text, addrMul) holds the entry whose text is
	// there. addrMul is chosen when the Set is made so that no two
	// names share a slot, when one of the tries does so (see
	// placeByAddr); a name left out is still found by entry.
	byAddr   [addrSlots]*entry
	addrMul  uint64
	warnings ErrorList // from the overrides
}

// entry is what a Set knows about one name.
type entry struct {
	name       Name
	prefix     string // "<enum>:", interned
	plo, phi   uint64 // prefix as keybuf.Load gives it, for KeyWords
	def        gcra.Limit
	hasDefault bool
	// defParams is def compiled, and defValid whether def is there and
	// valid (gcra.Limit.ValidParams): KeyWords hands them to SpendFor,
	// whose decision then makes no division of its own.
	defParams gcra.Params
	defValid  bool
	defFile   string // where the default is written
	defLine   int
	// short is the name as limiter.SpendFor's direct path reads it,
	// made with the Set (see Set.Short).
	short shortkey.Name
}

// newEntry returns the entry of n, with no default yet.
func newEntry(n Name) *entry {
	e := &entry{name: n, prefix: enumPrefix(n.Enum)}
	if len(e.prefix) <= keybuf.Max {
		e.plo, e.phi = keybuf.Load(e.prefix)
	}
	return e
}

// Bucket is the answer of Set.Resolve: the bucket a request is counted in
// and the limit that applies to it.
type Bucket struct {
	// Key is the bucket key, "<enum>:<canonical id>", such as "3:12345678".
	Key string
	// Name describes the limit name.
	Name Name
	// Limit is the limit that applies; the zero Limit when not Enabled.
	Limit gcra.Limit
	// Enabled is false when the name has neither an override for this id
	// nor a default: the request is allowed without any check.
	Enabled bool
	// Override is true when Limit comes from an override, false when it is
	// the name's default.
	Override bool
	// OverrideKey is the key of the override that applies: Key itself, or,
	// for the regId:… formats, "<enum>:<regId>" when the override is for
	// the whole account. Empty when Override is false.
	OverrideKey string
	// Comment is the override's comment, if any.
	Comment string
	// Runtime is true when the override was set at runtime through the
	// admin API rather than written in the overrides file.
	Runtime bool
}

// New combines defaults and overrides, either of which may be nil, into a
// Set. It fails, with an ErrorList wrapping ErrDuplicate, when two
// user-defined names in the files share an enum number.
func New(defaults *Defaults, overrides *Overrides) (*Set, error) {
	s := &Set{
		names:     make(map[string]*entry, len(builtins)+defaults.Len()),
		overrides: make(map[string]*Override, overrides.Len()),
	}
	for _, n := range builtins {
		s.names[n.Text] = newEntry(n)
	}
	var errs ErrorList
	enums := map[int64]string{}
	add := func(n Name, file string, line int) *entry {
		if e, ok := s.names[n.Text]; ok {
			return e
		}
		if other, ok := enums[n.Enum]; ok {
			errs = append(errs, &Error{File: file, Line: line, Name: n.Text, Reason: collision(other, n), Err: ErrDuplicate})
			return nil
		}
		enums[n.Enum] = n.Text
		e := newEntry(n)
		s.names[n.Text] = e
		return e
	}
	if defaults != nil {
		for _, d := range defaults.list {
			if e := add(d.Name, d.File, d.Line); e != nil {
				e.def, e.hasDefault = d.Limit, true
				e.defParams, e.defValid = d.Limit.ValidParams()
				e.defFile, e.defLine = d.File, d.Line
				s.ndefaults++
			}
		}
	}
	if overrides != nil {
		s.warnings = overrides.warnings
		for i := range overrides.list {
			o := &overrides.list[i]
			if add(o.Name, o.File, o.Line) == nil {
				continue
			}
			if first, dup := s.overrides[o.Key]; dup {
				// Only possible for Overrides not built by ParseOverrides.
				errs = append(errs, &Error{File: o.File, Line: o.Line, Name: o.Name.Text, ID: o.ID, Err: ErrDuplicate,
					Reason: fmt.Sprintf("duplicate override for %s id %q (bucket key %s), first at line %d", o.Name.Text, o.ID, o.Key, first.Line)})
				continue
			}
			s.overrides[o.Key] = o
			s.fileEnums |= enumBit(o.Key)
		}
	}
	s.enums = s.fileEnums
	entries := slices.SortedFunc(maps.Values(s.names), func(a, b *entry) int { return cmp.Compare(a.name.Enum, b.name.Enum) })
	for _, e := range entries {
		e.short = shortkey.Name{
			Lo: e.plo, Hi: e.phi, Len: len(e.prefix), Params: e.defParams,
			OK:  e.name.Format == FormatRegID && e.defValid && len(e.prefix) < 8,
			Bit: enumMask(uint64(e.name.Enum)),
		}
		if i := nameSlot(e.name.Text); s.fast[i] == nil {
			s.fast[i] = e
		}
	}
	s.placeByAddr(entries)
	if len(errs) > 0 {
		return nil, errs
	}
	return s, nil
}

// Load reads the defaults file and the overrides file and combines them
// into a Set. An empty path skips that file.
func Load(defaultsPath, overridesPath string) (*Set, error) {
	var (
		d   *Defaults
		o   *Overrides
		err error
	)
	if defaultsPath != "" {
		if d, err = LoadDefaults(defaultsPath); err != nil {
			return nil, err
		}
	}
	if overridesPath != "" {
		if o, err = LoadOverrides(overridesPath); err != nil {
			return nil, err
		}
	}
	return New(d, o)
}

// Warnings returns the problems in the files that did not stop them
// loading, in line order; see Overrides.Warnings. The caller may modify the
// returned slice.
func (s *Set) Warnings() ErrorList {
	return slices.Clone(s.warnings)
}

// MaxIDBytes returns the longest id, in bytes, that Resolve accepts for
// format f: 1,024 bytes, far above the longest domain name (253 bytes) or
// address, and 65,536 bytes for the FQDN set formats, above the 100
// identifiers of at most 253 bytes an ACME order carries. A longer id is
// refused before any parsing, with an IDError naming the length and the
// maximum.
func MaxIDBytes(f Format) int {
	switch f {
	case FormatFQDNSet, FormatRegIDFQDNSet:
		return 64 << 10
	}
	return 1 << 10
}

// Resolve returns the bucket for the natural id of the limit name (see
// BucketKey) and the limit that applies to it: an override for the bucket,
// else (for the regId:… formats) an override for the account, else the
// name's default, else none, and then the bucket is not Enabled. For each
// key a runtime override (see WithRuntime) comes before the file's. An unknown
// name is an error wrapping ErrUnknownName; a malformed id, or one longer
// than MaxIDBytes, is an *IDError wrapping ErrInvalidID.
func (s *Set) Resolve(name, id string) (Bucket, error) {
	var (
		buf [160]byte
		b   Bucket
	)
	key, err := s.AppendResolve(buf[:0], name, id, &b)
	if err != nil {
		return Bucket{}, err
	}
	b.Key = string(key)
	return b, nil
}

// AppendResolve is Resolve writing the bucket key into memory the caller
// reuses: it appends the key to dst and returns the extended slice, and
// writes the Bucket, with an empty Key, to b (left as it was on an
// error). Nothing is allocated for a known name when
// dst has room, but for the formats whose key is built from a parsed
// domain name or a hashed set.
func (s *Set) AppendResolve(dst []byte, name, id string, b *Bucket) ([]byte, error) {
	var e *entry
	if s != nil {
		e = s.entry(name)
	}
	if e == nil {
		n, err := ParseName(name)
		if err != nil {
			return dst, err
		}
		e = newEntry(n)
	}
	if max := MaxIDBytes(e.name.Format); len(id) > max {
		return dst, &IDError{Name: name, ID: id, Rule: "is " + strconv.Itoa(len(id)) + " bytes, longer than the maximum of " + strconv.Itoa(max) + " bytes for " + e.name.Format.String()}
	}
	start := len(dst)
	dst = append(dst, e.prefix...)
	dst, acct, rule := appendNatural(dst, e.name.Format, id)
	if rule != "" {
		return dst[:start], &IDError{Name: name, ID: id, Rule: rule}
	}
	*b = Bucket{Name: e.name}
	if s.mayOverride(e) {
		o, ok := s.lookupBytes(dst[start:])
		if !ok && acct >= 0 {
			o, ok = s.lookupBytes(dst[start:acct])
		}
		if ok {
			b.Limit, b.Enabled, b.Override = o.Limit, true, true
			b.OverrideKey, b.Comment, b.Runtime = o.Key, o.Comment, o.Runtime
			return dst, nil
		}
	}
	if e.hasDefault {
		b.Limit, b.Enabled = e.def, true
	}
	return dst, nil
}

// AppendKey is AppendResolve for a caller that needs only the bucket key
// and its limit, such as limiter.SpendFor: it appends the key to dst and
// returns the extended slice, the limit that applies and whether one does
// (Bucket.Enabled), with the same errors. For an account id already in
// its natural form (formats regId) it does only that work: the name's
// entry found without hashing it, the key written in one 16-byte store
// when short (package keybuf), and no Bucket. Like AppendResolve it may
// read and write back up to 16 bytes of dst's spare capacity past the
// key, leaving them as they were.
func (s *Set) AppendKey(dst []byte, name, id string) ([]byte, gcra.Limit, bool, error) {
	if s != nil {
		if e := s.entry(name); e != nil && e.name.Format == FormatRegID && plainRegID(id) {
			start := len(dst)
			dst = keybuf.Append(dst, e.prefix, id)
			if s.mayOverride(e) {
				if o, ok := s.lookupBytes(dst[start:]); ok {
					return dst, o.Limit, true, nil
				}
			}
			return dst, e.def, e.hasDefault, nil
		}
	}
	var b Bucket
	dst, err := s.AppendResolve(dst, name, id, &b)
	return dst, b.Limit, b.Enabled, err
}

// KeyWords is AppendKey for a key it can hold in registers: for an
// account id already in its natural form (formats regId) whose bucket key
// is at most keybuf.Max bytes, and a valid limit that applies to it, it
// returns the key as keybuf.Words does (for the memory store's
// SpendGCRAShort) and the limit's Params (gcra.Limit.ValidParams), with
// ok. ok is false for any other name or id, and when no limit applies or
// the one that does is invalid: AppendKey answers those. A name's default
// was compiled when the Set was made, so that a decision on it makes no
// division; an override's limit is compiled here.
func (s *Set) KeyWords(name, id string) (lo, hi uint64, n int, p gcra.Params, ok bool) {
	if s == nil {
		return 0, 0, 0, gcra.Params{}, false
	}
	e := s.entry(name)
	if e == nil || e.name.Format != FormatRegID || len(id) == 0 || len(e.prefix)+len(id) > keybuf.Max {
		return 0, 0, 0, gcra.Params{}, false
	}
	// plainRegID's check on the id's words, without a loop whose
	// branches wait for bytes that may still be on their way from
	// memory: digits, no leading zero. With a million cold ids the loop
	// cost SpendFor 23–53 ns a decision (BENCHMARKS.md, "At 6737e6c", 1469f67).
	ilo, ihi := keybuf.Load(id)
	if !keybuf.Digits(ilo, ihi, len(id)) || byte(ilo) == '0' {
		return 0, 0, 0, gcra.Params{}, false
	}
	// The prefix's words were loaded when the entry was made: one call
	// less on the way to the store.
	lo, hi = keybuf.Join(e.plo, e.phi, len(e.prefix), ilo, ihi)
	n = len(e.prefix) + len(id)
	if s.mayOverride(e) {
		var key [keybuf.Max]byte
		keybuf.Put(&key, lo, hi)
		if o, found := s.lookupBytes(key[:n]); found {
			p, ok = o.Limit.ValidParams()
			return lo, hi, n, p, ok
		}
	}
	return lo, hi, n, e.defParams, e.defValid
}

// Short returns the name as limiter.SpendFor's direct path reads it
// (package shortkey), for a name passed as the very string of its text,
// such as this package's constants: found by the string's address, with
// no read of its bytes. For any other name, even one of the same text, it
// returns nil (and, rarely, for a name whose address shares its slot with
// another's: see placeByAddr); KeyWords and AppendKey answer those. s
// must not be nil. It is small enough to be inlined.
func (s *Set) Short(name string) *shortkey.Name {
	if e := s.byAddr[addrSlot(unsafe.StringData(name), s.addrMul)]; e != nil && unsafe.StringData(e.name.Text) == unsafe.StringData(name) && len(e.name.Text) == len(name) {
		return &e.short
	}
	return nil
}

// MayOverrideShort is false when no override of s, from the files or set
// at runtime, can apply to a key of the name k is (Set.Short). s must
// not be nil.
func (s *Set) MayOverrideShort(k *shortkey.Name) bool { return s.enums&k.Bit != 0 }

// mayOverride is false when no override of s, from the file or set at
// runtime, can apply to a key of e's name; s may be nil.
func (s *Set) mayOverride(e *entry) bool {
	return s != nil && s.enums&enumMask(uint64(e.name.Enum)) != 0
}

// enumMask is the bit of Set.enums for the names of enum number enum.
func enumMask(enum uint64) uint64 { return 1 << (enum % 64) }

// enumBit is the bit of Set.enums for a bucket key, "<enum>:<id>": 1 <<
// (enum % 64). A key that does not begin so gets every bit, so that no
// name's keys skip the lookup.
func enumBit(key string) uint64 {
	i := strings.IndexByte(key, ':')
	if i <= 0 {
		return ^uint64(0)
	}
	enum, err := strconv.ParseUint(key[:i], 10, 64)
	if err != nil {
		return ^uint64(0)
	}
	return enumMask(enum)
}

// entry returns the entry of name, nil if the Set does not know it.
func (s *Set) entry(name string) *entry {
	if e := s.fast[nameSlot(name)]; e != nil && len(e.name.Text) == len(name) &&
		// A caller passing the package's constant, as most do, passes the
		// entry's own text: known equal without comparing the bytes.
		(unsafe.StringData(e.name.Text) == unsafe.StringData(name) || e.name.Text == name) {
		return e
	}
	return s.names[name]
}

// placeByAddr fills s.byAddr with entries, the Set's, in enum order. Of
// up to addrTries multipliers, it takes the first under which no two
// names' texts share a slot, or else the one that places the most names;
// each name left out shares its slot with one placed before it.
func (s *Set) placeByAddr(entries []*entry) {
	best, bestPlaced := uint64(0), -1
	mul := uint64(0x9E3779B97F4A7C15) // splitmix64's increment: the tries' sequence
	for range addrTries {
		mul += 0x9E3779B97F4A7C15
		m := mix(mul) | 1
		var taken [addrSlots]bool
		placed := 0
		for _, e := range entries {
			if i := addrSlot(unsafe.StringData(e.name.Text), m); !taken[i] {
				taken[i] = true
				placed++
			}
		}
		if placed > bestPlaced {
			best, bestPlaced = m, placed
		}
		if placed == len(entries) {
			break
		}
	}
	s.addrMul = best
	for _, e := range entries {
		if i := addrSlot(unsafe.StringData(e.name.Text), best); s.byAddr[i] == nil {
			s.byAddr[i] = e
		}
	}
}

// mix is splitmix64's output function.
func mix(z uint64) uint64 {
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return z ^ z>>31
}

// addrSlot is the slot in Set.byAddr of a name whose text is at p,
// under the multiplier m: the top bits of the address times m.
func addrSlot(p *byte, m uint64) int {
	return int(uint64(uintptr(unsafe.Pointer(p))) * m >> (64 - addrBits))
}

// addrBits and addrSlots size Set.byAddr; addrTries is how many
// multipliers New tries for it.
const (
	addrBits  = 8
	addrSlots = 1 << addrBits
	addrTries = 64
)

// nameSlot is the slot of name in Set.fast: a mix of its length and
// three of its bytes, cheaper than a hash of the whole name. Names that
// share a slot are still found, through the map.
func nameSlot(name string) int {
	n := len(name)
	if n == 0 {
		return 0
	}
	return int((uint(n)*7 + uint(name[0])*3 + uint(name[n/2]) + uint(name[n-1])*5) % nameSlots)
}

// nameSlots is the size of Set.fast.
const nameSlots = 64

// Names returns every name the Set knows, the built-in ones and those in
// its files, in enum order.
func (s *Set) Names() []Name {
	if s == nil {
		return slices.Clone(builtins)
	}
	names := make([]Name, 0, len(s.names))
	for _, e := range s.names {
		names = append(names, e.name)
	}
	slices.SortFunc(names, func(a, b Name) int { return cmp.Compare(a.Enum, b.Enum) })
	return names
}

// Override returns the override with bucket key key (a Bucket's
// OverrideKey) that Resolve applies: the runtime one if there is one,
// else the file's, with the file and line it came from.
func (s *Set) Override(key string) (Override, bool) {
	if s == nil {
		return Override{}, false
	}
	o, ok := s.lookup(key)
	if !ok {
		return Override{}, false
	}
	return *o, true
}

// DefaultAt returns where the default limit of name is written, if the Set
// has one.
func (s *Set) DefaultAt(name string) (file string, line int, ok bool) {
	if s == nil {
		return "", 0, false
	}
	e := s.names[name]
	if e == nil || !e.hasDefault {
		return "", 0, false
	}
	return e.defFile, e.defLine, true
}

// Default returns the default limit of name, if the Set has one.
func (s *Set) Default(name string) (gcra.Limit, bool) {
	if s == nil {
		return gcra.Limit{}, false
	}
	if e, ok := s.names[name]; ok && e.hasDefault {
		return e.def, true
	}
	return gcra.Limit{}, false
}

// Len returns the number of defaults and of overrides in the Set's files;
// runtime overrides are not counted (see Runtime).
func (s *Set) Len() (defaults, overrides int) {
	if s == nil {
		return 0, 0
	}
	return s.ndefaults, len(s.overrides)
}
