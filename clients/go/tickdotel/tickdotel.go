// Package tickdotel traces a tickd Client with OpenTelemetry:
//
//	client, err := tickd.Dial(ctx, address, tickd.WithTracing(tickdotel.New()))
//
// Register, RegisterBatch and Reschedule then send the W3C trace context (traceparent,
// tracestate, baggage) of their ctx's span, which tickd keeps with the timer and returns
// with each of its expirations; and each subscriber handler runs in a CONSUMER span
// "tickd.expiration <namespace>": on attempt 1 a child of the registering span, on later
// attempts a span of the handler's context with a link to it. The registering call's
// baggage is in the handler's context on every attempt.
//
// It is a package of its own so that a program not using OpenTelemetry does not build it.
package tickdotel

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/tickd/tickd/clients/go/tickd"
)

// TracerName is the instrumentation name of the handler spans' tracer.
const TracerName = "github.com/tickd/tickd/clients/go/tickd"

// Tracing is the OpenTelemetry tickd.Tracing.
type Tracing struct {
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
}

// Option configures New.
type Option func(*settings)

type settings struct {
	provider trace.TracerProvider
}

// WithTracerProvider names the tracer provider of the handler spans (default: the global
// one, otel.GetTracerProvider()).
func WithTracerProvider(provider trace.TracerProvider) Option {
	return func(s *settings) { s.provider = provider }
}

// New is the OpenTelemetry tracing of a client. The W3C trace context and baggage
// propagators are used whatever the global propagator is: that is what tickd keeps.
func New(options ...Option) *Tracing {
	chosen := settings{provider: otel.GetTracerProvider()}
	for _, option := range options {
		option(&chosen)
	}
	return &Tracing{
		tracer:     chosen.provider.Tracer(TracerName),
		propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
	}
}

// Inject answers the W3C headers of ctx's span and baggage; nil without a valid span.
func (t *Tracing) Inject(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	headers := carrier{}
	t.propagator.Inject(ctx, headers)
	return headers
}

// StartHandler starts the handler's span (see the package documentation).
func (t *Tracing) StartHandler(ctx context.Context, namespace string, expiration *tickd.Expiration) (context.Context, func(error)) {
	carried := expiration.TraceContext
	parent := t.propagator.Extract(ctx, carrier{"baggage": carried.Baggage})
	var links []trace.Link
	if carried.Traceparent != "" {
		registering := carrier{"traceparent": carried.Traceparent, "tracestate": carried.Tracestate}
		if expiration.Attempt <= 1 {
			parent = t.propagator.Extract(parent, registering)
		} else if span := trace.SpanContextFromContext(t.propagator.Extract(context.Background(), registering)); span.IsValid() {
			links = append(links, trace.Link{SpanContext: span})
		}
	}
	handlerCtx, span := t.tracer.Start(parent, "tickd.expiration "+namespace,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithLinks(links...),
		trace.WithAttributes(
			attribute.String("messaging.system", "tickd"),
			attribute.String("tickd.namespace", namespace),
			attribute.String("tickd.timer.id", expiration.Timer.ID),
			attribute.String("tickd.timer.key", expiration.Timer.Key),
			attribute.Int64("tickd.attempt", int64(expiration.Attempt)),
			attribute.String("tickd.delivery.id", expiration.DeliveryID),
		),
	)
	return handlerCtx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

var _ tickd.Tracing = (*Tracing)(nil)

// carrier is a propagation.TextMapCarrier over a map (OpenTelemetry 1.1, Debian 12's, has
// no MapCarrier yet).
type carrier map[string]string

func (c carrier) Get(key string) string { return c[key] }

func (c carrier) Set(key, value string) { c[key] = value }

func (c carrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for key := range c {
		keys = append(keys, key)
	}
	return keys
}
