package limits

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/gcra"
)

// spec is a runtime override of burst, count and period for name and id.
func spec(name, id string, burst, count int64, period string) RuntimeSpec {
	return RuntimeSpec{Name: name, ID: id, Burst: &burst, Count: &count, Period: period}
}

// mustRuntime validates sp against s or fails the test.
func mustRuntime(t *testing.T, s *Set, sp RuntimeSpec) Override {
	t.Helper()
	o, err := s.RuntimeOverride(sp)
	if err != nil {
		t.Fatalf("RuntimeOverride(%+v): %v", sp, err)
	}
	return o
}

func TestRuntimeOverridesTakePrecedence(t *testing.T) {
	t.Parallel()
	files := testSet(t)
	rt := map[string]Override{}
	for _, sp := range []RuntimeSpec{
		spec(NewOrdersPerAccount, "12345678", 900, 900, "180m"),             // the file has an override
		spec(NewOrdersPerAccount, "555", 1000, 1000, "1h"),                  // the file has only the default
		spec(FailedAuthorizationsPerDomainPerAccount, "42", 77, 77, "1h"),   // the file has one for the account and one for a domain
		spec(NewRegistrationsPerIPv6Range, "2001:db8:9::/48", 3, 3, "1h"),   // an id with a slash
		spec(CertificatesPerDomainPerAccount, "99:example.com", 8, 8, "1h"), // no default, no file override
	} {
		o := mustRuntime(t, files, sp)
		rt[o.Key] = o
	}
	s := files.WithRuntime(rt)
	tests := []struct {
		desc        string
		name, id    string
		wantLimit   gcra.Limit
		wantEnabled bool
		wantRuntime bool
		wantKey     string // the override key; "" for the default
	}{
		{desc: "a runtime override wins over the file's override of the same id",
			name: NewOrdersPerAccount, id: "12345678", wantLimit: lim(900, 900, 180*time.Minute), wantEnabled: true, wantRuntime: true, wantKey: "3:12345678"},
		{desc: "a runtime override wins over the default",
			name: NewOrdersPerAccount, id: "555", wantLimit: lim(1000, 1000, time.Hour), wantEnabled: true, wantRuntime: true, wantKey: "3:555"},
		{desc: "an id without any override still gets the default",
			name: NewOrdersPerAccount, id: "556", wantLimit: lim(300, 300, 180*time.Minute), wantEnabled: true},
		{desc: "the file's override for the account's domain is more specific than the runtime override for the account",
			name: FailedAuthorizationsPerDomainPerAccount, id: "42:www.example.com", wantLimit: lim(9, 9, time.Hour), wantEnabled: true, wantKey: "4:42:www.example.com"},
		{desc: "another domain of the account gets the runtime override for the account, not the file's",
			name: FailedAuthorizationsPerDomainPerAccount, id: "42:other.example.com", wantLimit: lim(77, 77, time.Hour), wantEnabled: true, wantRuntime: true, wantKey: "4:42"},
		{desc: "an address of an overridden IPv6 range gets the runtime override",
			name: NewRegistrationsPerIPv6Range, id: "2001:db8:9:1::1", wantLimit: lim(3, 3, time.Hour), wantEnabled: true, wantRuntime: true, wantKey: "2:2001:db8:9::/48"},
		{desc: "a runtime override enables a name with no default",
			name: CertificatesPerDomainPerAccount, id: "99:www.example.com", wantLimit: lim(8, 8, time.Hour), wantEnabled: true, wantRuntime: true, wantKey: "6:99:example.com"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			b, err := s.Resolve(tt.name, tt.id)
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if b.Limit != tt.wantLimit || b.Enabled != tt.wantEnabled || b.Runtime != tt.wantRuntime || b.OverrideKey != tt.wantKey {
				t.Errorf("got limit %+v enabled %v runtime %v key %q, want %+v %v %v %q",
					b.Limit, b.Enabled, b.Runtime, b.OverrideKey, tt.wantLimit, tt.wantEnabled, tt.wantRuntime, tt.wantKey)
			}
			if tt.wantKey != "" {
				o, ok := s.Override(tt.wantKey)
				if !ok || o.Runtime != tt.wantRuntime {
					t.Errorf("Override(%q): got runtime %v found %v, want runtime %v", tt.wantKey, o.Runtime, ok, tt.wantRuntime)
				}
			}
		})
	}
	t.Run("removing a runtime override falls back to the file's override", func(t *testing.T) {
		less := map[string]Override{}
		for k, o := range rt {
			if k != "3:12345678" {
				less[k] = o
			}
		}
		b, err := s.WithRuntime(less).Resolve(NewOrdersPerAccount, "12345678")
		if err != nil {
			t.Fatal(err)
		}
		if want := lim(300, 600, 180*time.Minute); b.Limit != want || b.Runtime || !b.Override {
			t.Errorf("got %+v runtime %v override %v, want %+v from the file", b.Limit, b.Runtime, b.Override, want)
		}
	})
	t.Run("the files' Set is left as it was", func(t *testing.T) {
		b, err := files.Resolve(NewOrdersPerAccount, "555")
		if err != nil {
			t.Fatal(err)
		}
		if b.Runtime || b.Override {
			t.Errorf("got runtime %v override %v, want the default", b.Runtime, b.Override)
		}
		if n := len(files.Runtime()); n != 0 {
			t.Errorf("got %d runtime overrides on the files' Set, want 0", n)
		}
	})
	t.Run("Runtime lists the runtime overrides by key", func(t *testing.T) {
		var keys []string
		for _, o := range s.Runtime() {
			keys = append(keys, o.Key)
		}
		want := "2:2001:db8:9::/48 3:12345678 3:555 4:42 6:99:example.com"
		if got := strings.Join(keys, " "); got != want {
			t.Errorf("got %s, want %s", got, want)
		}
	})
	t.Run("a nil Set takes runtime overrides too", func(t *testing.T) {
		var none *Set
		o := mustRuntime(t, none, spec(NewOrdersPerAccount, "1", 5, 5, "1s"))
		b, err := none.WithRuntime(map[string]Override{o.Key: o}).Resolve(NewOrdersPerAccount, "1")
		if err != nil || b.Limit != lim(5, 5, time.Second) || !b.Runtime {
			t.Errorf("got %+v runtime %v err %v, want 5/5/1s from the runtime override", b.Limit, b.Runtime, err)
		}
	})
}

