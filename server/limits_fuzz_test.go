package server_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/store/memory"
)

// FuzzKVGRPC sends the key-value gRPC methods whatever requests the bytes
// decode to, against the seed limits: each answers a decision (a batch,
// one per transaction and the combined one) or refuses the request as the
// caller's fault — invalid, an unknown limit, or an admin method without
// the right — and never fails inside: the memory store cannot.
func FuzzKVGRPC(f *testing.F) {
	cost := func(n int64) *int64 { return &n }
	for _, m := range []proto.Message{
		&sluicev1.Request{Name: "NewRegistrationsPerIPAddress", Id: "10.0.0.1", Cost: cost(1)},
		&sluicev1.Request{Name: "NewRegistrationsPerIPv6Range", Id: "2001:db8::1"},
		&sluicev1.Request{Name: "CertificatesPerFQDNSet", Id: "a.example.com,b.example.com", Cost: cost(0)},
		&sluicev1.Request{Name: "NewOrdersPerAccount", Id: "12", Cost: cost(-1)},
		&sluicev1.BatchRequest{Transactions: []*sluicev1.Transaction{
			{Name: "NewOrdersPerAccount", Id: "1", Kind: sluicev1.Transaction_CHECK_ONLY},
			{Name: "NewOrdersPerAccount", Id: "2", Kind: sluicev1.Transaction_SPEND_ONLY},
			{Name: "NewRegistrationsPerIPAddress", Id: "10.0.0.2", Cost: cost(3)},
		}},
		&sluicev1.BatchRequest{},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	kv, _ := newKV(f, memory.New(memory.Options{MaxBytes: 32 << 20}))
	refused := func(t *testing.T, what string, req proto.Message, err error) {
		t.Helper()
		switch status.Code(err) {
		case codes.InvalidArgument, codes.NotFound, codes.PermissionDenied:
		default:
			t.Fatalf("%s %v: error %v (code %v), want a decision or the caller's fault", what, req, err, status.Code(err))
		}
	}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, data []byte) {
		if req := new(sluicev1.Request); proto.Unmarshal(data, req) == nil {
			for _, m := range []struct {
				name string
				call func(context.Context, *sluicev1.Request) (*sluicev1.Decision, error)
			}{{"Check", kv.Check}, {"Spend", kv.Spend}, {"Refund", kv.Refund}, {"Reset", kv.Reset}} {
				d, err := m.call(ctx, req)
				if err != nil {
					refused(t, m.name, req, err)
					continue
				}
				if d == nil || d.GetRemaining() < 0 {
					t.Fatalf("%s %v: decision %v", m.name, req, d)
				}
			}
		}
		if req := new(sluicev1.BatchRequest); proto.Unmarshal(data, req) == nil {
			for _, m := range []struct {
				name string
				call func(context.Context, *sluicev1.BatchRequest) (*sluicev1.BatchResponse, error)
			}{{"Batch", kv.Batch}, {"BatchRefund", kv.BatchRefund}, {"BatchReset", kv.BatchReset}} {
				resp, err := m.call(ctx, req)
				if err != nil {
					refused(t, m.name, req, err)
					continue
				}
				if resp.GetDecision() == nil || len(resp.GetResults()) != len(req.GetTransactions()) {
					t.Fatalf("%s %v: %d results for %d transactions, combined decision %v", m.name, req, len(resp.GetResults()), len(req.GetTransactions()), resp.GetDecision())
				}
			}
		}
	})
}
