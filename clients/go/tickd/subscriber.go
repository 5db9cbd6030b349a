package tickd

import (
	"context"
	"log"
	"sync"
	"time"

	"github.com/tickd/tickd/clients/go/tickdpb"
)

// Handler handles one expiration. Returning nil acknowledges it (unless ManualAck); an
// error leaves it unacknowledged, so tickd delivers it again after the ack timeout (with the
// next Attempt), until its attempts run out and it is kept as dead. A handler that returns
// nil after the stream its expiration came on has ended (the subscriber reconnected
// meanwhile, e.g. across a tickd restart) gets no ack either: tickd took that delivery back
// when the stream ended and delivers it again with a higher Attempt (OnAck is told, with
// StreamEnded set).
type Handler func(ctx context.Context, expiration *Expiration) error

// SubscriberOptions configure a Subscriber; the zero value is a sharing subscriber running
// one handler at a time and acknowledging after each handler returns nil.
type SubscriberOptions struct {
	// MaxInFlight is how many handlers may run at once (default 1). The subscriber reads no
	// further expiration off the stream while that many are running.
	MaxInFlight int
	// ManualAck leaves acknowledging to the handler's caller (Client.Ack with DeliveryID,
	// whose AckResult lists the ids tickd no longer awaited as Unknown).
	ManualAck bool
	// Observer receives a copy of every expiration without sharing or acknowledging.
	Observer bool
	// AutoAck is at-most-once delivery: tickd counts each expiration acknowledged once sent.
	AutoAck bool
	// AckTimeout and MaxUnacked override tickd's defaults (--ack-timeout) when set.
	AckTimeout time.Duration
	MaxUnacked uint32
	// Backoff paces resubscribing after the stream broke (default DefaultReconnectBackoff).
	Backoff Backoff

	// OnSubscribed is told each time the stream is open (at start and after each reconnect).
	OnSubscribed func()
	// OnStopping is told once when the run has begun to end (Stop, ctx ended, or tickd
	// refused the stream for good), before it waits for the handlers in flight: Stop (or
	// Run) returns only after they have finished.
	OnStopping func()
	// OnStreamError is told when the stream broke, and how long until the next attempt.
	OnStreamError func(err error, retryIn time.Duration)
	// OnHandlerError is told when a handler returned an error (its expiration stays unacked).
	// Without it, the error is written to the standard logger (log.Printf: stderr unless
	// the program redirected it), so that a failing handler is never silent.
	OnHandlerError func(expiration *Expiration, err error)
	// OnAck is told the outcome of each acknowledgement the subscriber sent.
	OnAck func(AckEvent)
}

// AckEvent is the outcome of the subscriber's acknowledgement of one expiration.
type AckEvent struct {
	Expiration *Expiration
	// Acknowledged: tickd took the ack. False with a nil Err when tickd answered the
	// delivery id as unknown, no longer awaited (its ack timeout had passed, say), or when
	// StreamEnded: either way it is delivered again.
	Acknowledged bool
	// StreamEnded: the handler returned after the stream its expiration came on had ended,
	// so no ack was sent. tickd takes back the unacknowledged deliveries of a stream that
	// ends (and across a restart their ids name nothing any more); the expiration comes
	// again, on the new stream or to another subscriber, with a higher Attempt.
	StreamEnded bool
	Err         error
}

// Subscriber receives the client's namespace's expirations over one Subscribe stream,
// hands each to the handler, and reopens the stream with exponential back-off and jitter
// when it breaks. Run it with Run; Stop ends it gracefully.
type Subscriber struct {
	client   *Client
	handler  Handler
	options  SubscriberOptions
	run      lifecycle
	handlers sync.WaitGroup
	slots    chan struct{}
	stopping sync.Once
}

// NewSubscriber prepares a subscriber of the client's namespace; nothing happens until Run.
func (c *Client) NewSubscriber(handler Handler, options SubscriberOptions) *Subscriber {
	if options.MaxInFlight < 1 {
		options.MaxInFlight = 1
	}
	return &Subscriber{
		client: c, handler: handler, options: options,
		run: newLifecycle(), slots: make(chan struct{}, options.MaxInFlight),
	}
}

// Run subscribes and handles expirations until Stop is called (it then returns nil), ctx
// ends (it returns ctx's error), or tickd refuses the subscription for good
// (UNAUTHENTICATED, PERMISSION_DENIED, INVALID_ARGUMENT, UNIMPLEMENTED: it returns that
// *Error); other stream errors are retried. Either way it returns only after the handlers in flight
// have finished and the stream is closed. Handlers get ctx: Stop lets them finish, while
// cancelling ctx tells them to hurry.
func (s *Subscriber) Run(ctx context.Context) error {
	if err := s.run.begin(); err != nil {
		if err == errStoppedBeforeRun {
			return nil
		}
		return err
	}
	defer s.run.end()
	runCtx, cancel := s.run.runContext(ctx)
	defer cancel()
	failures := 0
	for runCtx.Err() == nil {
		established, err := s.consumeStream(ctx, runCtx)
		if runCtx.Err() != nil {
			break
		}
		if permanentStreamCodes[codeOf(err)] {
			s.waitForHandlers()
			return err
		}
		if established {
			failures = 0
		}
		failures++
		retryIn := s.options.Backoff.Delay(failures)
		if s.options.OnStreamError != nil {
			s.options.OnStreamError(err, retryIn)
		}
		_ = sleepContext(runCtx, retryIn)
	}
	s.waitForHandlers()
	if s.run.stopRequested() {
		return nil
	}
	return ctx.Err()
}

// Stop stops reading expirations, waits for the handlers in flight (and their acks), closes
// the stream, and returns once Run has returned. Expirations read but not yet handled stay
// unacknowledged and are delivered again.
func (s *Subscriber) Stop() { s.run.requestStop() }

