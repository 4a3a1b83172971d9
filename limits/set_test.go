package limits

import (
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/gcra"
)

const setDefaults = `
NewRegistrationsPerIPAddress: {burst: 20, count: 20, period: 1s}
NewRegistrationsPerIPv6Range: {burst: 500, count: 500, period: 3h}
NewOrdersPerAccount: {burst: 300, count: 300, period: 180m}
CertificatesPerDomain: {burst: 50, count: 50, period: 168h}
CertificatesPerFQDNSet: {burst: 5, count: 5, period: 168h}
FailedAuthorizationsPerDomainPerAccount: {burst: 5, count: 5, period: 1h}
`

const setOverrides = `
- NewRegistrationsPerIPAddress:
    burst: 20
    count: 40
    period: 1s
    ids: [10.0.0.2, "2001:db8::1"]
- NewRegistrationsPerIPv6Range:
    burst: 1000
    count: 1000
    period: 3h
    ids: ["2001:db8:1::/48"]
- NewOrdersPerAccount:
    burst: 300
    count: 600
    period: 180m
    ids:
      - id: 12345678
        comment: doubled
- CertificatesPerDomain:
    burst: 100
    count: 100
    period: 168h
    ids: [example.co.uk, 192.168.1.1, "2001:db8:eeee:eeee::"]
- CertificatesPerFQDNSet:
    burst: 10
    count: 10
    period: 168h
    ids: ["a.example.com,b.example.com"]
- CertificatesPerDomainPerAccount:
    burst: 1000
    count: 1000
    period: 168h
    ids: [12345678]
- FailedAuthorizationsPerDomainPerAccount:
    burst: 50
    count: 50
    period: 1h
    ids: ["42", "7:www.example.com"]
- FailedAuthorizationsPerDomainPerAccount:
    burst: 9
    count: 9
    period: 1h
    ids: ["42:www.example.com"]
- NewFoosPerIPAddress:
    burst: 20
    count: 20
    period: 1s
    ids: [172.23.45.22]
`

func testSet(t testing.TB) *Set {
	t.Helper()
	return setOf(t, setDefaults, setOverrides)
}

