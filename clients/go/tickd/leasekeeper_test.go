package tickd_test

import (
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tickd/tickd/clients/go/tickd"
)

// leaseEvents collects a LeaseKeeper's reports.
type leaseEvents struct {
	mu       sync.Mutex
	deadline map[string]time.Time
	lostKeys []string
	renewed  chan tickd.LeaseRenewed
	lost     chan tickd.LeaseLost
	broken   chan error
}

func newLeaseEvents() *leaseEvents {
	return &leaseEvents{deadline: map[string]time.Time{}, renewed: make(chan tickd.LeaseRenewed, 1000), lost: make(chan tickd.LeaseLost, 10), broken: make(chan error, 1)}
}

func (e *leaseEvents) options() tickd.LeaseKeeperOptions {
	return tickd.LeaseKeeperOptions{
		Backoff: fastReconnect,
		OnRenewed: func(renewed tickd.LeaseRenewed) {
			e.mu.Lock()
			e.deadline[renewed.Ref.Key] = renewed.Deadline
			e.mu.Unlock()
			select {
			case e.renewed <- renewed:
			default:
			}
		},
		OnStreamError: func(err error, _ time.Duration) {
			select {
			case e.broken <- err:
			default:
			}
		},
		OnLost: func(lost tickd.LeaseLost) {
			e.mu.Lock()
			e.lostKeys = append(e.lostKeys, lost.Ref.Key)
			e.mu.Unlock()
			e.lost <- lost
		},
	}
}

func (e *leaseEvents) lastDeadline(key string) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.deadline[key]
}

// awaitRenewal waits for a heartbeat of key answered with a deadline after `after`.
func (e *leaseEvents) awaitRenewal(t *testing.T, key string, after time.Time) tickd.LeaseRenewed {
	t.Helper()
	for {
		renewed := await(t, "a heartbeat of "+key, e.renewed)
		if renewed.Ref.Key == key && renewed.Deadline.After(after) {
			return renewed
		}
	}
}

func TestLeaseKeeperAcrossRestart(t *testing.T) {
	server := startTickd(t, "--sync", "always")
	client := server.dial(t, tickd.WithNamespace("leases"), tickd.WithRetry(fastRetry))
	registerAll(t, client, tickd.TimerSpec{Key: "long", TTL: 30 * time.Second})
	short, err := client.Register(testContext(t), tickd.TimerSpec{Key: "short", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	events := newLeaseEvents()
	keeper := client.NewLeaseKeeper(events.options())
	keeper.Add(tickd.ByKey("long"), 30*time.Second)
	keeper.Add(tickd.ByKey("short"), time.Second)
	done := runInBackground(t, keeper.Run, keeper.Stop)
	events.awaitRenewal(t, "long", time.Time{})
	// The short lease is being kept alive: a heartbeat was answered after its registered
	// deadline had passed (so it lived on only thanks to earlier heartbeats), with a deadline
	// more than one ttl past the registered one.
	events.awaitRenewal(t, "short", short.Timer.Deadline.Add(time.Second))

	server.Stop()
	stoppedAt := time.Now()
	// Once the keeper saw its stream break, every answer tickd sent has been applied.
	await(t, "the keeper to see its stream break", events.broken)
	longBefore, shortBefore := events.lastDeadline("long"), events.lastDeadline("short")
	waitPastExpiry(stoppedAt, time.Second)
	server.Start()

	lost := await(t, "the short lease reported lost", events.lost)
	if lost.Ref.Key != "short" || lost.Err.Code() != codes.NotFound || !lost.LastDeadline.Equal(shortBefore) {
		t.Fatalf("lost: %+v (last deadline before the restart %v)", lost, shortBefore)
	}
	// Heartbeats resumed after the reconnect: the long lease's deadline moved on.
	events.awaitRenewal(t, "long", longBefore)
	if kept := keeper.Leases(); len(kept) != 1 || kept[0].Key != "long" {
		t.Fatalf("leases kept: %+v", kept)
	}
	events.mu.Lock()
	if len(events.lostKeys) != 1 {
		t.Fatalf("lost leases: %v, want only short", events.lostKeys)
	}
	events.mu.Unlock()
	if _, err := client.Get(testContext(t), tickd.ByKey("long")); err != nil {
		t.Fatalf("the long lease after the restart: %v", err)
	}
	keeper.Stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// waitPastExpiry waits until a lease with the given ttl has expired for sure in a tickd that
// exited at stoppedAt. Its last ANSWERED deadline is not enough: a heartbeat tickd applied
// but whose answer was lost with the connection moved the deadline further; none can have
// been applied after tickd exited, so the deadline is at most stoppedAt + ttl. (Waiting for
// wall-clock time to pass a deadline is the point here, not a synchronisation.)
func waitPastExpiry(stoppedAt time.Time, ttl time.Duration) {
	time.Sleep(time.Until(stoppedAt.Add(ttl + 100*time.Millisecond)))
}

func TestLeaseKeeperAddAndRemoveWhileRunning(t *testing.T) {
	server := startTickd(t)
	client := server.dial(t, tickd.WithNamespace("leases-live"))
	events := newLeaseEvents()
	keeper := client.NewLeaseKeeper(events.options())
	runInBackground(t, keeper.Run, keeper.Stop)
	registered := registerAll(t, client, tickd.TimerSpec{Key: "worker", TTL: 3 * time.Second})
	keeper.Add(tickd.ByID(registered[0]), 3*time.Second)
	first := events.awaitRenewal(t, "", time.Time{})
	if first.ID != registered[0] {
		t.Fatalf("heartbeat answered for %q, want %q", first.ID, registered[0])
	}
	events.awaitRenewal(t, "", first.Deadline)
	keeper.Remove(tickd.ByID(registered[0]))
	if len(keeper.Leases()) != 0 {
		t.Fatalf("leases after Remove: %v", keeper.Leases())
	}
	// Unknown leases are reported lost at their first heartbeat.
	keeper.Add(tickd.ByKey("never-registered"), time.Second)
	lost := await(t, "an unknown lease reported lost", events.lost)
	if lost.Ref.Key != "never-registered" || lost.Err.Code() != codes.NotFound || !lost.LastDeadline.IsZero() {
		t.Fatalf("lost: %+v", lost)
	}
}
