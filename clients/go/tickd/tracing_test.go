package tickd_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tickd/tickd/clients/go/tickd"
	"github.com/tickd/tickd/clients/go/tickdotel"
)

// handled is what a handler saw of one delivery.
type handled struct {
	key     string
	attempt uint32
	carried bool
	span    trace.SpanContext
	order   string
}

// A timer registered inside a span is handled in a child of that span across a SIGKILL
// restart of a durable tickd; its redelivery (attempt 2, the first handler failed) runs in
// a span of its own linked to the registering span; a timer registered outside any span
// carries nothing.
func TestHandlerSpanContinuesTheRegisteringTraceAcrossASigkillRestart(t *testing.T) {
	recorder := tracetest.NewSpanRecorder()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	server := startTickd(t, "--sync", "always")
	namespace := uniqueNamespace(t)
	client := server.dial(t, tickd.WithNamespace(namespace), tickd.WithRetry(fastRetry),
		tickd.WithTracing(tickdotel.New(tickdotel.WithTracerProvider(provider))))
	ctx := testContext(t)

	if _, err := client.Register(ctx, tickd.TimerSpec{Key: "untraced", Delay: time.Second}); err != nil {
		t.Fatal(err)
	}
	member, _ := baggage.NewMember("order", "42")
	bag, _ := baggage.New(member)
	spanCtx, registering := provider.Tracer("tests").Start(baggage.ContextWithBaggage(ctx, bag), "register")
	if _, err := client.Register(spanCtx, tickd.TimerSpec{Key: "traced", Delay: time.Second}); err != nil {
		t.Fatal(err)
	}
	registering.End()
	registered := registering.SpanContext()
	server.Crash() // before either fires
	server.Start()

	seen := make(chan handled, 10)
	acked := make(chan string, 10)
	subscriber := client.NewSubscriber(func(ctx context.Context, e *tickd.Expiration) error {
		seen <- handled{e.Timer.Key, e.Attempt, e.TraceContext.Traceparent != "",
			trace.SpanContextFromContext(ctx), baggage.FromContext(ctx).Member("order").Value()}
		if e.Timer.Key == "traced" && e.Attempt == 1 {
			return errors.New("fail attempt 1: it comes again")
		}
		return nil
	}, tickd.SubscriberOptions{
		MaxInFlight: 2, AckTimeout: time.Second, Backoff: fastReconnect,
		OnHandlerError: func(*tickd.Expiration, error) {},
		OnAck: func(event tickd.AckEvent) {
			if event.Acknowledged {
				acked <- event.Expiration.Timer.Key
			}
		},
	})
	go func() { _ = subscriber.Run(ctx) }()
	defer subscriber.Stop()
	for done := map[string]bool{}; !done["traced"] || !done["untraced"]; {
		done[await(t, "the acks of both timers", acked)] = true
	}
	subscriber.Stop()
	close(seen)

	var traced []handled
	for entry := range seen {
		switch entry.key {
		case "traced":
			traced = append(traced, entry)
			if !entry.carried || entry.order != "42" {
				t.Errorf("attempt %d: trace context carried %v, baggage order %q", entry.attempt, entry.carried, entry.order)
			}
		case "untraced":
			if entry.carried {
				t.Errorf("the timer registered outside any span carried a trace context")
			}
		}
	}
	if len(traced) != 2 || traced[0].attempt != 1 || traced[1].attempt != 2 {
		t.Fatalf("deliveries of the traced timer: %+v", traced)
	}

	spans := handlerSpans(recorder, namespace, "traced")
	first, second := spans[1], spans[2]
	if first == nil || second == nil {
		t.Fatalf("handler spans by attempt: %v", spans)
	}
	if first.SpanKind() != trace.SpanKindConsumer || first.Status().Code != codes.Error {
		t.Errorf("attempt 1: kind %v, status %v", first.SpanKind(), first.Status())
	}
	if first.SpanContext().TraceID() != registered.TraceID() || first.Parent().SpanID() != registered.SpanID() {
		t.Errorf("attempt 1 is not a child of the registering span %v: trace %v, parent %v",
			registered.SpanID(), first.SpanContext().TraceID(), first.Parent().SpanID())
	}
	if traced[0].span.SpanID() != first.SpanContext().SpanID() {
		t.Errorf("the handler of attempt 1 did not run in its span")
	}
	attributes := attribute.NewSet(first.Attributes()...)
	for key, want := range map[attribute.Key]string{"tickd.namespace": namespace, "tickd.timer.key": "traced", "messaging.system": "tickd"} {
		if got, _ := attributes.Value(key); got.AsString() != want {
			t.Errorf("attribute %s = %q, want %q", key, got.AsString(), want)
		}
	}
	if got, _ := attributes.Value("tickd.attempt"); got.AsInt64() != 1 {
		t.Errorf("attribute tickd.attempt = %v", got.AsInt64())
	}
	if second.Parent().IsValid() || second.SpanContext().TraceID() == registered.TraceID() {
		t.Errorf("attempt 2 has parent %v in trace %v: it should only link to the registering span",
			second.Parent().SpanID(), second.SpanContext().TraceID())
	}
	if links := second.Links(); len(links) != 1 || links[0].SpanContext.SpanID() != registered.SpanID() ||
		links[0].SpanContext.TraceID() != registered.TraceID() {
		t.Errorf("attempt 2's links: %+v", links)
	}
	if untraced := handlerSpans(recorder, namespace, "untraced")[1]; untraced == nil || untraced.Parent().IsValid() || len(untraced.Links()) != 0 {
		t.Errorf("the untraced timer's handler span: %v", untraced)
	}
}

// handlerSpans are the ended handler spans of the timer key, by attempt.
func handlerSpans(recorder *tracetest.SpanRecorder, namespace, key string) map[int64]sdktrace.ReadOnlySpan {
	spans := map[int64]sdktrace.ReadOnlySpan{}
	for _, span := range recorder.Ended() {
		attributes := attribute.NewSet(span.Attributes()...)
		if got, _ := attributes.Value("tickd.timer.key"); span.Name() == "tickd.expiration "+namespace && got.AsString() == key {
			attempt, _ := attributes.Value("tickd.attempt")
			spans[attempt.AsInt64()] = span
		}
	}
	return spans
}
