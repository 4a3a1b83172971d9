package server_test

import (
	"context"
	"strings"
	"testing"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/store/memory"
)

// kvIDs are transactions whose bucket keys range from 3 bytes to 69:
// some longer than the 48 a single call's answer sets aside, and 254 in
// all, more than the 24 a transaction a batch of the nine sets aside, so
// that both the keys written in place and those that outgrow it are
// checked.
var kvIDs = []struct{ name, id string }{
	{"NewOrdersPerAccount", "12345678"},
	{"NewRegistrationsPerIPAddress", "192.0.2.1"},
	{"NewRegistrationsPerIPAddress", "2001:db8:1234:5678:9abc:def0:1234:5678"},
	{"NewRegistrationsPerIPv6Range", "2001:db8:1234::/48"},
	{"CertificatesPerDomain", "example.com"},
	{"CertificatesPerDomain", strings.Repeat("a", 60) + "." + strings.Repeat("b", 63) + ".com"},
	{"CertificatesPerDomainPerAccount", "12345678:" + strings.Repeat("d", 50) + ".example.org"},
	{"NewOrdersPerAccount", "9"},
	{"CertificatesPerFQDNSet", "www.example.com,example.com," + strings.Repeat("e", 40) + ".example.net"},
}

// TestKVAnswersKeepTheirKeys checks the bucket key of every answer, single
// and batched, against limits.Set.Resolve's, and checks them all again
// after more calls: the answers' keys live in memory the calls write into,
// so a key overwritten by a later call would show here.
func TestKVAnswersKeepTheirKeys(t *testing.T) {
	kv, _ := newKV(t, memory.New(memory.Options{}))
	set := seedLimits(t)
	ctx := context.Background()
	want := func(name, id string) string {
		t.Helper()
		b, err := set.Resolve(name, id)
		if err != nil {
			t.Fatalf("Resolve(%q, %q): %v", name, id, err)
		}
		return b.Key
	}
	type kept struct {
		what string
		d    *sluicev1.Decision
		want string
	}
	var all []kept
	for round := 0; round < 2; round++ {
		for _, c := range kvIDs {
			d, err := kv.Spend(ctx, &sluicev1.Request{Name: c.name, Id: c.id})
			if err != nil {
				t.Fatalf("Spend(%s, %q): %v", c.name, c.id, err)
			}
			all = append(all, kept{"Spend " + c.name + " " + c.id, d, want(c.name, c.id)})
		}
		for n := 1; n <= len(kvIDs); n++ {
			req := &sluicev1.BatchRequest{}
			for _, c := range kvIDs[:n] {
				req.Transactions = append(req.Transactions, &sluicev1.Transaction{Name: c.name, Id: c.id, Kind: sluicev1.Transaction_CHECK_ONLY})
			}
			resp, err := kv.Batch(ctx, req)
			if err != nil {
				t.Fatalf("Batch of %d: %v", n, err)
			}
			if len(resp.GetResults()) != n {
				t.Fatalf("Batch of %d: %d results", n, len(resp.GetResults()))
			}
			for i, c := range kvIDs[:n] {
				all = append(all, kept{"Batch result " + c.name + " " + c.id, resp.GetResults()[i], want(c.name, c.id)})
			}
		}
		for _, k := range all {
			if got := k.d.GetBucket(); got != k.want {
				t.Errorf("round %d: %s: bucket %q, want %q", round, k.what, got, k.want)
			}
		}
	}
}

// TestKVSpendAllocatesOnce checks that a key-value Spend on the memory
// store makes one allocation, its answer (the Decision, its Limit, its
// Durations and the bucket key together), for an account id and for an
// IPv6 address, whose key is the longest an answer has room for.
func TestKVSpendAllocatesOnce(t *testing.T) {
	kv := kvNeverDenying(t, "NewOrdersPerAccount", "NewRegistrationsPerIPAddress")
	ctx := context.Background()
	for _, req := range []*sluicev1.Request{
		{Name: "NewOrdersPerAccount", Id: "12345678901234567890"},
		{Name: "NewRegistrationsPerIPAddress", Id: "2001:db8:1234:5678:9abc:def0:123:4567"},
	} {
		allocs := testing.AllocsPerRun(200, func() {
			d, err := kv.Spend(ctx, req)
			if err != nil || !d.GetAllowed() {
				t.Fatalf("Spend(%v): %v, %v", req, d, err)
			}
		})
		if allocs > 1 {
			t.Errorf("Spend(%s, %s): %v allocations, want 1", req.GetName(), req.GetId(), allocs)
		}
	}
}
