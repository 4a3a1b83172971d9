package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/memory"
)

// notMemory is the memory store under another type: SpendFor then takes
// the path of any other store, not its direct call.
type notMemory struct{ *memory.Store }

// batchOnly hides a store's DoOne: the limiter then takes its batch path.
type batchOnly struct{ store.Store }

// defaultsSet returns a Set with the defaults in yaml and no overrides.
func defaultsSet(tb testing.TB, yaml string) *limits.Set {
	tb.Helper()
	defaults, err := limits.ParseDefaults("defaults.yaml", []byte(yaml))
	if err != nil {
		tb.Fatal(err)
	}
	set, err := limits.New(defaults, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return set
}

// TestSpendForAnswersAsResolveAndSpend spends, round after round, on ids
// whose keys fit a memory-store slot and on ids whose keys do not, through
// SpendFor on one limiter and through Resolve and Spend on another, and
// checks every decision is the same: the key SpendFor builds in reused
// memory reaches the right bucket each time, and no bucket kept a key that
// a later call overwrote. It does so over the memory store and over a
// store without DoOne, and with Sets that let SpendFor's shortest path
// (account ids of 4 bytes or more, no override possible) be taken and
// that do not: an override in the file, or set at runtime, for the name.
// The name is passed both as package limits' constant and as a copy of
// it, which that path does not take.
func TestSpendForAnswersAsResolveAndSpend(t *testing.T) {
	const defaults = "NewOrdersPerAccount: {burst: 3, count: 1, period: 1h}\n" +
		"FailedAuthorizationsPerDomainPerAccount: {burst: 2, count: 1, period: 1h}\n"
	plain := defaultsSet(t, defaults)
	d, err := limits.ParseDefaults("defaults.yaml", []byte(defaults))
	if err != nil {
		t.Fatal(err)
	}
	overrides, err := limits.ParseOverrides("overrides.yaml", []byte(
		"- NewOrdersPerAccount: {burst: 5, count: 1, period: 1h, ids: ['7', '12345678']}\n"))
	if err != nil {
		t.Fatal(err)
	}
	overridden, err := limits.New(d, overrides)
	if err != nil {
		t.Fatal(err)
	}
	atRuntime := plain.WithRuntime(map[string]limits.Override{"3:1234567": {
		Key: "3:1234567", Limit: gcra.Limit{Burst: 1, Count: 1, Period: time.Hour}}})
	type call struct{ name, id string }
	var calls []call
	copied := strings.Clone(limits.NewOrdersPerAccount)
	for i := range 8 {
		calls = append(calls, call{limits.NewOrdersPerAccount, fmt.Sprint(i)})
		// "4:<account>:<domain>": longer than a slot holds.
		calls = append(calls, call{limits.FailedAuthorizationsPerDomainPerAccount, fmt.Sprintf("%d:%s.example.com", 100+i, strings.Repeat("d", 20+i))})
	}
	// Account ids of every length from 3 to 15 digits (a key of 5 to 17
	// bytes), and ids the checks refuse: a leading zero, a byte that is
	// not a digit at either end or within, and one past the 16 bytes.
	for n := 3; n <= 15; n++ {
		id := "1234567890123456"[:n]
		calls = append(calls, call{limits.NewOrdersPerAccount, id}, call{copied, id})
	}
	for _, id := range []string{"12345678", "1234567", "0123", "01234567890", "12a4", "a234", "123x", "1234567/90", "12345678 ", "1234567890123x", "-1234"} {
		calls = append(calls, call{limits.NewOrdersPerAccount, id}, call{copied, id})
	}
	for _, tc := range []struct {
		name string
		s    func() store.Store
	}{
		{"memory", func() store.Store { return memory.New(memory.Options{}) }},
		{"memory store under another type", func() store.Store { return notMemory{memory.New(memory.Options{})} }},
		{"batch path", func() store.Store { return batchOnly{memory.New(memory.Options{})} }},
	} {
		for _, sc := range []struct {
			name string
			set  *limits.Set
		}{{"no overrides", plain}, {"overrides", overridden}, {"a runtime override", atRuntime}} {
			t.Run(tc.name+", "+sc.name, func(t *testing.T) {
				set := sc.set
				clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
				got, want := limiter.New(tc.s(), clk), limiter.New(memory.New(memory.Options{}), clk)
				ctx := context.Background()
				for round := range 7 {
					for i, c := range calls {
						// Costs from -1 to 4, past some bursts: invalid ones
						// must fail alike.
						cost := int64((round+i)%6 - 1)
						d, err := got.SpendFor(ctx, set, c.name, c.id, cost)
						b, rerr := set.Resolve(c.name, c.id)
						var w limiter.Decision
						var werr error
						if rerr != nil {
							werr = limiter.ResolveErr(rerr)
						} else {
							w, werr = want.Spend(ctx, limiter.ForBucket(b, c.id, cost))
						}
						if fmt.Sprint(err) != fmt.Sprint(werr) || d != w {
							t.Fatalf("round %d, %s %q, cost %d: SpendFor decided %+v, %v; Resolve and Spend %+v, %v", round, c.name, c.id, cost, d, err, w, werr)
						}
					}
				}
			})
		}
	}
}

func TestSpendForRefusesBadNamesAndIDs(t *testing.T) {
	l := limiter.New(memory.New(memory.Options{}), clock.New())
	ctx := context.Background()
	for _, tc := range []struct{ name, id, field string }{
		{"NoSuchLimit", "1", "name"},
		{limits.NewOrdersPerAccount, "12x", "id"},
		{limits.NewOrdersPerAccount, "", "id"},
		{limits.NewOrdersPerAccount, strings.Repeat("1", 2000), "id"},
	} {
		_, err := l.SpendFor(ctx, nil, tc.name, tc.id, 1)
		var le *limiter.Error
		if !errors.As(err, &le) || le.Kind != limiter.Invalid || le.Field != tc.field {
			t.Errorf("%s %.20q: got %v, want an Invalid error on field %s", tc.name, tc.id, err, tc.field)
		}
	}
	// The buffer that held the long id's key is not kept, and calls go on.
	if d, err := l.SpendFor(ctx, nil, limits.NewOrdersPerAccount, "1", 1); err != nil || !d.Allowed {
		t.Fatalf("after the refusals: got %+v, %v, want allowed (no limit in a nil set)", d, err)
	}
}

// TestSpendForAllocatesNothing checks the README's library path allocates
// nothing per decision over the memory store, for an account id, an IPv4
// address, an IPv6 range and the longest IPv6 address.
func TestSpendForAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops items on purpose (make allocs runs this without it)")
	}
	set := defaultsSet(t,
		"NewOrdersPerAccount: {burst: 1000000, count: 1000, period: 1s}\n"+
			"NewRegistrationsPerIPAddress: {burst: 1000000, count: 1000, period: 1s}\n"+
			"NewRegistrationsPerIPv6Range: {burst: 1000000, count: 1000, period: 1s}\n")
	l := limiter.New(memory.New(memory.Options{}), clock.New())
	ctx := context.Background()
	for _, c := range [][2]string{
		{limits.NewOrdersPerAccount, "12345678"},
		{limits.NewRegistrationsPerIPAddress, "203.0.113.9"},
		{limits.NewRegistrationsPerIPv6Range, "2001:db8:1234::1"},
		// The longest key of these: 2 + 45 bytes.
		{limits.NewRegistrationsPerIPAddress, "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.254"},
	} {
		allocs := testing.AllocsPerRun(1000, func() {
			if d, err := l.SpendFor(ctx, set, c[0], c[1], 1); err != nil || !d.Allowed {
				t.Fatalf("%s %s: got %+v, %v", c[0], c[1], d, err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s %s: %.1f allocations a decision, want 0", c[0], c[1], allocs)
		}
	}
}

// oneOnly hides a store's SpendGCRA: the limiter then takes DoOne.
type oneOnly struct{ store.Oner }

// TestSpendAndCheckAnswerAsEveryPath runs the same random Spend and Check
// calls, valid and not (limits, costs, keys, disabled transactions and
// fixed windows among them), on three limiters over the memory store: one
// that the store answers through SpendGCRA, one through DoOne, one through
// its batch path. Every decision, and every error's text and kind, must
// be the same.
func TestSpendAndCheckAnswerAsEveryPath(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	fast := limiter.New(memory.New(memory.Options{}), clk)
	paths := map[string]*limiter.Limiter{
		"DoOne":      limiter.New(oneOnly{memory.New(memory.Options{})}, clk),
		"batch path": limiter.New(batchOnly{memory.New(memory.Options{})}, clk),
	}
	limitsUsed := []gcra.Limit{
		{Burst: 4, Count: 2, Period: time.Second},
		{Burst: 2, Count: 1, Period: 200 * time.Millisecond},
		{Burst: 0, Count: 1, Period: time.Second},            // invalid: no burst
		{Burst: 3, Count: 10, Period: 5},                     // invalid: under 1ns a token
		{Burst: 1 << 40, Count: 1, Period: time.Hour * 1000}, // invalid: too long to fill
	}
	r := rand.New(rand.NewPCG(7, 8))
	ctx := context.Background()
	var fastAllowed, fastDenied, fastInvalid int
	for step := range 20_000 {
		txn := limiter.Transaction{
			Key:   fmt.Sprint("k", r.IntN(5)),
			Limit: limitsUsed[r.IntN(len(limitsUsed))],
			Cost:  int64(r.IntN(7)) - 1,
			Name:  "SomeLimit",
			ID:    "some-id",
		}
		switch r.IntN(12) {
		case 0:
			txn.Key = ""
		case 1:
			txn.Disabled = true
		case 2:
			txn.Window = limiter.Window{Limit: 3, Length: time.Second}
		case 3:
			txn.Name, txn.ID = "", ""
		}
		check := r.IntN(3) == 0
		clk.Add(time.Duration(r.IntN(80)) * time.Millisecond)
		do := func(l *limiter.Limiter) (limiter.Decision, error) {
			if check {
				return l.Check(ctx, txn)
			}
			return l.Spend(ctx, txn)
		}
		d, err := do(fast)
		switch {
		case err != nil:
			fastInvalid++
		case d.Allowed:
			fastAllowed++
		default:
			fastDenied++
		}
		for name, l := range paths {
			pd, perr := do(l)
			if fmt.Sprint(err) != fmt.Sprint(perr) || limiter.KindOf(err) != limiter.KindOf(perr) {
				t.Fatalf("step %d, %+v (check %v): error %v, %s's %v", step, txn, check, err, name, perr)
			}
			if d != pd {
				t.Fatalf("step %d, %+v (check %v): decided %+v, %s %+v", step, txn, check, d, name, pd)
			}
		}
	}
	if fastAllowed < 1000 || fastDenied < 1000 || fastInvalid < 1000 {
		t.Fatalf("%d allowed, %d denied, %d invalid: the calls do not cover every answer", fastAllowed, fastDenied, fastInvalid)
	}
}
