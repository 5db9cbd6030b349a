package tickd

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tickd/tickd/clients/go/tickdpb"
)

// Register registers one timer. It is retried on UNAVAILABLE only when the spec has a Key
// (see RetryPolicy for why keyless registrations are not).
func (c *Client) Register(ctx context.Context, spec TimerSpec) (*Registration, error) {
	ctx = c.traced(ctx)
	request := &tickdpb.NewTimeoutRequest{Timer: c.specToProto(spec)}
	var response *tickdpb.NewTimeoutResponse
	err := c.call(ctx, "NewTimeout", spec.Key != "", func(ctx context.Context) (err error) {
		response, err = c.stub.NewTimeout(ctx, request)
		return err
	})
	if err != nil {
		return nil, err
	}
	return registrationFromProto(response), nil
}

// RegisterBatch registers several timers in one call. The answer has one BatchResult per
// spec, in order; an invalid item fails alone (its Err is an *Error), the others register.
// The error returned is for the call as a whole. Retried only when every spec has a Key.
func (c *Client) RegisterBatch(ctx context.Context, specs []TimerSpec) ([]BatchResult, error) {
	ctx = c.traced(ctx)
	request := &tickdpb.NewTimeoutsRequest{Timers: make([]*tickdpb.TimerSpec, len(specs))}
	allKeyed := true
	for i, spec := range specs {
		request.Timers[i] = c.specToProto(spec)
		allKeyed = allKeyed && spec.Key != ""
	}
	var response *tickdpb.NewTimeoutsResponse
	err := c.call(ctx, "NewTimeouts", allKeyed, func(ctx context.Context) (err error) {
		response, err = c.stub.NewTimeouts(ctx, request)
		return err
	})
	if err != nil {
		return nil, err
	}
	results := make([]BatchResult, len(response.GetResults()))
	for i, result := range response.GetResults() {
		if failure := result.GetError(); failure != nil {
			results[i].Err = newItemError(failure.GetCode(), failure.GetMessage())
		} else {
			results[i].Registration = registrationFromProto(result.GetRegistered())
		}
	}
	return results, nil
}

// Cancel cancels a pending timer. It answers true if the timer was pending and is now
// cancelled, false if it had already fired or been cancelled (by key, a timer no longer
// pending is NOT_FOUND instead).
func (c *Client) Cancel(ctx context.Context, ref Ref) (bool, error) {
	request := &tickdpb.CancelRequest{Timer: c.refToProto(ref)}
	var response *tickdpb.CancelResponse
	err := c.call(ctx, "Cancel", true, func(ctx context.Context) (err error) {
		response, err = c.stub.Cancel(ctx, request)
		return err
	})
	if err != nil {
		return false, err
	}
	return response.GetCancelled(), nil
}

// Get returns a pending timer, payload included (NOT_FOUND when it is not pending).
func (c *Client) Get(ctx context.Context, ref Ref) (*Timer, error) {
	request := &tickdpb.GetRequest{Timer: c.refToProto(ref)}
	var response *tickdpb.GetResponse
	err := c.call(ctx, "Get", true, func(ctx context.Context) (err error) {
		response, err = c.stub.Get(ctx, request)
		return err
	})
	if err != nil {
		return nil, err
	}
	timer := timerFromProto(response.GetTimer())
	return &timer, nil
}

// Touch is one heartbeat of a lease: its deadline becomes now + ttl. A ttl of 0 keeps the
// lease's own ttl; another value becomes its ttl from now on.
func (c *Client) Touch(ctx context.Context, ref Ref, ttl time.Duration) (*Timer, error) {
	request := &tickdpb.TouchRequest{Timer: c.refToProto(ref), Ttl: optionalDuration(ttl)}
	var response *tickdpb.TouchResponse
	err := c.call(ctx, "Touch", true, func(ctx context.Context) (err error) {
		response, err = c.stub.Touch(ctx, request)
		return err
	})
	if err != nil {
		return nil, err
	}
	timer := timerFromProto(response.GetTimer())
	return &timer, nil
}

// Reschedule says where a pending timer moves: exactly one of Delay (from now) and
// Deadline, and, with ReplacePayload, a new payload (an empty one included).
type Reschedule struct {
	Delay          time.Duration
	Deadline       time.Time
	ReplacePayload bool
	Payload        []byte
}

// Reschedule moves a pending timer's next firing. It answers the timer without its payload.
// Retried only with a Deadline: a retried Delay would be counted again from a later now.
func (c *Client) Reschedule(ctx context.Context, ref Ref, move Reschedule) (*Timer, error) {
	ctx = c.traced(ctx)
	request := &tickdpb.RescheduleRequest{Timer: c.refToProto(ref)}
	if move.Deadline.IsZero() {
		request.Delay = durationpb.New(move.Delay)
	} else {
		request.Deadline = timestamppb.New(move.Deadline)
	}
	if move.ReplacePayload {
		payload := move.Payload
		if payload == nil {
			payload = []byte{}
		}
		request.Payload = payload
	}
	var response *tickdpb.RescheduleResponse
	err := c.call(ctx, "Reschedule", !move.Deadline.IsZero(), func(ctx context.Context) (err error) {
		response, err = c.stub.Reschedule(ctx, request)
		return err
	})
	if err != nil {
		return nil, err
	}
	timer := timerFromProto(response.GetTimer())
	return &timer, nil
}

// AckResult is the answer to Ack.
type AckResult struct {
	Acknowledged uint32
	// Unknown lists the ids that were not awaiting an ack (already acknowledged, expired to
	// redelivery, or unknown, e.g. delivered before tickd restarted).
	Unknown []string
}

// Ack acknowledges deliveries (Expiration.DeliveryID) in the client's namespace. The answer
// counts those tickd acknowledged and lists the others as Unknown: never acknowledged by
// this call, they are delivered again (unless acknowledged already). The ids are sent as
// given, whatever became of the stream they came on.
func (c *Client) Ack(ctx context.Context, deliveryIDs ...string) (*AckResult, error) {
	request := &tickdpb.AckRequest{Namespace: c.options.namespace, DeliveryIds: deliveryIDs}
	var response *tickdpb.AckResponse
	err := c.call(ctx, "Ack", true, func(ctx context.Context) (err error) {
		response, err = c.stub.Ack(ctx, request)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &AckResult{Acknowledged: response.GetAcknowledged(), Unknown: response.GetUnknown()}, nil
}

// RedriveResult is the answer to Redrive.
type RedriveResult struct {
	Redriven uint32
	// NotDead lists the ids given that were not dead expirations of the namespace.
	NotDead []string
}

// Redrive sends dead expirations of the client's namespace back to delivery, their
// attempts counted afresh: the ones named (delivery ids from DeadExpirations), or all of
// them when none is named. Not retried (see RetryPolicy).
func (c *Client) Redrive(ctx context.Context, deliveryIDs ...string) (*RedriveResult, error) {
	request := &tickdpb.RedriveRequest{Namespace: c.options.namespace, DeliveryIds: deliveryIDs}
	var response *tickdpb.RedriveResponse
	err := c.call(ctx, "Redrive", false, func(ctx context.Context) (err error) {
		response, err = c.stub.Redrive(ctx, request)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &RedriveResult{Redriven: response.GetRedriven(), NotDead: response.GetNotDead()}, nil
}
