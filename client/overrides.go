package client

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
)

// Override is a key-value override set at runtime (sluice.v1.Overrides):
// the limit of one id of a limit name, kept in the server's store, taking
// precedence over the overrides file's for the same key.
type Override struct {
	Name    string // the limit name, e.g. "NewOrdersPerAccount"
	ID      string // the id in canonical form, e.g. "12345678"
	Key     string // the override key, e.g. "3:12345678"; set by the server
	Burst   int64
	Count   int64
	Period  time.Duration
	Comment string
	Updated time.Time // when it was last set; set by the server
}

// The runtime override calls need the administrator's credentials: the
// token of the server's --kv-admin-token-file in the call's context
// (WithAdminToken), or the Client's TLS client certificate naming
// --kv-admin-client-san. Without them the error is codes.PermissionDenied
// (IsForbidden); a name and id with no runtime override is codes.NotFound
// (IsNotFound); a server whose store keeps no runtime overrides answers
// codes.Unimplemented.

// WithAdminToken returns ctx carrying the administrator's bearer token
// for the calls that need it: the runtime overrides, Refund, Reset and
// their batches.
func WithAdminToken(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// Overrides returns every runtime override in force on the server, sorted
// by key.
func (c *Client) Overrides(ctx context.Context) ([]Override, error) {
	resp, err := c.overrides.ListOverrides(ctx, &sluicev1.ListOverridesRequest{})
	if err != nil {
		return nil, err
	}
	out := make([]Override, len(resp.GetOverrides()))
	for i, o := range resp.GetOverrides() {
		out[i] = overrideFromProto(o)
	}
	return out, nil
}

// Override returns the runtime override of name and id.
func (c *Client) Override(ctx context.Context, name, id string) (Override, error) {
	return overrideAnswer(c.overrides.GetOverride(ctx, &sluicev1.OverrideRef{Name: name, Id: id}))
}

// PutOverride sets the runtime override o.Name, o.ID to o's burst, count,
// period and comment (Key and Updated are ignored), replacing any, and
// returns it as the server keeps it. It applies to the next request.
func (c *Client) PutOverride(ctx context.Context, o Override) (Override, error) {
	req := &sluicev1.PutOverrideRequest{Name: o.Name, Id: o.ID, Burst: &o.Burst, Count: &o.Count,
		Period: durationpb.New(o.Period), Comment: o.Comment}
	return overrideAnswer(c.overrides.PutOverride(ctx, req))
}

// DeleteOverride removes the runtime override of name and id, so that the
// overrides file's or the default limit applies again, and returns the
// override removed.
func (c *Client) DeleteOverride(ctx context.Context, name, id string) (Override, error) {
	return overrideAnswer(c.overrides.DeleteOverride(ctx, &sluicev1.OverrideRef{Name: name, Id: id}))
}

// IsForbidden reports an error for a call made without the
// administrator's credentials.
func IsForbidden(err error) bool { return status.Code(err) == codes.PermissionDenied }

// IsNotFound reports an error for a runtime override that is not set.
func IsNotFound(err error) bool { return status.Code(err) == codes.NotFound }

func overrideAnswer(o *sluicev1.Override, err error) (Override, error) {
	if err != nil {
		return Override{}, err
	}
	return overrideFromProto(o), nil
}

func overrideFromProto(o *sluicev1.Override) Override {
	out := Override{Name: o.GetName(), ID: o.GetId(), Key: o.GetKey(), Burst: o.GetBurst(), Count: o.GetCount(),
		Period: o.GetPeriod().AsDuration(), Comment: o.GetComment()}
	if u := o.GetUpdated(); u != nil {
		out.Updated = u.AsTime()
	}
	return out
}
