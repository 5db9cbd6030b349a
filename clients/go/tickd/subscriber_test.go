package tickd_test

import (
	"context"
	"errors"
	"log"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tickd/tickd/clients/go/tickd"
)

// fastReconnect keeps tests quick: reconnect attempts every 50ms to 500ms.
var fastReconnect = tickd.Backoff{Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond, Multiplier: 2}

// fastRetry retries idempotent calls for about a minute at most.
var fastRetry = tickd.RetryPolicy{MaxAttempts: 200, Backoff: fastReconnect}

// runInBackground runs r.Run and returns its result channel; the test stops it at the end.
func runInBackground(t *testing.T, run func(context.Context) error, stop func()) <-chan error {
	result := make(chan error, 1)
	go func() { result <- run(context.Background()) }()
	t.Cleanup(stop)
	return result
}

func registerAll(t *testing.T, client *tickd.Client, specs ...tickd.TimerSpec) []string {
	t.Helper()
	ids := make([]string, len(specs))
	for i, spec := range specs {
		registered, err := client.Register(testContext(t), spec)
		if err != nil {
			t.Fatalf("register %+v: %v", spec, err)
		}
		ids[i] = registered.Timer.ID
	}
	return ids
}

func awaitAllAcked(t *testing.T, recorder *ackRecorder, ids []string) {
	t.Helper()
	deadline := time.After(eventTimeout)
	for !recorder.allAcked(ids) {
		select {
		case <-recorder.changed:
		case <-deadline:
			t.Fatalf("not handled and acknowledged: %v (ack errors: %v)", recorder.missing(ids), recorder.failures)
		}
	}
}

func assertNothingLeft(t *testing.T, client *tickd.Client) {
	t.Helper()
	counts, err := client.Counts(testContext(t))
	if err != nil || counts.Pending != 0 || counts.Dead != 0 {
		t.Fatalf("left in the namespace: %+v, %v", counts, err)
	}
}

func TestSubscriberAcrossRestartOfDurableTickd(t *testing.T) {
	server := startTickd(t, "--sync", "always")
	client := server.dial(t, tickd.WithNamespace("restart"), tickd.WithRetry(fastRetry))
	recorder := newAckRecorder()
	subscribed := make(chan struct{}, 10)
	var late int32
	subscriber := client.NewSubscriber(func(_ context.Context, expiration *tickd.Expiration) error {
		if expiration.Late {
			atomic.AddInt32(&late, 1)
		}
		recorder.onHandled(expiration)
		return nil
	}, tickd.SubscriberOptions{
		MaxInFlight: 4, Backoff: fastReconnect, OnAck: recorder.onAck,
		OnSubscribed: func() { subscribed <- struct{}{} },
	})
	done := runInBackground(t, subscriber.Run, subscriber.Stop)
	await(t, "the subscription", subscribed)

	before := registerAll(t, client,
		tickd.TimerSpec{Key: "before-1", Delay: 50 * time.Millisecond},
		tickd.TimerSpec{Delay: 100 * time.Millisecond, Payload: []byte("before-2")})
	// Due a few seconds on: after the restart below, as tickd restarts in well under that
	// (if not, they fire late at start-up and must be handled all the same).
	across := registerAll(t, client,
		tickd.TimerSpec{Key: "across-1", Delay: 4 * time.Second},
		tickd.TimerSpec{Key: "across-2", Delay: 4 * time.Second, Payload: []byte("x")},
		tickd.TimerSpec{Delay: 5 * time.Second})
	awaitAllAcked(t, recorder, before)

	server.Stop()
	server.Start()
	await(t, "the subscription after the restart", subscribed)
	after := registerAll(t, client,
		tickd.TimerSpec{Key: "after-1", Delay: 10 * time.Millisecond},
		tickd.TimerSpec{Delay: 200 * time.Millisecond},
		tickd.TimerSpec{Key: "after-3", Deadline: time.Now()})

	awaitAllAcked(t, recorder, append(append(append([]string{}, before...), across...), after...))
	assertNothingLeft(t, client)
	t.Logf("%d of the expirations were delivered late (their deadline passed while tickd was down)", atomic.LoadInt32(&late))
	subscriber.Stop()
	if err := <-done; err != nil {
		t.Fatalf("Run after Stop: %v", err)
	}
}

