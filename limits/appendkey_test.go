package limits

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"unsafe"

	"github.com/sluice-rl/sluice/internal/keybuf"
)

// TestAppendKeyAgreesWithAppendResolve: AppendKey's key, limit, enabled
// flag and error are AppendResolve's, for every name a Set knows and
// unknown ones, natural and unnatural ids of every format, overrides
// from the file and at runtime, and buffers with and without room.
func TestAppendKeyAgreesWithAppendResolve(t *testing.T) {
	base := testSet(t)
	rt, err := base.RuntimeOverride(RuntimeSpec{Name: NewOrdersPerAccount, ID: "99", Burst: ptr(int64(7)), Count: ptr(int64(7)), Period: "1m"})
	if err != nil {
		t.Fatal(err)
	}
	sets := map[string]*Set{"nil": nil, "file": base, "runtime": base.WithRuntime(map[string]Override{rt.Key: rt})}
	r := rand.New(rand.NewPCG(3, 4))
	ids := []string{"1", "99", "12345678", "0", "007", "12x", "", " 1", "1234567890123456789", "12345678901234567890",
		"18446744073709551615", strings.Repeat("9", 2000), "10.0.0.2", "2001:db8::1", "2001:db8:1::/48", "42",
		"42:www.example.com", "7:www.example.com", "www.example.com", "example.co.uk", "a.example.com,b.example.com"}
	for n := 1; n <= 22; n++ {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('0' + r.IntN(10))
		}
		ids = append(ids, string(b))
	}
	regID := map[string]bool{}
	for _, n := range base.Names() {
		regID[n.Text] = n.Format == FormatRegID
	}
	keyWords := 0
	for setName, s := range sets {
		names := []string{"NoSuchName", "", "PerAccount"}
		for _, n := range s.Names() {
			names = append(names, n.Text)
		}
		for _, name := range names {
			for _, id := range ids {
				for _, dst := range [][]byte{nil, append(make([]byte, 0, 64), "ab"...)} {
					var b Bucket
					wantKey, wantErr := s.AppendResolve(bytes.Clone(dst), name, id, &b)
					gotKey, limit, enabled, gotErr := s.AppendKey(bytes.Clone(dst), name, id)
					what := fmt.Sprintf("%s set, %s %.30q, %d bytes before", setName, name, id, len(dst))
					if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
						t.Fatalf("%s: AppendKey error %v, AppendResolve's %v", what, gotErr, wantErr)
					}
					if wantErr != nil {
						continue
					}
					if !bytes.Equal(gotKey, wantKey) || limit != b.Limit || enabled != b.Enabled {
						t.Fatalf("%s: AppendKey gave %q %+v %v, AppendResolve %q %+v %v", what, gotKey, limit, enabled, wantKey, b.Limit, b.Enabled)
					}
					// KeyWords answers for a known account name and a
					// natural account id whose key fits its two words,
					// when a valid limit applies.
					lo, hi, n, p, ok := s.KeyWords(name, id)
					key := wantKey[len(dst):]
					wantP, valid := b.Limit.ValidParams()
					if want := s != nil && regID[name] && naturalAccount.MatchString(id) && len(key) <= keybuf.Max && b.Enabled && valid; ok != want {
						t.Fatalf("%s: KeyWords ok %v, want %v", what, ok, want)
					}
					if ok {
						var words [keybuf.Max]byte
						keybuf.Put(&words, lo, hi)
						if string(words[:n]) != string(key) || p != wantP {
							t.Fatalf("%s: KeyWords gave %q %+v, AppendResolve %q and %+v's %+v", what, words[:n], p, key, b.Limit, wantP)
						}
						keyWords++
					}
				}
			}
		}
	}
	if keyWords < 32 {
		t.Fatalf("KeyWords answered only %d cases", keyWords)
	}
}