// setOf is the Set of a defaults file and an overrides file, given as
// text; an empty one is no file.
func setOf(t testing.TB, defaults, overrides string) *Set {
	t.Helper()
	var (
		d   *Defaults
		o   *Overrides
		err error
	)
	if defaults != "" {
		if d, err = ParseDefaults("defaults.yaml", []byte(defaults)); err != nil {
			t.Fatal(err)
		}
	}
	if overrides != "" {
		if o, err = ParseOverrides("overrides.yaml", []byte(overrides)); err != nil {
			t.Fatal(err)
		}
	}
	s, err := New(d, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func lim(burst, count int64, period time.Duration) gcra.Limit {
	return gcra.Limit{Burst: burst, Count: count, Period: period}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	s := testSet(t)
	week := 168 * time.Hour
	tests := []struct {
		desc            string
		name, id        string
		wantKey         string
		wantLimit       gcra.Limit
		wantEnabled     bool
		wantOverride    bool
		wantOverrideKey string
		wantComment     string
	}{
		{desc: "an overridden IPv4 address gets its override",
			name: NewRegistrationsPerIPAddress, id: "10.0.0.2",
			wantKey: "1:10.0.0.2", wantLimit: lim(20, 40, time.Second), wantEnabled: true, wantOverride: true, wantOverrideKey: "1:10.0.0.2"},
		{desc: "another IPv4 address gets the default",
			name: NewRegistrationsPerIPAddress, id: "10.0.0.3",
			wantKey: "1:10.0.0.3", wantLimit: lim(20, 20, time.Second), wantEnabled: true},
		{desc: "an IPv6 address in long form finds the override for its canonical form",
			name: NewRegistrationsPerIPAddress, id: "2001:0db8:0000:0000:0000:0000:0000:0001",
			wantKey: "1:2001:db8::1", wantLimit: lim(20, 40, time.Second), wantEnabled: true, wantOverride: true, wantOverrideKey: "1:2001:db8::1"},
		{desc: "an IPv6 address finds the override of its /48",
			name: NewRegistrationsPerIPv6Range, id: "2001:db8:1:abcd::99",
			wantKey: "2:2001:db8:1::/48", wantLimit: lim(1000, 1000, 3*time.Hour), wantEnabled: true, wantOverride: true, wantOverrideKey: "2:2001:db8:1::/48"},
		{desc: "an IPv6 address in another /48 gets the default",
			name: NewRegistrationsPerIPv6Range, id: "2001:db8:2::1",
			wantKey: "2:2001:db8:2::/48", wantLimit: lim(500, 500, 3*time.Hour), wantEnabled: true},
		{desc: "an overridden account gets its override and comment",
			name: NewOrdersPerAccount, id: "12345678",
			wantKey: "3:12345678", wantLimit: lim(300, 600, 180*time.Minute), wantEnabled: true, wantOverride: true, wantOverrideKey: "3:12345678", wantComment: "doubled"},
		{desc: "another account gets the default",
			name: NewOrdersPerAccount, id: "1",
			wantKey: "3:1", wantLimit: lim(300, 300, 180*time.Minute), wantEnabled: true},
		{desc: "a subdomain finds the override of its eTLD+1",
			name: CertificatesPerDomain, id: "www.Example.co.uk.",
			wantKey: "5:example.co.uk", wantLimit: lim(100, 100, week), wantEnabled: true, wantOverride: true, wantOverrideKey: "5:example.co.uk"},
		{desc: "an IPv4 address finds the override written as a bare address",
			name: CertificatesPerDomain, id: "192.168.1.1",
			wantKey: "5:192.168.1.1/32", wantLimit: lim(100, 100, week), wantEnabled: true, wantOverride: true, wantOverrideKey: "5:192.168.1.1/32"},
		{desc: "an IPv6 address finds the override of its /64",
			name: CertificatesPerDomain, id: "2001:db8:eeee:eeee:1::1",
			wantKey: "5:2001:db8:eeee:eeee::/64", wantLimit: lim(100, 100, week), wantEnabled: true, wantOverride: true, wantOverrideKey: "5:2001:db8:eeee:eeee::/64"},
		{desc: "a set in another order and case finds the set's override",
			name: CertificatesPerFQDNSet, id: "B.example.com,a.example.com,a.example.com",
			wantKey: "7:" + setHash("a.example.com,b.example.com"), wantLimit: lim(10, 10, week), wantEnabled: true, wantOverride: true, wantOverrideKey: "7:" + setHash("a.example.com,b.example.com")},
		{desc: "a per-account-per-domain bucket finds the account's override by regId",
			name: CertificatesPerDomainPerAccount, id: "12345678:www.example.com",
			wantKey: "6:12345678:example.com", wantLimit: lim(1000, 1000, week), wantEnabled: true, wantOverride: true, wantOverrideKey: "6:12345678"},
		{desc: "a per-account-per-domain bucket of another account has no limit at all",
			name: CertificatesPerDomainPerAccount, id: "1:www.example.com",
			wantKey: "6:1:example.com"},
		{desc: "an account-wide override applies to every domain of the account",
			name: FailedAuthorizationsPerDomainPerAccount, id: "42:other.example.net",
			wantKey: "4:42:other.example.net", wantLimit: lim(50, 50, time.Hour), wantEnabled: true, wantOverride: true, wantOverrideKey: "4:42"},
		{desc: "a regId:domain override beats the account-wide one",
			name: FailedAuthorizationsPerDomainPerAccount, id: "42:www.example.com",
			wantKey: "4:42:www.example.com", wantLimit: lim(9, 9, time.Hour), wantEnabled: true, wantOverride: true, wantOverrideKey: "4:42:www.example.com"},
		{desc: "a regId:domain override applies to that domain only",
			name: FailedAuthorizationsPerDomainPerAccount, id: "7:www.example.com",
			wantKey: "4:7:www.example.com", wantLimit: lim(50, 50, time.Hour), wantEnabled: true, wantOverride: true, wantOverrideKey: "4:7:www.example.com"},
		{desc: "another domain of that account gets the default",
			name: FailedAuthorizationsPerDomainPerAccount, id: "7:example.com",
			wantKey: "4:7:example.com", wantLimit: lim(5, 5, time.Hour), wantEnabled: true},
		{desc: "a user-defined name finds its override",
			name: "NewFoosPerIPAddress", id: "172.23.45.22",
			wantKey: "1296923630:172.23.45.22", wantLimit: lim(20, 20, time.Second), wantEnabled: true, wantOverride: true, wantOverrideKey: "1296923630:172.23.45.22"},
		{desc: "a user-defined name without a default is disabled for other ids",
			name: "NewFoosPerIPAddress", id: "172.23.45.23",
			wantKey: "1296923630:172.23.45.23"},
		{desc: "a known name in neither file is disabled",
			name: LimitOverrideRequestsPerIPAddress, id: "10.0.0.1",
			wantKey: "9:10.0.0.1"},
		{desc: "a user-defined name in neither file is disabled",
			name: "NewBarsPerAccount", id: "5",
			wantKey: strconv.FormatInt(fnvEnum("NewBarsPerAccount"), 10) + ":5"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			b, err := s.Resolve(tt.name, tt.id)
			if err != nil {
				t.Fatalf("Resolve(%q, %q): got error %v, want none", tt.name, tt.id, err)
			}
			if b.Key != tt.wantKey {
				t.Errorf("key: got %q, want %q", b.Key, tt.wantKey)
			}
			if b.Limit != tt.wantLimit {
				t.Errorf("limit: got %+v, want %+v", b.Limit, tt.wantLimit)
			}
			if b.Enabled != tt.wantEnabled || b.Override != tt.wantOverride {
				t.Errorf("enabled, override: got %v, %v, want %v, %v", b.Enabled, b.Override, tt.wantEnabled, tt.wantOverride)
			}
			if b.OverrideKey != tt.wantOverrideKey {
				t.Errorf("override key: got %q, want %q", b.OverrideKey, tt.wantOverrideKey)
			}
			if b.Comment != tt.wantComment {
				t.Errorf("comment: got %q, want %q", b.Comment, tt.wantComment)
			}
			if b.Name.Text != tt.name {
				t.Errorf("name: got %q, want %q", b.Name.Text, tt.name)
			}
			if b.Enabled {
				if err := b.Limit.Valid(); err != nil {
					t.Errorf("limit: got invalid %+v (%v), want a valid one", b.Limit, err)
				}
			}
		})
	}
}

func TestResolveErrors(t *testing.T) {
	t.Parallel()
	s := testSet(t)
	tests := []struct {
		desc     string
		name, id string
		sentinel error
		want     string
	}{
		{desc: "an unknown name is ErrUnknownName", name: "NewOrdersPerPlanet", id: "1", sentinel: ErrUnknownName, want: `unknown limit name "NewOrdersPerPlanet"`},
		{desc: "an IPv4 address for the IPv6 range limit is ErrInvalidID", name: NewRegistrationsPerIPv6Range, id: "10.0.0.1", sentinel: ErrInvalidID,
			want: `invalid id "10.0.0.1" for NewRegistrationsPerIPv6Range: must be an IPv6 address, not IPv4`},
		{desc: "a non-numeric account is ErrInvalidID", name: NewOrdersPerAccount, id: "abc", sentinel: ErrInvalidID,
			want: `invalid id "abc" for NewOrdersPerAccount: must be a decimal account id (digits only)`},
		{desc: "a bare account for a per-domain limit is ErrInvalidID", name: CertificatesPerDomainPerAccount, id: "12345678", sentinel: ErrInvalidID,
			want: `invalid id "12345678" for CertificatesPerDomainPerAccount: must be formatted 'regId:domainOrCIDR'`},
		{desc: "an empty id is ErrInvalidID", name: NewRegistrationsPerIPAddress, id: "", sentinel: ErrInvalidID,
			want: `invalid id "" for NewRegistrationsPerIPAddress: must not be empty`},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			_, err := s.Resolve(tt.name, tt.id)
			if !errors.Is(err, tt.sentinel) {
				t.Fatalf("got %v, want an error wrapping %v", err, tt.sentinel)
			}
			if err.Error() != tt.want && !startsWith(err.Error(), tt.want) {
				t.Errorf("got %q, want %q", err, tt.want)
			}
		})
	}
}