func TestSubscriberHonoursMaxInFlight(t *testing.T) {
	server := startTickd(t)
	client := server.dial(t, tickd.WithNamespace("concurrency"))
	const limit, total = 3, 12
	var inFlight, maxInFlight int64
	entered := make(chan struct{}, total)
	release := make(chan struct{})
	recorder := newAckRecorder()
	subscriber := client.NewSubscriber(func(_ context.Context, expiration *tickd.Expiration) error {
		now := atomic.AddInt64(&inFlight, 1)
		for seen := atomic.LoadInt64(&maxInFlight); now > seen && !atomic.CompareAndSwapInt64(&maxInFlight, seen, now); {
			seen = atomic.LoadInt64(&maxInFlight)
		}
		entered <- struct{}{}
		<-release
		atomic.AddInt64(&inFlight, -1)
		recorder.onHandled(expiration)
		return nil
	}, tickd.SubscriberOptions{MaxInFlight: limit, OnAck: recorder.onAck})
	done := runInBackground(t, subscriber.Run, subscriber.Stop)

	specs := make([]tickd.TimerSpec, total)
	for i := range specs {
		specs[i] = tickd.TimerSpec{Deadline: time.Now()}
	}
	ids := registerAll(t, client, specs...)
	for i := 0; i < limit; i++ {
		await(t, "a handler to start", entered)
	}
	close(release)
	awaitAllAcked(t, recorder, ids)
	if got := atomic.LoadInt64(&maxInFlight); got != limit {
		t.Fatalf("at most %d handlers ran at once, want exactly the limit %d", got, limit)
	}
	assertNothingLeft(t, client)
	subscriber.Stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestSubscriberManualAck(t *testing.T) {
	server := startTickd(t)
	client := server.dial(t, tickd.WithNamespace("manual"))
	received := make(chan *tickd.Expiration, 1)
	subscriber := client.NewSubscriber(func(_ context.Context, expiration *tickd.Expiration) error {
		received <- expiration
		return nil
	}, tickd.SubscriberOptions{ManualAck: true})
	runInBackground(t, subscriber.Run, subscriber.Stop)
	ids := registerAll(t, client, tickd.TimerSpec{Key: "by-hand", Deadline: time.Now(), Payload: []byte("p")})
	expiration := await(t, "the expiration", received)
	if expiration.Timer.ID != ids[0] || expiration.Attempt != 1 || string(expiration.Timer.Payload) != "p" {
		t.Fatalf("expiration: %+v", expiration)
	}
	// Had the subscriber acknowledged it, this ack would come back unknown.
	result, err := client.Ack(testContext(t), expiration.DeliveryID)
	if err != nil || result.Acknowledged != 1 || len(result.Unknown) != 0 {
		t.Fatalf("manual ack: %+v, %v", result, err)
	}
	again, err := client.Ack(testContext(t), expiration.DeliveryID)
	if err != nil || again.Acknowledged != 0 || len(again.Unknown) != 1 {
		t.Fatalf("second ack: %+v, %v", again, err)
	}
	assertNothingLeft(t, client)
}

func TestSubscriberStopWaitsForHandlersInFlight(t *testing.T) {
	server := startTickd(t)
	client := server.dial(t, tickd.WithNamespace("stopping"))
	entered, release := make(chan struct{}, 1), make(chan struct{})
	var handlerFinished int32
	acks := make(chan tickd.AckEvent, 1)
	stopping := make(chan struct{})
	subscriber := client.NewSubscriber(func(context.Context, *tickd.Expiration) error {
		entered <- struct{}{}
		<-release
		atomic.StoreInt32(&handlerFinished, 1)
		return nil
	}, tickd.SubscriberOptions{
		OnAck:      func(event tickd.AckEvent) { acks <- event },
		OnStopping: func() { close(stopping) },
	})
	done := runInBackground(t, subscriber.Run, subscriber.Stop)
	registerAll(t, client, tickd.TimerSpec{Deadline: time.Now()})
	await(t, "the handler", entered)

	stopped := make(chan bool, 1)
	go func() {
		subscriber.Stop()
		stopped <- atomic.LoadInt32(&handlerFinished) == 1
	}()
	// Stop is under way (the run has ended and waits for the handlers) while the handler is
	// still held: Stop must not have returned, nor Run.
	await(t, "Stop to begin", stopping)
	select {
	case <-stopped:
		t.Fatal("Stop returned while the handler in flight was still running")
	case err := <-done:
		t.Fatalf("Run returned (%v) while the handler in flight was still running", err)
	default:
	}
	close(release)
	if finished := await(t, "Stop to return", stopped); !finished {
		t.Fatal("Stop returned before the handler in flight finished")
	}
	if event := await(t, "the ack", acks); !event.Acknowledged || event.Err != nil {
		t.Fatalf("the handler's ack: %+v", event)
	}
	if err := await(t, "Run to return", done); err != nil {
		t.Fatalf("Run after Stop: %v", err)
	}
	if err := subscriber.Run(context.Background()); !errors.Is(err, tickd.ErrAlreadyRunning) {
		t.Fatalf("Run a second time: %v", err)
	}
	assertNothingLeft(t, client)
}

func TestDeadExpirationsListedAndRedriven(t *testing.T) {
	server := startTickd(t, "--max-attempts", "2", "--ack-timeout", "500ms")
	client := server.dial(t, tickd.WithNamespace("dead"))
	var attemptsMu sync.Mutex
	attempts := map[uint32]bool{}
	failing := client.NewSubscriber(func(_ context.Context, expiration *tickd.Expiration) error {
		attemptsMu.Lock()
		attempts[expiration.Attempt] = true
		attemptsMu.Unlock()
		return errors.New("this handler always fails")
	}, tickd.SubscriberOptions{MaxInFlight: 2})
	runInBackground(t, failing.Run, failing.Stop)
	ids := registerAll(t, client, tickd.TimerSpec{Key: "doomed", Deadline: time.Now(), Payload: []byte("d")})

	waitFor(t, "the expiration to be dead", func() bool {
		counts, err := client.Counts(testContext(t))
		return err == nil && counts.Dead == 1
	})
	failing.Stop()
	attemptsMu.Lock()
	if !attempts[1] || !attempts[2] {
		t.Fatalf("attempts seen by the failing handler: %v", attempts)
	}
	attemptsMu.Unlock()
	dead, err := client.DeadExpirations(testContext(t))
	if err != nil || len(dead) != 1 || dead[0].Timer.ID != ids[0] || dead[0].DeliveryID == "" {
		t.Fatalf("dead expirations: %+v, %v", dead, err)
	}

	redriven, err := client.Redrive(testContext(t), dead[0].DeliveryID, "not-a-delivery")
	if err != nil || redriven.Redriven != 1 || len(redriven.NotDead) != 1 || redriven.NotDead[0] != "not-a-delivery" {
		t.Fatalf("redrive: %+v, %v", redriven, err)
	}
	recorder := newAckRecorder()
	firstAttempt := make(chan uint32, 1)
	healthy := client.NewSubscriber(func(_ context.Context, expiration *tickd.Expiration) error {
		recorder.onHandled(expiration)
		select {
		case firstAttempt <- expiration.Attempt:
		default:
		}
		return nil
	}, tickd.SubscriberOptions{OnAck: recorder.onAck})
	runInBackground(t, healthy.Run, healthy.Stop)
	awaitAllAcked(t, recorder, ids)
	if attempt := <-firstAttempt; attempt != 1 {
		t.Fatalf("a redriven expiration's attempts start afresh; got attempt %d", attempt)
	}
	assertNothingLeft(t, client)
}

func TestObserverReceivesCopiesWithoutAcking(t *testing.T) {
	server := startTickd(t)
	client := server.dial(t, tickd.WithNamespace("observed"))
	observed := make(chan *tickd.Expiration, 10)
	observerSubscribed := make(chan struct{}, 1)
	observer := client.NewSubscriber(func(_ context.Context, expiration *tickd.Expiration) error {
		observed <- expiration
		return nil
	}, tickd.SubscriberOptions{Observer: true, OnSubscribed: func() { observerSubscribed <- struct{}{} },
		OnAck: func(event tickd.AckEvent) { t.Errorf("an observer acknowledged %+v", event) }})
	runInBackground(t, observer.Run, observer.Stop)
	await(t, "the observer's subscription", observerSubscribed)

	recorder := newAckRecorder()
	sharing := client.NewSubscriber(func(_ context.Context, expiration *tickd.Expiration) error {
		recorder.onHandled(expiration)
		return nil
	}, tickd.SubscriberOptions{OnAck: recorder.onAck})
	runInBackground(t, sharing.Run, sharing.Stop)
	ids := registerAll(t, client, tickd.TimerSpec{Key: "watched", Deadline: time.Now()})
	awaitAllAcked(t, recorder, ids)
	if observedCopy := await(t, "the observer's copy", observed); observedCopy.Timer.ID != ids[0] {
		t.Fatalf("observer saw %+v", observedCopy)
	}
	assertNothingLeft(t, client)
}

func TestStopReturnsWhileTheServerNeverAnswers(t *testing.T) {
	address := startHungServer(t)
	// Told when a stream is being opened, i.e. when Run is waiting on the hung server.
	opening := make(chan string, 100)
	interceptor := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		opening <- method
		return streamer(ctx, desc, cc, method, opts...)
	}
	client, err := tickd.Dial(testContext(t), address, tickd.WithDialOptions(grpc.WithStreamInterceptor(interceptor)))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	subscriber := client.NewSubscriber(func(context.Context, *tickd.Expiration) error { return nil }, tickd.SubscriberOptions{})
	keeper := client.NewLeaseKeeper(tickd.LeaseKeeperOptions{})
	keeper.Add(tickd.ByKey("lease"), time.Second)
	subscriberDone := runInBackground(t, subscriber.Run, subscriber.Stop)
	keeperDone := runInBackground(t, keeper.Run, keeper.Stop)
	for opened := map[string]bool{}; len(opened) < 2; {
		opened[await(t, "both streams to be opening", opening)] = true
	}
	stopped := make(chan struct{})
	go func() {
		subscriber.Stop()
		keeper.Stop()
		close(stopped)
	}()
	await(t, "Stop to return", stopped)
	if err := await(t, "the subscriber's Run", subscriberDone); err != nil {
		t.Fatal(err)
	}
	if err := await(t, "the keeper's Run", keeperDone); err != nil {
		t.Fatal(err)
	}
}

