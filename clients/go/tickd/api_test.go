package tickd_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
	// Europe/Berlin for the cron test even on a machine without tzdata installed.
	_ "time/tzdata"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tickd/tickd/clients/go/tickd"
)

func TestRegisterGetCancelByIDAndKey(t *testing.T) {
	server := startTickd(t)
	client := server.dial(t, tickd.WithNamespace("orders"))
	ctx := testContext(t)

	registered, err := client.Register(ctx, tickd.TimerSpec{Key: "order-42", Delay: time.Hour, Payload: []byte("close 42")})
	if err != nil {
		t.Fatal(err)
	}
	if !registered.Created || registered.Timer.ID == "" || registered.Timer.Namespace != "orders" || len(registered.Timer.Payload) != 0 {
		t.Fatalf("registration answer: %+v", registered)
	}
	again, err := client.Register(ctx, tickd.TimerSpec{Key: "order-42", Delay: time.Minute})
	if err != nil || again.Created || again.Timer.ID != registered.Timer.ID {
		t.Fatalf("same key again: %+v, %v", again, err)
	}
	byKey, err := client.Get(ctx, tickd.ByKey("order-42"))
	if err != nil || byKey.ID != registered.Timer.ID || string(byKey.Payload) != "close 42" || byKey.Remaining <= 0 {
		t.Fatalf("get by key: %+v, %v", byKey, err)
	}
	if cancelled, err := client.Cancel(ctx, tickd.ByKey("order-42")); err != nil || !cancelled {
		t.Fatalf("cancel by key: %v, %v", cancelled, err)
	}
	keyless, err := client.Register(ctx, tickd.TimerSpec{Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if cancelled, err := client.Cancel(ctx, tickd.ByID(keyless.Timer.ID)); err != nil || !cancelled {
		t.Fatalf("cancel by id: %v, %v", cancelled, err)
	}
	if cancelled, err := client.Cancel(ctx, tickd.ByID(keyless.Timer.ID)); err != nil || cancelled {
		t.Fatalf("cancel by id twice: %v, %v", cancelled, err)
	}
	_, err = client.Get(ctx, tickd.ByKey("order-42"))
	assertCode(t, err, codes.NotFound)
}

func TestBatchWithOneInvalidItem(t *testing.T) {
	server := startTickd(t)
	client := server.dial(t, tickd.WithNamespace("batch"))
	results, err := client.RegisterBatch(testContext(t), []tickd.TimerSpec{
		{Key: "a", Delay: time.Hour},
		{Key: "bad", Delay: time.Hour, Cron: "not a cron"},
		{Delay: time.Hour, Payload: []byte("c")},
	})
	if err != nil || len(results) != 3 {
		t.Fatalf("batch: %v, %v", results, err)
	}
	if results[0].Err != nil || results[0].Registration.Timer.Key != "a" || results[2].Err != nil || results[2].Registration.Timer.ID == "" {
		t.Fatalf("valid items: %+v %+v", results[0], results[2])
	}
	itemErr := assertCode(t, results[1].Err, codes.InvalidArgument)
	if !strings.Contains(itemErr.Message(), "cron") {
		t.Fatalf("the invalid item's message does not name the field: %q", itemErr.Message())
	}
	counts, err := client.Counts(testContext(t))
	if err != nil || counts.Pending != 2 {
		t.Fatalf("counts after the batch: %+v, %v", counts, err)
	}
}

func TestErrorsCarryCodeAndMessage(t *testing.T) {
	server := startTickd(t)
	client := server.dial(t)
	_, err := client.Register(testContext(t), tickd.TimerSpec{Delay: time.Minute, Repeat: time.Minute, Cron: "@daily"})
	tickdErr := assertCode(t, err, codes.InvalidArgument)
	if tickdErr.Message() == "" || !strings.Contains(err.Error(), "InvalidArgument") {
		t.Fatalf("error text: %q", err.Error())
	}
	if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != tickdErr.Message() {
		t.Fatalf("status.Code/Convert do not read *tickd.Error: %v", status.Convert(err))
	}
	if !strings.Contains(tickdErr.Message(), "cron") && !strings.Contains(tickdErr.Message(), "repeat") {
		t.Fatalf("message names no field: %q", tickdErr.Message())
	}
}

func TestReplaceCronRepeatTTL(t *testing.T) {
	server := startTickd(t)
	client := server.dial(t, tickd.WithNamespace("reports"))
	ctx := testContext(t)

	cron, err := client.Register(ctx, tickd.TimerSpec{Key: "standup", Cron: "0 9 * * MON-FRI", TimeZone: "Europe/Berlin"})
	if err != nil || !cron.Created || cron.Timer.Cron != "0 9 * * MON-FRI" || cron.Timer.TimeZone != "Europe/Berlin" {
		t.Fatalf("cron: %+v, %v", cron, err)
	}
	// The time-zone data comes from the test binary itself (time/tzdata), not the machine.
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatalf("loading Europe/Berlin: %v", err)
	}
	local := cron.Timer.Deadline.In(berlin)
	if local.Hour() != 9 || local.Minute() != 0 || local.Weekday() == time.Saturday || local.Weekday() == time.Sunday {
		t.Fatalf("cron's next firing in Berlin: %v", local)
	}
	replaced, err := client.Register(ctx, tickd.TimerSpec{Key: "standup", Cron: "@daily", Replace: true})
	if err != nil || replaced.Created || !replaced.Replaced || replaced.Timer.ID != cron.Timer.ID || replaced.Timer.Cron != "@daily" {
		t.Fatalf("replace: %+v, %v", replaced, err)
	}
	repeating, err := client.Register(ctx, tickd.TimerSpec{Key: "nightly", Delay: time.Hour, Repeat: 24 * time.Hour})
	if err != nil || repeating.Timer.Repeat != 24*time.Hour {
		t.Fatalf("repeat: %+v, %v", repeating, err)
	}
	lease, err := client.Register(ctx, tickd.TimerSpec{Key: "worker-7", TTL: 30 * time.Second})
	if err != nil || lease.Timer.TTL != 30*time.Second {
		t.Fatalf("ttl: %+v, %v", lease, err)
	}
	touched, err := client.Touch(ctx, tickd.ByKey("worker-7"), time.Minute)
	if err != nil || touched.TTL != time.Minute || !touched.Deadline.After(lease.Timer.Deadline) {
		t.Fatalf("touch: %+v, %v (registered deadline %v)", touched, err, lease.Timer.Deadline)
	}
}

func TestRescheduleWithAndWithoutPayload(t *testing.T) {
	server := startTickd(t)
	client := server.dial(t, tickd.WithNamespace("moves"))
	ctx := testContext(t)
	registered, err := client.Register(ctx, tickd.TimerSpec{Key: "job", Delay: time.Hour, Payload: []byte("first")})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(2 * time.Hour).Truncate(time.Second)
	moved, err := client.Reschedule(ctx, tickd.ByKey("job"), tickd.Reschedule{Deadline: at})
	if err != nil || !moved.Deadline.Equal(at) || moved.ID != registered.Timer.ID {
		t.Fatalf("reschedule to a deadline: %+v, %v", moved, err)
	}
	assertPayload(t, client, "job", "first")
	if _, err := client.Reschedule(ctx, tickd.ByID(registered.Timer.ID), tickd.Reschedule{Delay: 3 * time.Hour, ReplacePayload: true, Payload: []byte("moved")}); err != nil {
		t.Fatal(err)
	}
	assertPayload(t, client, "job", "moved")
	if _, err := client.Reschedule(ctx, tickd.ByKey("job"), tickd.Reschedule{Delay: time.Hour, ReplacePayload: true}); err != nil {
		t.Fatal(err)
	}
	assertPayload(t, client, "job", "")
	_, err = client.Reschedule(ctx, tickd.ByKey("missing"), tickd.Reschedule{Delay: time.Hour})
	assertCode(t, err, codes.NotFound)
}

func TestPendingPagesAreFetchedLazily(t *testing.T) {
	server := startTickd(t)
	client := server.dial(t, tickd.WithNamespace("paged"))
	ctx := testContext(t)
	specs := make([]tickd.TimerSpec, 25)
	for i := range specs {
		specs[i] = tickd.TimerSpec{Key: "k" + string(rune('a'+i)), Delay: time.Hour}
	}
	if _, err := client.RegisterBatch(ctx, specs); err != nil {
		t.Fatal(err)
	}
	it := client.Pending(4)
	if it.PagesFetched() != 0 {
		t.Fatal("the iterator asked before Next")
	}
	if !it.Next(ctx) || it.PagesFetched() != 1 {
		t.Fatalf("first Next: pages %d, err %v", it.PagesFetched(), it.Err())
	}
	seen := map[string]bool{it.Timer().Key: true}
	for it.Next(ctx) {
		if seen[it.Timer().Key] {
			t.Fatalf("timer %q listed twice", it.Timer().Key)
		}
		seen[it.Timer().Key] = true
	}
	if it.Err() != nil || len(seen) != 25 || it.Count() != 25 || it.PagesFetched() < 7 {
		t.Fatalf("walk: %d seen, count %d, %d pages, err %v", len(seen), it.Count(), it.PagesFetched(), it.Err())
	}
}

func assertPayload(t *testing.T, client *tickd.Client, key, want string) {
	t.Helper()
	timer, err := client.Get(testContext(t), tickd.ByKey(key))
	if err != nil || !bytes.Equal(timer.Payload, []byte(want)) {
		t.Fatalf("payload of %q: %+v, %v (want %q)", key, timer, err, want)
	}
}

// assertCode checks err is a *tickd.Error with the code, and returns it.
func assertCode(t *testing.T, err error, code codes.Code) *tickd.Error {
	t.Helper()
	var tickdErr *tickd.Error
	if !errors.As(err, &tickdErr) {
		t.Fatalf("want a *tickd.Error with %v, got %T %v", code, err, err)
	}
	if tickdErr.Code() != code {
		t.Fatalf("want %v, got %v: %s", code, tickdErr.Code(), tickdErr.Message())
	}
	return tickdErr
}