// received is one result of the stream's Recv.
type received struct {
	response *tickdpb.SubscribeResponse
	err      error
}

// consumeStream holds one Subscribe stream until it breaks (returning the error) or the run
// ends (returning once the handlers finished, then closing the stream). established says
// whether tickd accepted the subscription, which resets the back-off.
func (s *Subscriber) consumeStream(ctx, runCtx context.Context) (established bool, err error) {
	// The stream outlives runCtx: it is closed only after the handlers in flight have
	// finished, so that tickd does not hand their expirations to another subscriber meanwhile.
	streamCtx, closeStream := context.WithCancel(detachedContext{ctx})
	defer closeStream()
	// Until tickd has accepted the subscription there is no handler to wait for: the end of
	// the run closes the stream at once (a tickd that never answers must not hold up Stop).
	accepted := make(chan struct{})
	markAccepted := func() {
		select {
		case <-accepted:
		default:
			close(accepted)
		}
	}
	defer markAccepted()
	// Closed once this stream has ended (by the receiver as soon as Recv fails, even while
	// dispatch waits for a free slot): a handler of one of its expirations that returns later
	// sends no ack.
	streamEnded := make(chan struct{})
	var endOnce sync.Once
	endStream := func() { endOnce.Do(func() { close(streamEnded) }) }
	defer endStream()
	go func() {
		select {
		case <-runCtx.Done():
			closeStream()
		case <-accepted:
		}
	}()
	stream, err := s.client.stub.Subscribe(streamCtx, s.request())
	if err != nil {
		return false, newError(err)
	}
	header, err := stream.Header()
	if err != nil {
		return false, newError(err)
	}
	if header == nil {
		// A trailers-only answer: tickd refused the subscription; Recv has its status.
		_, err := stream.Recv()
		return false, newError(err)
	}
	markAccepted()
	if s.options.OnSubscribed != nil {
		s.options.OnSubscribed()
	}
	messages := make(chan received)
	receiverDone := make(chan struct{})
	go func() {
		defer close(receiverDone)
		for {
			response, err := stream.Recv()
			if err != nil {
				endStream()
			}
			select {
			case messages <- received{response, err}:
			case <-streamCtx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() { closeStream(); <-receiverDone }()
	for {
		select {
		case <-runCtx.Done():
			s.waitForHandlers()
			return true, nil
		case message := <-messages:
			if message.err != nil {
				return true, newError(message.err)
			}
			if !s.dispatch(ctx, runCtx, expirationFromProto(message.response.GetExpiration()), streamEnded) {
				s.waitForHandlers()
				return true, nil
			}
		}
	}
}

// dispatch starts a handler once a slot is free; false if the run ended while waiting. An
// expiration whose stream ended meanwhile is dropped if tickd awaited its ack: tickd took it
// back and delivers it again. (Observers' copies and AutoAck deliveries do not come again.)
func (s *Subscriber) dispatch(ctx, runCtx context.Context, expiration *Expiration, streamEnded <-chan struct{}) bool {
	select {
	case s.slots <- struct{}{}:
	case <-runCtx.Done():
		return false
	}
	if !s.options.Observer && !s.options.AutoAck {
		select {
		case <-streamEnded:
			<-s.slots
			return true
		default:
		}
	}
	s.handlers.Add(1)
	go func() {
		defer func() { <-s.slots; s.handlers.Done() }()
		s.handle(ctx, expiration, streamEnded)
	}()
	return true
}

func (s *Subscriber) handle(ctx context.Context, expiration *Expiration, streamEnded <-chan struct{}) {
	handlerCtx, endSpan := s.startHandler(ctx, expiration)
	err := s.handler(handlerCtx, expiration)
	endSpan(err)
	if err != nil {
		if s.options.OnHandlerError != nil {
			s.options.OnHandlerError(expiration, err)
		} else {
			log.Printf("tickd: the handler failed on timer %s (delivery %s, attempt %d); it stays unacknowledged and comes again: %v",
				expiration.Timer.ID, expiration.DeliveryID, expiration.Attempt, err)
		}
		return
	}
	if s.options.ManualAck || s.options.Observer || s.options.AutoAck {
		return
	}
	select {
	case <-streamEnded:
		// tickd took the delivery back when its stream ended (after a restart its id names
		// nothing; an older tickd, numbering deliveries from 1 at each start, would take it
		// for another): an ack now would mean nothing, so none is sent.
		if s.options.OnAck != nil {
			s.options.OnAck(AckEvent{Expiration: expiration, StreamEnded: true})
		}
		return
	default:
	}
	// The ack is sent even when ctx has just been cancelled: the work is done, and an ack
	// saves a redelivery.
	result, err := s.client.Ack(detachedContext{ctx}, expiration.DeliveryID)
	if s.options.OnAck != nil {
		s.options.OnAck(AckEvent{Expiration: expiration, Acknowledged: err == nil && result.Acknowledged == 1, Err: err})
	}
}

func (s *Subscriber) request() *tickdpb.SubscribeRequest {
	request := &tickdpb.SubscribeRequest{
		Namespace:  s.client.options.namespace,
		MaxUnacked: s.options.MaxUnacked,
		AutoAck:    s.options.AutoAck,
		AckTimeout: optionalDuration(s.options.AckTimeout),
	}
	if s.options.Observer {
		request.Mode = tickdpb.SubscribeRequest_MODE_OBSERVER
	}
	return request
}

// waitForHandlers waits for the handlers in flight, once the run is ending (telling
// OnStopping first, once).
func (s *Subscriber) waitForHandlers() {
	s.stopping.Do(func() {
		if s.options.OnStopping != nil {
			s.options.OnStopping()
		}
	})
	s.handlers.Wait()
}