// startHungServer is a gRPC server that takes every call and never answers it (not even
// headers): a hung tickd, as seen from a client. It returns its address.
func startHungServer(t *testing.T) string {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Handlers wait for the end of the test, not for their call's context: ending with the
	// deadline the client sent (grpc-timeout) would be an answer.
	testOver := make(chan struct{})
	hung := grpc.NewServer(grpc.UnknownServiceHandler(func(interface{}, grpc.ServerStream) error {
		<-testOver
		return nil
	}))
	go func() { _ = hung.Serve(listener) }()
	t.Cleanup(func() {
		close(testOver)
		hung.Stop()
	})
	return listener.Addr().String()
}

// lineWriter hands each write (one log line) to a channel.
type lineWriter chan string

func (w lineWriter) Write(p []byte) (int, error) {
	select {
	case w <- string(p):
	default: // a test reads what it needs; the rest is dropped rather than blocking the logger
	}
	return len(p), nil
}

func TestAFailingHandlerWithoutAHookIsLogged(t *testing.T) {
	server := startTickd(t)
	client := server.dial(t, tickd.WithNamespace("loud"))
	lines := make(lineWriter, 16)
	log.SetOutput(lines)
	t.Cleanup(func() { log.SetOutput(os.Stderr) })
	failing := client.NewSubscriber(func(_ context.Context, _ *tickd.Expiration) error {
		return errors.New("this handler fails loudly")
	}, tickd.SubscriberOptions{})
	runInBackground(t, failing.Run, failing.Stop)
	ids := registerAll(t, client, tickd.TimerSpec{Deadline: time.Now()})
	ctx := testContext(t)
	for {
		select {
		case line := <-lines:
			if !strings.Contains(line, "handler failed") {
				continue // something else logged meanwhile
			}
			if !strings.Contains(line, "handler failed on timer "+ids[0]) || !strings.Contains(line, "attempt 1") ||
				!strings.Contains(line, "this handler fails loudly") {
				t.Fatalf("logged: %q", line)
			}
			return
		case <-ctx.Done():
			t.Fatal("the handler's failure was never logged")
		}
	}
}
