package tickd_test

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tickd/tickd/clients/go/tickd"
)

func TestIdempotentCallsRetriedWhileTickdIsDown(t *testing.T) {
	server := startTickd(t)
	retried := make(chan string, 1000)
	policy := fastRetry
	policy.OnRetry = func(method string, attempt int, err error) { retried <- method }
	client := server.dial(t, tickd.WithNamespace("retry"), tickd.WithRetry(policy))
	registerAll(t, client, tickd.TimerSpec{Key: "warm-up", Delay: time.Hour})
	server.Stop()

	_, err := client.Register(testContext(t), tickd.TimerSpec{Delay: time.Hour})
	assertCode(t, err, codes.Unavailable)
	if len(retried) != 0 {
		t.Fatalf("a keyless registration was retried (%s)", <-retried)
	}

	type outcome struct {
		registration *tickd.Registration
		err          error
	}
	keyed, got := make(chan outcome, 1), make(chan error, 1)
	go func() {
		registration, err := client.Register(testContext(t), tickd.TimerSpec{Key: "during-outage", Delay: time.Hour})
		keyed <- outcome{registration, err}
	}()
	go func() {
		_, err := client.Get(testContext(t), tickd.ByKey("warm-up"))
		got <- err
	}()
	seen := map[string]bool{}
	for !seen["NewTimeout"] || !seen["Get"] {
		seen[await(t, "retries while tickd is down", retried)] = true
	}
	server.Start()

	result := await(t, "the keyed registration", keyed)
	if result.err != nil || !result.registration.Created {
		t.Fatalf("keyed registration across the outage: %+v, %v", result.registration, result.err)
	}
	if err := await(t, "the get", got); err != nil {
		t.Fatalf("get across the outage: %v", err)
	}
	if cancelled, err := client.Cancel(testContext(t), tickd.ByKey("during-outage")); err != nil || !cancelled {
		t.Fatalf("cancel after the outage: %v, %v", cancelled, err)
	}
}

func TestRetriesGiveUpAfterMaxAttempts(t *testing.T) {
	server := startTickd(t)
	attempts := 0
	client := server.dial(t, tickd.WithRetry(tickd.RetryPolicy{
		MaxAttempts: 3,
		Backoff:     tickd.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond},
		OnRetry:     func(string, int, error) { attempts++ },
	}))
	server.Stop()
	_, err := client.Get(testContext(t), tickd.ByKey("anything"))
	assertCode(t, err, codes.Unavailable)
	if attempts != 2 {
		t.Fatalf("%d retries, want 2 (3 attempts)", attempts)
	}
}

func TestCallTimeoutBoundsEachCall(t *testing.T) {
	client, err := tickd.Dial(testContext(t), startHungServer(t),
		tickd.WithCallTimeout(100*time.Millisecond), tickd.WithRetry(tickd.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	_, err = client.Get(testContext(t), tickd.ByKey("anything"))
	assertCode(t, err, codes.DeadlineExceeded)
}