func TestRuntimeOverrideIsValidatedAsTheFileIs(t *testing.T) {
	t.Parallel()
	s := testSet(t)
	tests := []struct {
		desc      string
		spec      RuntimeSpec
		wantField string
		wantErr   error
		wantMsg   string
	}{
		{desc: "an unknown name is refused",
			spec: spec("NewWidgetsPerFortnight", "1", 1, 1, "1s"), wantField: "name", wantErr: ErrUnknownName,
			wantMsg: `runtime override: unknown limit name "NewWidgetsPerFortnight"`},
		{desc: "a user-defined name the files do not define is refused",
			spec: spec("NewBarsPerAccount", "1", 1, 1, "1s"), wantField: "name", wantErr: ErrUnknownName,
			wantMsg: `runtime override: unknown limit name "NewBarsPerAccount": a runtime override needs a built-in name or one defined in the limits files`},
		{desc: "an id that is not canonical is refused as the file refuses it",
			spec: spec(NewOrdersPerAccount, "012", 1, 1, "1s"), wantField: "id", wantErr: ErrInvalidID,
			wantMsg: `runtime override: invalid id "012" for NewOrdersPerAccount: must not have leading zeros`},
		{desc: "an IPv6 range that is not a /48 is refused",
			spec: spec(NewRegistrationsPerIPv6Range, "2001:db8::/64", 1, 1, "1s"), wantField: "id", wantErr: ErrInvalidID,
			wantMsg: `runtime override: invalid id "2001:db8::/64" for NewRegistrationsPerIPv6Range`},
		{desc: "an id that can never match is an error, not a warning",
			spec: spec(CertificatesPerDomain, "www.example.com", 1, 1, "1s"), wantField: "id", wantErr: ErrUnreachableID,
			wantMsg: `runtime override: override id "www.example.com" for CertificatesPerDomain can never match`},
		{desc: "a zero burst is refused naming it",
			spec: spec(NewOrdersPerAccount, "1", 0, 1, "1s"), wantField: "burst", wantErr: ErrInvalidLimit,
			wantMsg: "runtime override: invalid burst 0 for NewOrdersPerAccount, must be > 0"},
		{desc: "a negative count is refused naming it",
			spec: spec(NewOrdersPerAccount, "1", 1, -5, "1s"), wantField: "count", wantErr: ErrInvalidLimit,
			wantMsg: "runtime override: invalid count -5 for NewOrdersPerAccount, must be > 0"},
		{desc: "a period that is not a duration is refused naming it",
			spec: spec(NewOrdersPerAccount, "1", 1, 1, "soon"), wantField: "period", wantErr: ErrInvalidLimit,
			wantMsg: `runtime override: invalid period "soon" for NewOrdersPerAccount, must be a duration such as 1s or 180m`},
		{desc: "a missing period is refused naming it",
			spec: spec(NewOrdersPerAccount, "1", 1, 1, ""), wantField: "period", wantErr: ErrSyntax,
			wantMsg: "runtime override: missing period for NewOrdersPerAccount"},
		{desc: "a missing burst is refused naming it",
			spec: RuntimeSpec{Name: NewOrdersPerAccount, ID: "1", Count: new(int64(1)), Period: "1s"}, wantField: "burst", wantErr: ErrSyntax,
			wantMsg: "runtime override: missing burst for NewOrdersPerAccount"},
		{desc: "a comment that is not UTF-8 is refused naming it",
			spec: RuntimeSpec{Name: NewOrdersPerAccount, ID: "1", Burst: new(int64(1)), Count: new(int64(1)), Period: "1s", Comment: "\xff"}, wantField: "comment", wantErr: ErrSyntax,
			wantMsg: `runtime override: invalid comment "\xff" for NewOrdersPerAccount: not UTF-8`},
		{desc: "a bucket that would take centuries to fill is refused",
			spec: spec(NewOrdersPerAccount, "1", 1<<40, 1, "8760h"), wantField: "burst", wantErr: ErrInvalidLimit,
			wantMsg: "runtime override: invalid burst 1099511627776 for NewOrdersPerAccount with count 1 and period 8760h0m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			_, err := s.RuntimeOverride(tt.spec)
			var re *RuntimeError
			if !errors.As(err, &re) {
				t.Fatalf("got %v, want a *RuntimeError", err)
			}
			if re.Field != tt.wantField {
				t.Errorf("got field %q, want %q", re.Field, tt.wantField)
			}
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("got %v, want it to wrap %v", err, tt.wantErr)
			}
			if !strings.HasPrefix(err.Error(), tt.wantMsg) {
				t.Errorf("got %q, want it to start %q", err, tt.wantMsg)
			}
		})
	}
	t.Run("a valid override keeps its comment and time and is marked runtime", func(t *testing.T) {
		at := time.Date(2026, 11, 23, 15, 0, 0, 0, time.UTC)
		sp := spec("NewFoosPerIPAddress", "172.23.45.22", 2, 3, "90s") // user-defined in the test files
		sp.Comment, sp.Updated = `a "quoted" <comment> ünïcode`, at
		o := mustRuntime(t, s, sp)
		if !strings.HasSuffix(o.Key, ":172.23.45.22") {
			t.Errorf("got key %q, want <enum>:172.23.45.22", o.Key)
		}
		if o.Limit != lim(2, 3, 90*time.Second) || o.Comment != sp.Comment || !o.Updated.Equal(at) || !o.Runtime || o.File != "" {
			t.Errorf("got %+v, want 2/3/90s, the comment, the time, runtime and no file", o)
		}
	})
	t.Run("RuntimeKey checks the name and id only", func(t *testing.T) {
		k, err := s.RuntimeKey(NewRegistrationsPerIPv6Range, "2001:db8::/48")
		if err != nil || k != "2:2001:db8::/48" {
			t.Errorf("got %q, %v, want 2:2001:db8::/48", k, err)
		}
		if _, err := s.RuntimeKey(NewOrdersPerAccount, "x"); !errors.Is(err, ErrInvalidID) {
			t.Errorf("got %v, want ErrInvalidID", err)
		}
	})
}

