// Package client is a Go client for Sluice's key-value limits API
// (sluice.v1.Limits over gRPC): Boulder-style limits checked, spent,
// refunded and reset by limit name and subscriber id.
//
//	c, err := client.Dial("localhost:8081")
//	...
//	d, err := c.Spend(ctx, "NewOrdersPerAccount", "12345678", 1)
//	if err == nil && !d.Allowed {
//		// try again in d.RetryIn
//	}
//
// Errors are gRPC status errors: codes.InvalidArgument for a request the
// server refuses (unknown name, malformed id, cost out of range, bad
// batch), with a message naming the problem; codes.Unavailable when the
// server's store cannot be reached. IsInvalid and IsUnavailable test for
// them.
package client

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/limiter"
)

// Client calls a Sluice server's key-value limits API. Create it with Dial
// or New. It is safe for concurrent use.
type Client struct {
	api       sluicev1.LimitsClient
	overrides sluicev1.OverridesClient // see overrides.go
	conn      *grpc.ClientConn         // nil when made by New
}

// Dial returns a Client for the gRPC server at addr ("host:port"). The
// connection is plaintext unless opts include transport credentials (such
// as grpc.WithTransportCredentials(credentials.NewTLS(cfg))), which replace
// the default. Dial does not wait for the server; calls do. Close the
// Client when done.
func Dial(addr string, opts ...grpc.DialOption) (*Client, error) {
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("dial sluice %s: %w", addr, err)
	}
	return &Client{api: sluicev1.NewLimitsClient(conn), overrides: sluicev1.NewOverridesClient(conn), conn: conn}, nil
}

// New returns a Client over an existing connection, which the caller keeps
// and closes.
func New(conn grpc.ClientConnInterface) *Client {
	return &Client{api: sluicev1.NewLimitsClient(conn), overrides: sluicev1.NewOverridesClient(conn)}
}

