package tickd

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tickd/tickd/clients/go/tickdpb"
)

// TimerSpec is what a registration asks for. Zero fields are left out.
type TimerSpec struct {
	// Namespace; empty: the client's namespace.
	Namespace string
	// Key is optional and unique within the namespace: registering an existing key returns
	// the existing timer, which is what makes a registration safe to retry.
	Key string
	// Fire after Delay, or at Deadline (not both). With neither, a lease (TTL set) fires
	// after its ttl, a cron timer at its next calendar time, and any other timer at once.
	Delay    time.Duration
	Deadline time.Time
	Payload  []byte
	// Repeat re-arms the timer every Repeat after each firing, without drift.
	Repeat time.Duration
	// TTL makes the timer a lease: Touch and KeepAlive push its deadline to now + TTL.
	TTL time.Duration
	// Cron is a calendar schedule ("0 9 * * MON-FRI", 6 fields with seconds, or @daily...)
	// read in TimeZone (an IANA name; default UTC). Exclusive with Repeat and TTL.
	Cron     string
	TimeZone string
	// Replace, with a Key, replaces a pending timer under that key instead of returning it.
	Replace bool
}

// Timer is a timer as tickd knows it.
type Timer struct {
	ID        string
	Namespace string
	Key       string
	Deadline  time.Time
	// Payload is empty in registration answers: tickd does not echo it (Get returns it).
	Payload    []byte
	Repeat     time.Duration
	TTL        time.Duration
	Remaining  time.Duration
	FiredCount uint64
	Cron       string
	TimeZone   string
}

// Registration is the answer to registering one timer.
type Registration struct {
	Timer Timer
	// Created is false when the key already existed (the timer returned, or replaced, is
	// the existing one).
	Created bool
	// Replaced is true when Replace was asked and a pending timer under the key was replaced.
	Replaced bool
}

// BatchResult is one item of RegisterBatch's answer: a Registration, or the item's own *Error.
type BatchResult struct {
	Registration *Registration
	Err          error
}

// Ref names one timer by the id tickd gave it or by its key. Namespace empty: the client's.
type Ref struct {
	Namespace string
	ID        string
	Key       string
}

// ByID names a timer by id in the client's namespace.
func ByID(id string) Ref { return Ref{ID: id} }

// ByKey names a timer by key in the client's namespace.
func ByKey(key string) Ref { return Ref{Key: key} }

// Expiration is one firing of a timer, as delivered to a subscriber.
type Expiration struct {
	// DeliveryID is what Ack takes.
	DeliveryID string
	Timer      Timer
	FiredAt    time.Time
	// Attempt is 1 on the first delivery, then 2, 3, ... on redeliveries.
	Attempt uint32
	// Late: the deadline passed while tickd was down; it fired at start-up.
	Late bool
	// Lease: the timer was a lease whose heartbeats stopped.
	Lease bool
	// TraceContext: the registering call's trace context (see Tracing); empty when it sent none.
	TraceContext TraceContext
}

func (c *Client) specToProto(spec TimerSpec) *tickdpb.TimerSpec {
	message := &tickdpb.TimerSpec{
		Namespace: c.namespaceOr(spec.Namespace),
		Key:       spec.Key,
		Payload:   spec.Payload,
		Cron:      spec.Cron,
		TimeZone:  spec.TimeZone,
		Replace:   spec.Replace,
		Repeat:    optionalDuration(spec.Repeat),
		Ttl:       optionalDuration(spec.TTL),
	}
	switch {
	case !spec.Deadline.IsZero():
		message.Deadline = timestamppb.New(spec.Deadline)
	case spec.Delay != 0 || (spec.TTL == 0 && spec.Cron == ""):
		// A plain timer with neither delay nor deadline fires at once (delay 0).
		message.Delay = durationpb.New(spec.Delay)
	}
	return message
}

func (c *Client) refToProto(ref Ref) *tickdpb.TimerRef {
	message := &tickdpb.TimerRef{Namespace: c.namespaceOr(ref.Namespace)}
	if ref.Key != "" && ref.ID == "" {
		message.Target = &tickdpb.TimerRef_Key{Key: ref.Key}
	} else {
		message.Target = &tickdpb.TimerRef_Id{Id: ref.ID}
	}
	return message
}

func optionalDuration(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

func optionalTime(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

func optionalDurationValue(d *durationpb.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.AsDuration()
}

func timerFromProto(message *tickdpb.Timer) Timer {
	if message == nil {
		return Timer{}
	}
	return Timer{
		ID:         message.GetId(),
		Namespace:  message.GetNamespace(),
		Key:        message.GetKey(),
		Deadline:   optionalTime(message.GetDeadline()),
		Payload:    message.GetPayload(),
		Repeat:     optionalDurationValue(message.GetRepeat()),
		TTL:        optionalDurationValue(message.GetTtl()),
		Remaining:  optionalDurationValue(message.GetRemaining()),
		FiredCount: message.GetFiredCount(),
		Cron:       message.GetCron(),
		TimeZone:   message.GetTimeZone(),
	}
}

func registrationFromProto(message *tickdpb.NewTimeoutResponse) *Registration {
	return &Registration{
		Timer:    timerFromProto(message.GetTimer()),
		Created:  message.GetCreated(),
		Replaced: message.GetReplaced(),
	}
}

func expirationFromProto(message *tickdpb.Expiration) *Expiration {
	return &Expiration{
		DeliveryID: message.GetDeliveryId(),
		Timer:      timerFromProto(message.GetTimer()),
		FiredAt:    optionalTime(message.GetFiredAt()),
		Attempt:    message.GetAttempt(),
		Late:       message.GetLate(),
		Lease:      message.GetLease(),
		TraceContext: TraceContext{
			Traceparent: message.GetTraceContext().GetTraceparent(),
			Tracestate:  message.GetTraceContext().GetTracestate(),
			Baggage:     message.GetTraceContext().GetBaggage(),
		},
	}
}
