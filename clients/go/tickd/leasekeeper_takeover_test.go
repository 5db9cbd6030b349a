package tickd_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/tickd/tickd/clients/go/tickd"
)

// dialGate holds a client's connection attempts while closed, so that a test can act on a
// restarted tickd before that client reconnects.
type dialGate struct {
	mu   sync.Mutex
	open chan struct{}
}

func newDialGate() *dialGate {
	gate := &dialGate{open: make(chan struct{})}
	close(gate.open)
	return gate
}

func (g *dialGate) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = make(chan struct{})
}

func (g *dialGate) reopen() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

func (g *dialGate) dial(ctx context.Context, address string) (net.Conn, error) {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return (&net.Dialer{}).DialContext(ctx, "tcp", address)
}

// A lease kept by key expired while tickd was down and someone else registered the key
// again: the keeper must report its lease lost, not keep the newcomer's timer alive.
func TestLeaseKeeperByKeyDoesNotAdoptAnotherHoldersLease(t *testing.T) {
	server := startTickd(t, "--sync", "always")
	gate := newDialGate()
	client := server.dial(t, tickd.WithNamespace("takeover"), tickd.WithRetry(fastRetry),
		tickd.WithDialOptions(grpc.WithContextDialer(gate.dial)))
	newcomer := server.dial(t, tickd.WithNamespace("takeover"), tickd.WithRetry(fastRetry))
	original := registerAll(t, client, tickd.TimerSpec{Key: "job", TTL: time.Second})[0]
	events := newLeaseEvents()
	keeper := client.NewLeaseKeeper(events.options())
	keeper.Add(tickd.ByKey("job"), time.Second)
	runInBackground(t, keeper.Run, keeper.Stop)
	if renewed := events.awaitRenewal(t, "job", time.Time{}); renewed.ID != original {
		t.Fatalf("heartbeat answered for %q, want %q", renewed.ID, original)
	}

	gate.shut()
	server.Stop()
	stoppedAt := time.Now()
	await(t, "the keeper to see its stream break", events.broken)
	waitPastExpiry(stoppedAt, time.Second)
	server.Start()
	ctx := testContext(t)
	waitFor(t, "the expired lease to be gone", func() bool {
		_, err := newcomer.Get(ctx, tickd.ByKey("job"))
		return status.Code(err) == codes.NotFound
	})
	taken, err := newcomer.Register(ctx, tickd.TimerSpec{Key: "job", TTL: time.Second})
	if err != nil || !taken.Created || taken.Timer.ID == original {
		t.Fatalf("registering the key anew: %+v, %v (the original lease was %q)", taken, err, original)
	}

	gate.reopen()
	lost := await(t, "the original lease reported lost", events.lost)
	if lost.Ref.Key != "job" || lost.Err.Code() != codes.NotFound {
		t.Fatalf("lost: %+v", lost)
	}
	if kept := keeper.Leases(); len(kept) != 0 {
		t.Fatalf("leases still kept: %+v", kept)
	}
	// Nobody heartbeats the newcomer's lease, so it expires after its ttl (kept alive by the
	// keeper, it never would).
	waitFor(t, "the newcomer's lease to expire", func() bool {
		_, err := newcomer.Get(ctx, tickd.ByID(taken.Timer.ID))
		return status.Code(err) == codes.NotFound
	})
}

// A tickd that stops answering without closing the connection is noticed by the client's
// keepalive pings: the stream breaks and the keeper reconnects once tickd answers again.
func TestLeaseKeeperNoticesAnUnresponsiveTickdByKeepalivePings(t *testing.T) {
	server := startTickd(t)
	// grpc-go raises a ping interval below 10s to 10s.
	client := server.dial(t, tickd.WithNamespace("frozen"),
		tickd.WithKeepalive(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: time.Second}))
	registerAll(t, client, tickd.TimerSpec{Key: "held", TTL: time.Hour})
	events := newLeaseEvents()
	keeper := client.NewLeaseKeeper(events.options())
	keeper.Add(tickd.ByKey("held"), time.Hour)
	runInBackground(t, keeper.Run, keeper.Stop)
	first := events.awaitRenewal(t, "held", time.Time{})

	// The next heartbeat is 20 minutes away: only a ping can find out that tickd is gone.
	server.Freeze()
	if err := await(t, "the keeper to see its stream break", events.broken); status.Code(err) != codes.Unavailable {
		t.Fatalf("stream error: %v, want UNAVAILABLE", err)
	}
	server.Thaw()
	events.awaitRenewal(t, "held", first.Deadline)
}
