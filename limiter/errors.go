package limiter

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-rl/sluice/store"
)

// Class says what went wrong with a call, in the terms every front door
// answers with: each class is one gRPC code and one HTTP status.
type Class uint8

// The classes of error. The zero value is Internal.
const (
	// Internal is a bug or an unexpected reply: gRPC Internal, HTTP 500.
	Internal Class = iota
	// Invalid is a request the service refuses: gRPC InvalidArgument,
	// HTTP 400.
	Invalid
	// Unavailable is a store that cannot answer in time: gRPC Unavailable,
	// HTTP 503.
	Unavailable
	// Canceled is a caller that went away: gRPC Canceled, HTTP 499.
	Canceled
	// Forbidden is a caller not allowed to make the call: gRPC
	// PermissionDenied, HTTP 403.
	Forbidden
	// NotFound is a call about something that does not exist, such as a
	// runtime override never set: gRPC NotFound, HTTP 404.
	NotFound
	// Unsupported is a call the service cannot make with its
	// configuration, such as runtime overrides on a store that cannot keep
	// them: gRPC Unimplemented, HTTP 501.
	Unsupported
)

// String names the class.
func (c Class) String() string {
	switch c {
	case Invalid:
		return "invalid"
	case Unavailable:
		return "unavailable"
	case Canceled:
		return "canceled"
	case Forbidden:
		return "forbidden"
	case NotFound:
		return "not found"
	case Unsupported:
		return "unsupported"
	}
	return "internal"
}

// Error is the one error type of Sluice's front doors: what kind of
// problem it is, where (Field), and a message for people. Every front door
// turns it into a status with KindOf, in one place.
type Error struct {
	// Kind is the error's class: what kind of problem it is.
	Kind Class
	// Field names the part of the request at fault, in the request's own
	// terms ("cost", "transactions[1].id", "descriptors[0].limit"); empty
	// when the request as a whole is at fault, or for errors that are not
	// Invalid.
	Field string
	// Msg is the message, complete: it names the value and the rule it
	// breaks, and where in the request when that matters to the reader.
	Msg string
	// Err is the cause, for errors.Is and errors.As; may be nil.
	Err error
}

// Error returns the message.
func (e *Error) Error() string { return e.Msg }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports ErrInvalid for every Invalid error, whatever its cause.
func (e *Error) Is(target error) bool { return target == ErrInvalid && e.Kind == Invalid }

// Invalidf returns an Invalid error at field with a formatted message.
func Invalidf(field, format string, args ...any) *Error {
	return &Error{Kind: Invalid, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// InvalidErr returns an Invalid error at field whose message is prefix
// followed by err's (prefix may be empty), wrapping err.
func InvalidErr(field, prefix string, err error) *Error {
	return &Error{Kind: Invalid, Field: field, Msg: prefix + err.Error(), Err: err}
}

// At returns err with its position in a list put in front of its message
// and field: "transaction 2: …" and "transactions[2].cost". A nil err
// stays nil; an error that is not an *Error is returned as it is.
func At(err error, list, item string, i int) error {
	var e *Error
	if !errors.As(err, &e) {
		return err
	}
	field := fmt.Sprintf("%s[%d]", list, i)
	if e.Field != "" {
		field += "." + e.Field
	}
	return &Error{Kind: e.Kind, Field: field, Msg: fmt.Sprintf("%s %d: %s", item, i, e.Msg), Err: e.Err}
}

// KindOf classifies err for a front door: an *Error's own kind; a
// cancelled caller is Canceled; an expired deadline or an unavailable
// store is Unavailable; a store without runtime overrides is Unsupported;
// anything else is Internal.
func KindOf(err error) Class {
	var e *Error
	switch {
	case errors.As(err, &e):
		return e.Kind
	case errors.Is(err, context.Canceled):
		return Canceled
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, store.ErrUnavailable):
		return Unavailable
	case errors.Is(err, store.ErrUnsupported):
		return Unsupported
	}
	return Internal
}

// storeError wraps an error from the store as the Error its kind says,
// its message after prefix.
func storeError(prefix string, err error) error {
	return &Error{Kind: KindOf(err), Msg: prefix + err.Error(), Err: err}
}
