package tickd

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Error is a refusal from tickd (or from gRPC on the way): a gRPC status code and its
// message. Calls return it as *Error; errors.As finds it even when wrapped, and because it
// has a GRPCStatus method, status.Code(err) and status.FromError(err) read it as well.
type Error struct {
	grpcStatus *status.Status
	cause      error
}

// newError wraps an error from a generated stub; errors that carry no gRPC status (none are
// expected from the stubs) become codes.Unknown.
func newError(err error) *Error {
	if err == nil {
		return nil
	}
	var already *Error
	if errors.As(err, &already) {
		return already
	}
	return &Error{grpcStatus: status.Convert(err), cause: err}
}

// newItemError is a per-item failure that tickd reports inside an answer (a batch item, a
// heartbeat), where the code travels as a number next to its message.
func newItemError(code int32, message string) *Error {
	return &Error{grpcStatus: status.New(codes.Code(code), message)}
}

// Code is the gRPC status code, e.g. codes.InvalidArgument or codes.NotFound.
func (e *Error) Code() codes.Code { return e.grpcStatus.Code() }

// Message is tickd's explanation, e.g. naming the field that was invalid.
func (e *Error) Message() string { return e.grpcStatus.Message() }

// GRPCStatus lets status.Code and status.FromError read the error.
func (e *Error) GRPCStatus() *status.Status { return e.grpcStatus }

// Unwrap gives the gRPC error this one came from (nil for per-item failures).
func (e *Error) Unwrap() error { return e.cause }

func (e *Error) Error() string {
	return fmt.Sprintf("tickd: %s: %s", e.Code(), e.Message())
}

// codeOf is the gRPC code of any error (OK for nil, Unknown for non-gRPC errors), looking
// through wrapping.
func codeOf(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	var tickdErr *Error
	if errors.As(err, &tickdErr) {
		return tickdErr.Code()
	}
	return status.Code(err)
}
