package tickd_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tickd/tickd/clients/go/tickd"
)

// lateHandlerRecorder holds the first delivery of the timer keyed "held" in its handler
// until releaseHeld closes, and every other delivery until releaseOthers closes, recording
// deliveries and what OnAck was told about each (by the *Expiration the subscriber passes to
// both, which tells deliveries apart even if a tickd repeated a delivery id).
type lateHandlerRecorder struct {
	mu            sync.Mutex
	delivered     []*tickd.Expiration
	acks          map[*tickd.Expiration][]tickd.AckEvent
	changed       chan struct{}
	releaseHeld   chan struct{}
	releaseOthers chan struct{}
	release       sync.Once
}

func newLateHandlerRecorder() *lateHandlerRecorder {
	return &lateHandlerRecorder{
		acks: map[*tickd.Expiration][]tickd.AckEvent{}, changed: make(chan struct{}, 1),
		releaseHeld: make(chan struct{}), releaseOthers: make(chan struct{}),
	}
}

func (r *lateHandlerRecorder) handle(ctx context.Context, expiration *tickd.Expiration) error {
	r.mu.Lock()
	firstOfHeld := expiration.Timer.Key == "held" && len(r.ofLocked("held")) == 0
	r.delivered = append(r.delivered, expiration)
	r.mu.Unlock()
	r.signal()
	gate := r.releaseOthers
	if firstOfHeld {
		gate = r.releaseHeld
	}
	select {
	case <-gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *lateHandlerRecorder) onAck(event tickd.AckEvent) {
	r.mu.Lock()
	r.acks[event.Expiration] = append(r.acks[event.Expiration], event)
	r.mu.Unlock()
	r.signal()
}

func (r *lateHandlerRecorder) signal() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *lateHandlerRecorder) ofLocked(key string) []*tickd.Expiration {
	var found []*tickd.Expiration
	for _, expiration := range r.delivered {
		if expiration.Timer.Key == key {
			found = append(found, expiration)
		}
	}
	return found
}

func (r *lateHandlerRecorder) of(key string) []*tickd.Expiration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ofLocked(key)
}

func (r *lateHandlerRecorder) acksOf(expiration *tickd.Expiration) []tickd.AckEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]tickd.AckEvent(nil), r.acks[expiration]...)
}

// releaseAll opens both gates (once), so that no handler outlives a failed test.
func (r *lateHandlerRecorder) releaseAll() {
	r.release.Do(func() {
		select {
		case <-r.releaseHeld:
		default:
			close(r.releaseHeld)
		}
		close(r.releaseOthers)
	})
}

// until waits for condition, re-checking it after each delivery or ack.
func (r *lateHandlerRecorder) until(t *testing.T, what string, condition func() bool) {
	t.Helper()
	deadline := time.After(eventTimeout)
	for !condition() {
		select {
		case <-r.changed:
		case <-deadline:
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("timed out waiting for %s; delivered %d expirations, acks %v", what, len(r.delivered), r.acks)
		}
	}
}

// A handler still running when tickd is restarted (same data directory; SIGTERM, or SIGKILL)
// finishes once the subscriber has reconnected: its ack is not sent (OnAck is told
// StreamEnded, not Acknowledged), its expiration comes again with Attempt 2 or more, and no
// other expiration is settled in its place: those registered after the restart, held in
// their handlers meanwhile, are each acknowledged by their own ack.
func TestHandlerFinishingAfterRestartIsNotAcknowledged(t *testing.T) {
	for _, signal := range []string{"SIGTERM", "SIGKILL"} {
		signal := signal
		t.Run(signal, func(t *testing.T) { testHandlerFinishingAfterRestart(t, signal) })
	}
}

func testHandlerFinishingAfterRestart(t *testing.T, signal string) {
	server := startTickd(t, "--sync", "always")
	client := server.dial(t, tickd.WithNamespace("late-handler"), tickd.WithRetry(fastRetry))
	recorder := newLateHandlerRecorder()
	subscriber := client.NewSubscriber(recorder.handle, tickd.SubscriberOptions{
		MaxInFlight: 8, AckTimeout: time.Minute, Backoff: fastReconnect, OnAck: recorder.onAck,
	})
	done := runInBackground(t, subscriber.Run, subscriber.Stop)
	defer recorder.releaseAll()

	registerAll(t, client, tickd.TimerSpec{Key: "held", Deadline: time.Now()})
	recorder.until(t, "the held handler to start", func() bool { return len(recorder.of("held")) == 1 })
	first := recorder.of("held")[0]
	if first.Attempt != 1 {
		t.Fatalf("first delivery: attempt %d", first.Attempt)
	}

	if signal == "SIGKILL" {
		server.Crash()
	} else {
		server.Stop()
	}
	server.Start()
	after := []string{"after-1", "after-2", "after-3"}
	for _, key := range after {
		registerAll(t, client, tickd.TimerSpec{Key: key, Deadline: time.Now()})
	}
	// The held expiration again (on the new stream: the subscriber reconnected) and the new
	// ones, all in their handlers, each awaiting its own ack.
	recorder.until(t, "the held expiration again and every later one", func() bool {
		if len(recorder.of("held")) < 2 {
			return false
		}
		for _, key := range after {
			if len(recorder.of(key)) == 0 {
				return false
			}
		}
		return true
	})

	close(recorder.releaseHeld)
	recorder.until(t, "the late handler's outcome", func() bool { return len(recorder.acksOf(first)) > 0 })
	if events := recorder.acksOf(first); len(events) != 1 || events[0].Acknowledged || !events[0].StreamEnded || events[0].Err != nil {
		t.Fatalf("the late handler's ack: %+v, want one event with StreamEnded (not sent)", events)
	}

	recorder.releaseAll()
	others := []*tickd.Expiration{recorder.of("held")[1]}
	for _, key := range after {
		others = append(others, recorder.of(key)[0])
	}
	recorder.until(t, "the acks of the held expiration's second delivery and of the later ones", func() bool {
		for _, expiration := range others {
			if len(recorder.acksOf(expiration)) == 0 {
				return false
			}
		}
		return true
	})
	for _, expiration := range others {
		if events := recorder.acksOf(expiration); len(events) != 1 || !events[0].Acknowledged || events[0].StreamEnded {
			t.Errorf("%s (attempt %d, delivery %s) not acknowledged by its own ack: %+v",
				expiration.Timer.Key, expiration.Attempt, expiration.DeliveryID, events)
		}
	}
	waitFor(t, "nothing pending or dead in the namespace", func() bool {
		counts, err := client.Counts(testContext(t))
		return err == nil && counts.Pending == 0 && counts.Dead == 0
	})
	again := others[0]
	if again.Attempt < 2 {
		t.Errorf("attempts do not survive a %s restart: the held expiration came again with attempt %d", signal, again.Attempt)
	}
	if again.DeliveryID == first.DeliveryID {
		t.Errorf("delivery id %s repeated across the restart", first.DeliveryID)
	}
	subscriber.Stop()
	if err := <-done; err != nil {
		t.Fatalf("Run after Stop: %v", err)
	}
}
