package server

import (
	"errors"
	"fmt"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/limiter"
)

// ErrInvalidRequest is the cause of every error for an Envoy rate limit
// request the service refuses: an empty domain, no descriptors, an invalid
// per-descriptor limit, or a hits_addend over the largest int64.
var ErrInvalidRequest = errors.New("invalid rate limit request")

// ErrInvalidTransaction is the cause of every error for a key-value
// request refused before it reaches the limiter: a missing name, an
// unknown kind, a body that is not a request.
var ErrInvalidTransaction = errors.New("invalid transaction")

// invalidRequest is an Invalid error about field of an Envoy request.
func invalidRequest(field, format string, args ...any) error {
	return &limiter.Error{Kind: limiter.Invalid, Field: field,
		Msg: ErrInvalidRequest.Error() + ": " + fmt.Sprintf(format, args...), Err: ErrInvalidRequest}
}

// invalidTransaction is an Invalid error about field of a key-value
// request.
func invalidTransaction(field, format string, args ...any) error {
	return &limiter.Error{Kind: limiter.Invalid, Field: field, Msg: fmt.Sprintf(format, args...), Err: ErrInvalidTransaction}
}

// The one place where errors become answers: each limiter.Class is one
// gRPC code and one HTTP status.
var (
	grpcCodes = [...]codes.Code{
		limiter.Internal:    codes.Internal,
		limiter.Invalid:     codes.InvalidArgument,
		limiter.Unavailable: codes.Unavailable,
		limiter.Canceled:    codes.Canceled,
		limiter.Forbidden:   codes.PermissionDenied,
		limiter.NotFound:    codes.NotFound,
		limiter.Unsupported: codes.Unimplemented,
	}
	httpStatuses = [...]int{
		limiter.Internal:    http.StatusInternalServerError,
		limiter.Invalid:     http.StatusBadRequest,
		limiter.Unavailable: http.StatusServiceUnavailable,
		limiter.Canceled:    499, // the client went away
		limiter.Forbidden:   http.StatusForbidden,
		limiter.NotFound:    http.StatusNotFound,
		limiter.Unsupported: http.StatusNotImplemented,
	}
)

// grpcCode is the gRPC code that answers err.
func grpcCode(err error) codes.Code { return grpcCodes[limiter.KindOf(err)] }

// grpcError is err as a gRPC status error.
func grpcError(err error) error { return status.Error(grpcCode(err), err.Error()) }

// httpStatus is the HTTP status that answers err.
func httpStatus(err error) int { return httpStatuses[limiter.KindOf(err)] }