// TestShortAgreesWithKeyWords: where Short gives a name that SpendFor's
// shortest path may take (OK, no override possible), the key it builds
// from an account id and the Params are KeyWords'; Short gives nil for a
// copy of a name's text; and MayOverrideShort follows the overrides, from
// the file and at runtime.
func TestShortAgreesWithKeyWords(t *testing.T) {
	base := testSet(t)
	rt, err := base.RuntimeOverride(RuntimeSpec{Name: NewOrdersPerAccount, ID: "99", Burst: ptr(int64(7)), Count: ptr(int64(7)), Period: "1m"})
	if err != nil {
		t.Fatal(err)
	}
	plain := setOf(t, "NewOrdersPerAccount: {burst: 3, count: 1, period: 1h}\n", "")
	// NewOrdersPerAccount without a default: not for the path.
	other := setOf(t, "CertificatesPerDomain: {burst: 3, count: 1, period: 1h}\n", "")
	sets := map[string]*Set{"file": base, "runtime": base.WithRuntime(map[string]Override{rt.Key: rt}), "plain": plain, "other": other}
	taken := 0
	for setName, s := range sets {
		for _, n := range s.Names() {
			k := s.Short(n.Text)
			if k == nil {
				// With a dozen names, one of New's multipliers places
				// every name apart (see TestShortFindsNamesByAddress).
				t.Fatalf("%s set, %s: Short found no entry", setName, n.Text)
			}
			if s.Short(strings.Clone(n.Text)) != nil {
				t.Fatalf("%s set, %s: Short found a copy of the name", setName, n.Text)
			}
			if got, want := s.MayOverrideShort(k), s.mayOverride(s.entry(n.Text)); got != want {
				t.Fatalf("%s set, %s: MayOverrideShort %v, mayOverride %v", setName, n.Text, got, want)
			}
			for l := 4; l <= 16; l++ {
				id := "9876543210987654"[:l]
				lo, hi, ln, p, ok := s.KeyWords(n.Text, id)
				if !k.OK || s.MayOverrideShort(k) || k.Len+l > keybuf.Max { // OK holds Len < 8
					if k.OK && ok && k.Len+l <= keybuf.Max && k.Params != p {
						t.Fatalf("%s set, %s %s: Short's Params %+v, KeyWords' %+v", setName, n.Text, id, k.Params, p)
					}
					continue
				}
				ilo, ihi := keybuf.Load4(id)
				slo, shi := keybuf.JoinNear(k.Lo, k.Hi, k.Len, ilo, ihi)
				if !ok || slo != lo || shi != hi || k.Len+l != ln || k.Params != p {
					t.Fatalf("%s set, %s %s: Short gives %x %x, %d bytes, %+v; KeyWords %x %x, %d bytes, %+v, %v",
						setName, n.Text, id, slo, shi, k.Len+l, k.Params, lo, hi, ln, p, ok)
				}
				taken++
			}
		}
	}
	if taken < 10 {
		t.Fatalf("Short's path was checked in only %d cases", taken)
	}
	if k := plain.Short(NewOrdersPerAccount); k == nil || !k.OK || plain.MayOverrideShort(k) {
		t.Fatalf("a Set with a default for NewOrdersPerAccount and no overrides: Short gave %+v", k)
	}
}

// TestShortFindsNamesByAddress: Short finds each name by the address of
// its text, and only by that: never a copy of it. With 192 names in the Set's 256 slots, some
// share a slot under every multiplier New tries; each name Short misses
// then shares its slot with one it finds, and Short never answers with
// another name's entry.
func TestShortFindsNamesByAddress(t *testing.T) {
	for _, count := range []int{1, 12, 192} {
		var defaults strings.Builder
		for i := range count {
			fmt.Fprintf(&defaults, "Thing%dPerAccount: {burst: %d, count: 1, period: 1h}\n", i, i+1)
		}
		s := setOf(t, defaults.String(), "")
		found := 0
		for _, n := range s.Names() {
			if s.Short(strings.Clone(n.Text)) != nil {
				t.Fatalf("%d names: Short found a copy of %s", count, n.Text)
			}
			k := s.Short(n.Text)
			e := s.entry(n.Text)
			if k != nil {
				if k != &e.short {
					t.Fatalf("%d names: Short(%s) gave another name's entry", count, n.Text)
				}
				found++
				continue
			}
			other := s.byAddr[addrSlot(unsafe.StringData(n.Text), s.addrMul)]
			if other == nil || other == e {
				t.Fatalf("%d names: Short missed %s, whose slot holds %v", count, n.Text, other)
			}
		}
		if names := len(s.Names()); count <= 12 && found != names {
			t.Fatalf("%d names: Short found %d of %d", count, found, names)
		}
		t.Logf("%d names besides the built-in ones: Short finds %d of %d", count, found, len(s.Names()))
	}
}

// naturalAccount is an account id in its natural form.
var naturalAccount = regexp.MustCompile(`^[1-9][0-9]{0,18}$`)

