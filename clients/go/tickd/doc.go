// Package tickd is a client for tickd, a timer service reached over gRPC.
//
// A Client registers, cancels, inspects and moves timers; a Subscriber receives a
// namespace's expirations and acknowledges them; a LeaseKeeper keeps leases (timers with
// a ttl) alive over one KeepAlive stream. Every call takes a context.Context first.
//
// Errors returned by tickd are *Error values: errors.As(err, &tickdErr) gives the gRPC
// code and message, and status.Code(err) works on them too.
//
// Delivery is at least once: an expiration whose handler failed, or whose ack was lost
// with a broken connection, is delivered again, so handlers must be idempotent.
package tickd