// FuzzRuntimeOverride feeds the admin API's input to RuntimeOverride: it
// never panics, and an override it accepts resolves as itself.
func FuzzRuntimeOverride(f *testing.F) {
	f.Add("NewOrdersPerAccount", "12345678", int64(10), int64(10), "1h", "a comment")
	f.Add("NewRegistrationsPerIPv6Range", "2001:db8::/48", int64(1), int64(1), "90s", "")
	f.Add("CertificatesPerFQDNSet", "a.example.com,b.example.com", int64(0), int64(-1), "soon", "\"}]\n- x: {")
	f.Add("FailedAuthorizationsPerDomainPerAccount", "42:www.example.com", int64(1<<62), int64(1), "8760h", "\u2028")
	f.Add("NewOrdersPerAccount", "1", int64(1), int64(1), "1s", "\xff not UTF-8")
	s, err := New(nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, name, id string, burst, count int64, period, comment string) {
		o, err := s.RuntimeOverride(RuntimeSpec{Name: name, ID: id, Burst: &burst, Count: &count, Period: period, Comment: comment})
		if err != nil {
			var re *RuntimeError
			if !errors.As(err, &re) || len(re.Errs) == 0 {
				t.Fatalf("got %v, want a *RuntimeError with problems", err)
			}
			return
		}
		if o.Name.Text != name || o.ID != id || o.Comment != comment || o.Limit.Burst != burst || o.Limit.Count != count || !o.Runtime {
			t.Fatalf("got %+v, want the spec back", o)
		}
		if k, err := s.RuntimeKey(name, id); err != nil || k != o.Key {
			t.Fatalf("RuntimeKey: got %q, %v, want %q", k, err, o.Key)
		}
		got, ok := s.WithRuntime(map[string]Override{o.Key: o}).Override(o.Key)
		if !ok || !got.Runtime || got.Limit != o.Limit {
			t.Fatalf("Override(%q): got %+v, %v, want the runtime override", o.Key, got, ok)
		}
	})
}