// TestEveryNameFindsItsEntry: with more names than Set.fast has slots,
// so that some share one, each name is found on its own entry.
func TestEveryNameFindsItsEntry(t *testing.T) {
	var defaults strings.Builder
	for i := range 3 * nameSlots {
		fmt.Fprintf(&defaults, "Thing%dPerAccount: {burst: %d, count: 1, period: 1h}\n", i, i+1)
	}
	s := setOf(t, defaults.String(), "")
	shared := 0
	for _, n := range s.Names() {
		if e := s.entry(n.Text); e != s.names[n.Text] {
			t.Fatalf("entry(%q) is the entry of %q", n.Text, e.name.Text)
		}
		// A copy of the text, not the same string, is found as well.
		if e := s.entry(strings.Clone(n.Text)); e != s.names[n.Text] {
			t.Fatalf("entry of a copy of %q is the entry of %q", n.Text, e.name.Text)
		}
		if s.fast[nameSlot(n.Text)] != s.names[n.Text] {
			shared++
		}
	}
	if shared == 0 {
		t.Fatalf("no two of %d names share a slot: the map is not exercised", len(s.Names()))
	}
	if e := s.entry("Thing0PerAccountX"); e != nil {
		t.Fatalf("an unknown name found the entry of %q", e.name.Text)
	}
}

func ptr[T any](v T) *T { return &v }

// TestOverridesApplyWhateverTheirName: with a few of many names
// overridden, in the file and at runtime, every override is found, by
// AppendKey and by Resolve, and every other id gets its name's default,
// whether or not the name shares its bit of Set.enums with an overridden
// one; dropping the runtime overrides leaves the file's.
func TestOverridesApplyWhateverTheirName(t *testing.T) {
	var defaults, overrides strings.Builder
	const n = 3 * nameSlots
	for i := range n {
		fmt.Fprintf(&defaults, "Thing%dPerAccount: {burst: %d, count: 1, period: 1h}\n", i, i+1)
	}
	inFile := map[int]bool{3: true, 70: true, 150: true}
	atRuntime := map[int]bool{3: true, 11: true, 100: true}
	for i := range inFile {
		fmt.Fprintf(&overrides, "- Thing%dPerAccount:\n    burst: %d\n    count: 1\n    period: 1h\n    ids: [5]\n", i, 1000+i)
	}
	files := setOf(t, defaults.String(), overrides.String())
	rt := map[string]Override{}
	for i := range atRuntime {
		ov, err := files.RuntimeOverride(RuntimeSpec{Name: fmt.Sprintf("Thing%dPerAccount", i), ID: "6", Burst: ptr(int64(2000 + i)), Count: ptr(int64(1)), Period: "1h"})
		if err != nil {
			t.Fatal(err)
		}
		rt[ov.Key] = ov
	}
	withRuntime := files.WithRuntime(rt)
	check := func(s *Set, runtime bool) {
		t.Helper()
		skipped, shared := 0, 0
		for i := range n {
			name := fmt.Sprintf("Thing%dPerAccount", i)
			e := s.entry(name)
			if !s.mayOverride(e) {
				skipped++
			} else if !inFile[i] && !(runtime && atRuntime[i]) {
				shared++
			}
			for _, id := range []string{"5", "6", "7"} {
				want := int64(i + 1)
				switch {
				case id == "5" && inFile[i]:
					want = 1000 + int64(i)
				case id == "6" && runtime && atRuntime[i]:
					want = 2000 + int64(i)
				}
				_, limit, enabled, err := s.AppendKey(make([]byte, 0, 64), name, id)
				if err != nil || !enabled || limit.Burst != want {
					t.Fatalf("runtime %v: AppendKey(%s, %s) = burst %d, enabled %v, %v; want burst %d", runtime, name, id, limit.Burst, enabled, err, want)
				}
				b, err := s.Resolve(name, id)
				if err != nil || !b.Enabled || b.Limit.Burst != want {
					t.Fatalf("runtime %v: Resolve(%s, %s) = burst %d, enabled %v, %v; want burst %d", runtime, name, id, b.Limit.Burst, b.Enabled, err, want)
				}
			}
		}
		// Both ways are taken: names whose keys are not looked up, and
		// names looked up for want of an override of their own.
		if skipped == 0 || shared == 0 {
			t.Fatalf("runtime %v: %d names skipped the lookup and %d shared a bit; the test needs both", runtime, skipped, shared)
		}
	}
	check(files, false)
	check(withRuntime, true)
	check(withRuntime.WithRuntime(nil), false)
}

func TestEnumBit(t *testing.T) {
	for key, want := range map[string]uint64{
		"3:12345": 1 << 3, "63:x": 1 << 63, "64:x": 1, "1064:1": 1 << (1064 % 64),
		"": ^uint64(0), "nocolon": ^uint64(0), ":5": ^uint64(0), "x3:5": ^uint64(0), "-1:5": ^uint64(0),
	} {
		if got := enumBit(key); got != want {
			t.Errorf("enumBit(%q) = %#x, want %#x", key, got, want)
		}
	}
}