func startsWith(s, prefix string) bool { return len(s) >= len(prefix) && s[:len(prefix)] == prefix }

func TestNilSetResolvesEverythingDisabled(t *testing.T) {
	t.Parallel()
	var s *Set
	b, err := s.Resolve(NewOrdersPerAccount, "12345678")
	if err != nil {
		t.Fatal(err)
	}
	if b.Key != "3:12345678" || b.Enabled {
		t.Errorf("got key %q enabled %v, want 3:12345678 disabled", b.Key, b.Enabled)
	}
	if _, ok := s.Default(NewOrdersPerAccount); ok {
		t.Errorf("got a default from a nil Set, want none")
	}
}

func TestSetDefault(t *testing.T) {
	t.Parallel()
	s := testSet(t)
	if l, ok := s.Default(NewOrdersPerAccount); !ok || l != lim(300, 300, 180*time.Minute) {
		t.Errorf("got %+v, %v, want the file's default", l, ok)
	}
	if _, ok := s.Default(LimitOverrideRequestsPerIPAddress); ok {
		t.Errorf("got a default for a name the file leaves out, want none")
	}
	if d, o := s.Len(); d != 6 || o != 13 {
		t.Errorf("got %d defaults and %d overrides, want 6 and 13", d, o)
	}
}

func TestNewRejectsCollidingUserNamesAcrossFiles(t *testing.T) {
	t.Parallel()
	d, err := ParseDefaults("defaults.yaml", []byte("Q1149599PerAccount: {burst: 1, count: 1, period: 1s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	o, err := ParseOverrides("overrides.yaml", []byte("- Q1312382PerAccount: {burst: 1, count: 1, period: 1s, ids: [1]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(d, o)
	if !errors.Is(err, ErrDuplicate) {
		t.Fatalf("got %v, want an error wrapping ErrDuplicate", err)
	}
	want := `overrides.yaml:1: limit names "Q1149599PerAccount" and "Q1312382PerAccount" have the same enum number 538268776; rename one`
	if err.Error() != want {
		t.Errorf("got %q, want %q", err, want)
	}
}

func TestResolveIsSafeForConcurrentUse(t *testing.T) {
	t.Parallel()
	s := testSet(t)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				b, err := s.Resolve(NewOrdersPerAccount, "12345678")
				if err != nil || !b.Override {
					t.Errorf("got %+v, %v, want the override", b, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func BenchmarkResolve(b *testing.B) {
	s := testSet(b)
	cases := []struct{ name, id string }{
		{NewOrdersPerAccount, "12345678"},
		{NewRegistrationsPerIPAddress, "10.0.0.3"},
		{NewRegistrationsPerIPv6Range, "2001:db8:1:abcd::99"},
		{CertificatesPerDomain, "www.example.co.uk"},
		{CertificatesPerDomainPerAccount, "12345678:www.example.com"},
		{CertificatesPerFQDNSet, "a.example.com,b.example.com"},
		// A set of five: a duplicate, upper case, two addresses.
		{CertificatesPerFQDNSet, "www.Example.org,example.org,192.0.2.1,2001:db8::1,example.org"},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := s.Resolve(c.name, c.id); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
