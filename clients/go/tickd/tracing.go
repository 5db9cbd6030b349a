package tickd

import (
	"context"

	"google.golang.org/grpc/metadata"
)

// TraceContext is the W3C trace context and baggage of the call that registered (or last
// rescheduled) a timer, as tickd returns it with each of its expirations; all empty when
// that call carried none.
type TraceContext struct {
	Traceparent string
	Tracestate  string
	Baggage     string
}

// Tracing connects a Client to a tracing system: it carries the caller's trace context on
// Register, RegisterBatch and Reschedule, and runs each subscriber handler inside a span.
// Package github.com/tickd/tickd/clients/go/tickdotel is the one for OpenTelemetry; without
// WithTracing nothing is traced and nothing is sent.
type Tracing interface {
	// Inject answers the trace context of ctx as W3C headers (traceparent, tracestate,
	// baggage), sent as gRPC metadata; none (nil) when ctx has no valid span.
	Inject(ctx context.Context) map[string]string
	// StartHandler starts the span a handler of this expiration runs in: the context the
	// handler is given (derived from ctx), and the function ending the span with the
	// handler's error.
	StartHandler(ctx context.Context, namespace string, expiration *Expiration) (context.Context, func(error))
}

// WithTracing traces registrations and handlers with tracing (tickdotel.New() for OpenTelemetry).
func WithTracing(tracing Tracing) Option {
	return func(o *clientOptions) { o.tracing = tracing }
}

// traced is ctx with the trace context of ctx added to the outgoing metadata.
func (c *Client) traced(ctx context.Context) context.Context {
	if c.options.tracing == nil {
		return ctx
	}
	headers := c.options.tracing.Inject(ctx)
	pairs := make([]string, 0, 2*len(headers))
	for key, value := range headers {
		pairs = append(pairs, key, value)
	}
	if len(pairs) == 0 {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, pairs...)
}

// startHandler is ctx and a no-op end without tracing.
func (s *Subscriber) startHandler(ctx context.Context, expiration *Expiration) (context.Context, func(error)) {
	if s.client.options.tracing == nil {
		return ctx, func(error) {}
	}
	return s.client.options.tracing.StartHandler(ctx, s.client.options.namespace, expiration)
}