// Close closes the connection made by Dial; for a Client made by New it
// does nothing.
func (c *Client) Close() error {
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// Source says where the limit of a decision comes from.
type Source int

const (
	// SourceNone: no limit applies to the bucket; every request is allowed.
	SourceNone Source = iota
	// SourceDefault: the limit name's default.
	SourceDefault
	// SourceOverride: an override for the id (or its account).
	SourceOverride
)

// String returns "none", "default" or "override".
func (s Source) String() string {
	switch s {
	case SourceNone:
		return "none"
	case SourceDefault:
		return "default"
	case SourceOverride:
		return "override"
	}
	return fmt.Sprintf("source(%d)", int(s))
}

// Limit is the limit applied to a bucket: at most Burst tokens, refilled at
// Count tokens every Period. All zero when Source is SourceNone.
type Limit struct {
	Burst  int64
	Count  int64
	Period time.Duration
	Source Source
}

// Decision is the server's answer to a transaction.
type Decision struct {
	// Allowed: the request may go ahead (for Refund: something was given
	// back).
	Allowed bool
	// Remaining is the tokens left in the bucket; math.MaxInt64 when no
	// limit applies.
	Remaining int64
	// RetryIn is how long until a request of the same cost would be
	// allowed; zero when one would be allowed now.
	RetryIn time.Duration
	// ResetIn is how long until the bucket is full.
	ResetIn time.Duration
	// Limit is the limit applied.
	Limit Limit
	// Bucket is the bucket key, such as "1:10.0.0.1"; empty for a batch
	// decision to which no limit applied.
	Bucket string
}

// Kind is what a transaction of a batch does: limiter.Kind, Sluice's one
// kind enum. A batch takes CheckAndSpend (also the zero value), CheckOnly
// and SpendOnly.
type Kind = limiter.Kind

// The kinds a batch takes.
const (
	// CheckAndSpend checks the bucket and spends when the whole batch is
	// allowed.
	CheckAndSpend = limiter.CheckAndSpend
	// CheckOnly checks the bucket and never spends.
	CheckOnly = limiter.CheckOnly
	// SpendOnly spends when the whole batch is allowed; its own decision
	// does not count toward the batch's.
	SpendOnly = limiter.SpendOnly
)

// kindProto is k as the gRPC API numbers it.
func kindProto(k Kind) (sluicev1.Transaction_Kind, error) {
	switch k {
	case 0, CheckAndSpend:
		return sluicev1.Transaction_CHECK_AND_SPEND, nil
	case CheckOnly:
		return sluicev1.Transaction_CHECK_ONLY, nil
	case SpendOnly:
		return sluicev1.Transaction_SPEND_ONLY, nil
	}
	return 0, fmt.Errorf("kind %s cannot be part of a batch, must be check_and_spend, check_only or spend_only", k)
}

// Transaction is one entry of a batch.
type Transaction struct {
	Name string // limit name, such as "NewOrdersPerAccount"
	ID   string // natural identifier, such as "12345678"
	Cost int64  // tokens, from 0 (a peek) to the limit's burst
	Kind Kind
}

// Check reports whether spending cost tokens for id under the limit name
// would be allowed, spending nothing. Cost 0 peeks at the bucket.
func (c *Client) Check(ctx context.Context, name, id string, cost int64) (Decision, error) {
	return decide(c.api.Check(ctx, &sluicev1.Request{Name: name, Id: id, Cost: &cost}))
}

// Spend checks and, when allowed, spends cost tokens for id under the
// limit name.
func (c *Client) Spend(ctx context.Context, name, id string, cost int64) (Decision, error) {
	return decide(c.api.Spend(ctx, &sluicev1.Request{Name: name, Id: id, Cost: &cost}))
}

// Refund gives cost tokens back to the bucket, never past full. The
// decision is allowed when something was given back.
func (c *Client) Refund(ctx context.Context, name, id string, cost int64) (Decision, error) {
	return decide(c.api.Refund(ctx, &sluicev1.Request{Name: name, Id: id, Cost: &cost}))
}

// Reset makes the bucket of id under the limit name full again.
func (c *Client) Reset(ctx context.Context, name, id string) (Decision, error) {
	return decide(c.api.Reset(ctx, &sluicev1.Request{Name: name, Id: id}))
}

// Batch applies 1 to 100 transactions, each on a different bucket, all or
// nothing: when any checked transaction is denied, nothing is spent. It
// returns the strictest decision and one decision per transaction.
func (c *Client) Batch(ctx context.Context, txns ...Transaction) (Decision, []Decision, error) {
	req := &sluicev1.BatchRequest{Transactions: make([]*sluicev1.Transaction, len(txns))}
	for i, t := range txns {
		kind, err := kindProto(t.Kind)
		if err != nil {
			return Decision{}, nil, fmt.Errorf("transaction %d: %w", i, err)
		}
		req.Transactions[i] = &sluicev1.Transaction{Name: t.Name, Id: t.ID, Cost: &t.Cost, Kind: kind}
	}
	return batchAnswer(c.api.Batch(ctx, req))
}

// BatchRefund gives each transaction's cost back to its bucket, never past
// full, 1 to 100 buckets each named once; Kind must be left zero. The
// combined decision is allowed when every limited bucket got something
// back. It needs the admin credentials when the server asks for them.
func (c *Client) BatchRefund(ctx context.Context, txns ...Transaction) (Decision, []Decision, error) {
	return c.adminBatch(ctx, c.api.BatchRefund, txns)
}

// BatchReset makes each transaction's bucket full again, 1 to 100 buckets
// each named once; costs are ignored and Kind must be left zero. It needs
// the admin credentials when the server asks for them.
func (c *Client) BatchReset(ctx context.Context, txns ...Transaction) (Decision, []Decision, error) {
	return c.adminBatch(ctx, c.api.BatchReset, txns)
}

func (c *Client) adminBatch(ctx context.Context, call func(context.Context, *sluicev1.BatchRequest, ...grpc.CallOption) (*sluicev1.BatchResponse, error), txns []Transaction) (Decision, []Decision, error) {
	req := &sluicev1.BatchRequest{Transactions: make([]*sluicev1.Transaction, len(txns))}
	for i, t := range txns {
		if t.Kind != 0 {
			return Decision{}, nil, fmt.Errorf("transaction %d: kind %s is not allowed in a batch refund or reset, leave it zero", i, t.Kind)
		}
		req.Transactions[i] = &sluicev1.Transaction{Name: t.Name, Id: t.ID, Cost: &t.Cost}
	}
	return batchAnswer(call(ctx, req))
}

func batchAnswer(resp *sluicev1.BatchResponse, err error) (Decision, []Decision, error) {
	if err != nil {
		return Decision{}, nil, err
	}
	each := make([]Decision, len(resp.GetResults()))
	for i, d := range resp.GetResults() {
		each[i] = fromProto(d)
	}
	return fromProto(resp.GetDecision()), each, nil
}

// IsInvalid reports whether err is the server refusing a request as
// invalid.
func IsInvalid(err error) bool { return status.Code(err) == codes.InvalidArgument }

// IsUnavailable reports whether err says the server or its store cannot be
// reached.
func IsUnavailable(err error) bool { return status.Code(err) == codes.Unavailable }

func decide(d *sluicev1.Decision, err error) (Decision, error) {
	if err != nil {
		return Decision{}, err
	}
	return fromProto(d), nil
}

func fromProto(d *sluicev1.Decision) Decision {
	l := d.GetLimit()
	return Decision{
		Allowed:   d.GetAllowed(),
		Remaining: d.GetRemaining(),
		RetryIn:   d.GetRetryIn().AsDuration(),
		ResetIn:   d.GetResetIn().AsDuration(),
		Limit: Limit{
			Burst:  l.GetBurst(),
			Count:  l.GetCount(),
			Period: l.GetPeriod().AsDuration(),
			Source: Source(l.GetSource()),
		},
		Bucket: d.GetBucket(),
	}
}
