package tickd

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tickd/tickd/clients/go/tickdpb"
)

// LeaseKeeperOptions configure a LeaseKeeper.
type LeaseKeeperOptions struct {
	// Backoff paces reopening the KeepAlive stream after it broke (default DefaultReconnectBackoff).
	Backoff Backoff
	// OnLost is told once when a lease is lost: a heartbeat was answered NOT_FOUND (the lease
	// expired, was cancelled, or was unknown after a reconnect), or, for a lease added by
	// key, the key now names another timer (reported as NOT_FOUND too). The keeper stops
	// heartbeating it; it does not register it again.
	OnLost func(LeaseLost)
	// OnRenewed is told each heartbeat answered with a new deadline.
	OnRenewed func(LeaseRenewed)
	// OnHeartbeatError is told of a heartbeat refused for another reason than NOT_FOUND
	// (e.g. PERMISSION_DENIED); the lease stays kept and is tried again at its next beat.
	OnHeartbeatError func(ref Ref, err *Error)
	// OnStreamError is told when the stream broke, and how long until the next attempt.
	OnStreamError func(err error, retryIn time.Duration)
}

// LeaseLost reports a lease the keeper gave up.
type LeaseLost struct {
	Ref Ref
	// LastDeadline is the deadline of the last heartbeat answered (zero if none was).
	LastDeadline time.Time
	Err          *Error
}

// LeaseRenewed reports one answered heartbeat.
type LeaseRenewed struct {
	Ref      Ref
	ID       string
	Deadline time.Time
}

// LeaseKeeper keeps a set of leases alive over ONE KeepAlive stream, heartbeating each
// about every ttl/3. Leases can be added and removed while it runs. When the stream breaks
// it reconnects with exponential back-off and jitter and heartbeats every lease at once.
type LeaseKeeper struct {
	client  *Client
	options LeaseKeeperOptions
	run     lifecycle

	mu           sync.Mutex
	leases       map[Ref]*keptLease
	inFlight     map[uint64]Ref
	nextSequence uint64
	wake         chan struct{}
}

type keptLease struct {
	ttl          time.Duration
	nextBeat     time.Time
	lastDeadline time.Time
	// id is the timer id of a lease added by key, learned from its first answered heartbeat;
	// from then on it is heartbeaten by id. A key names whichever timer holds it now: had the
	// lease expired (say while tickd was down) and another holder registered the key again,
	// heartbeats by key would keep the new holder's lease alive and never report the loss.
	id string
}

// NewLeaseKeeper prepares a keeper with no leases; nothing is sent until Run.
func (c *Client) NewLeaseKeeper(options LeaseKeeperOptions) *LeaseKeeper {
	return &LeaseKeeper{
		client: c, options: options, run: newLifecycle(),
		leases: map[Ref]*keptLease{}, inFlight: map[uint64]Ref{}, wake: make(chan struct{}, 1),
	}
}

// Add keeps a lease alive from now on, heartbeating it every ttl/3. ttl is sent with each
// heartbeat and so becomes the lease's ttl (give the one it was registered with); a ttl of
// 0 keeps the lease's own ttl and heartbeats every second. Adding a lease already kept
// replaces its ttl. A lease added by key is heartbeaten by key until the first answer names
// its timer id, and by that id from then on: should the lease expire and the key be
// registered again by someone else, the keeper reports the lease lost instead of keeping
// the newcomer's timer alive.
func (k *LeaseKeeper) Add(ref Ref, ttl time.Duration) {
	k.mu.Lock()
	k.leases[k.normalize(ref)] = &keptLease{ttl: ttl}
	k.mu.Unlock()
	k.signal()
}

// Remove stops heartbeating a lease (which then expires after its ttl, unless cancelled).
func (k *LeaseKeeper) Remove(ref Ref) {
	k.mu.Lock()
	delete(k.leases, k.normalize(ref))
	k.mu.Unlock()
	k.signal()
}

// Leases lists the leases being kept.
func (k *LeaseKeeper) Leases() []Ref {
	k.mu.Lock()
	defer k.mu.Unlock()
	refs := make([]Ref, 0, len(k.leases))
	for ref := range k.leases {
		refs = append(refs, ref)
	}
	return refs
}

// Run heartbeats the leases until Stop (it then returns nil), until ctx ends (it returns
// ctx's error), or until tickd refuses the stream for good (UNAUTHENTICATED,
// PERMISSION_DENIED, INVALID_ARGUMENT, UNIMPLEMENTED: it returns that *Error),
// reconnecting whenever the stream breaks otherwise.
func (k *LeaseKeeper) Run(ctx context.Context) error {
	if err := k.run.begin(); err != nil {
		if err == errStoppedBeforeRun {
			return nil
		}
		return err
	}
	defer k.run.end()
	runCtx, cancel := k.run.runContext(ctx)
	defer cancel()
	failures := 0
	for runCtx.Err() == nil {
		answered, err := k.session(runCtx)
		if runCtx.Err() != nil {
			break
		}
		if permanentStreamCodes[codeOf(err)] {
			return err
		}
		if answered {
			failures = 0
		}
		failures++
		retryIn := k.options.Backoff.Delay(failures)
		if k.options.OnStreamError != nil {
			k.options.OnStreamError(err, retryIn)
		}
		_ = sleepContext(runCtx, retryIn)
	}
	if k.run.stopRequested() {
		return nil
	}
	return ctx.Err()
}

// Stop ends Run and returns once it has; heartbeats stop, the leases are left as they are.
func (k *LeaseKeeper) Stop() { k.run.requestStop() }

// session holds one KeepAlive stream: every lease is due at once, then each every ttl/3.
// It returns when the stream breaks or the run ends; answered says whether tickd answered
// at least one heartbeat on it (which resets the back-off).
func (k *LeaseKeeper) session(runCtx context.Context) (answered bool, err error) {
	streamCtx, closeStream := context.WithCancel(runCtx)
	defer closeStream()
	stream, err := k.client.stub.KeepAlive(streamCtx)
	if err != nil {
		return false, newError(err)
	}
	k.startSession()
	answers := make(chan struct{}, 1)
	broken := make(chan error, 1)
	go func() {
		for {
			response, err := stream.Recv()
			if err != nil {
				broken <- err
				return
			}
			k.onAnswer(response)
			select {
			case answers <- struct{}{}:
			default:
			}
		}
	}()
	wait := time.NewTimer(0)
	defer wait.Stop()
	for {
		select {
		case <-runCtx.Done():
			_ = stream.CloseSend()
			return answered, nil
		case err := <-broken:
			return answered, newError(err)
		case <-answers:
			answered = true
			continue
		case <-wait.C:
		case <-k.wake:
		}
		if err := k.sendDue(stream); err != nil {
			// Send reports only io.EOF; the receiver gets the stream's real error.
			select {
			case err = <-broken:
			case <-runCtx.Done():
				return answered, nil
			}
			return answered, newError(err)
		}
		if !wait.Stop() {
			select {
			case <-wait.C:
			default:
			}
		}
		wait.Reset(k.untilNextBeat())
	}
}

// startSession makes every lease due at once and forgets heartbeats sent on an older stream.
func (k *LeaseKeeper) startSession() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.inFlight = map[uint64]Ref{}
	for _, lease := range k.leases {
		lease.nextBeat = time.Time{}
	}
}

// sendDue sends a heartbeat for each lease whose beat is due.
func (k *LeaseKeeper) sendDue(stream tickdpb.Timers_KeepAliveClient) error {
	for _, request := range k.dueHeartbeats(time.Now()) {
		if err := stream.Send(request); err != nil {
			return err
		}
	}
	return nil
}

func (k *LeaseKeeper) dueHeartbeats(now time.Time) []*tickdpb.KeepAliveRequest {
	k.mu.Lock()
	defer k.mu.Unlock()
	var requests []*tickdpb.KeepAliveRequest
	for ref, lease := range k.leases {
		if lease.nextBeat.After(now) {
			continue
		}
		k.nextSequence++
		k.inFlight[k.nextSequence] = ref
		lease.nextBeat = now.Add(heartbeatInterval(lease.ttl))
		target := ref
		if lease.id != "" {
			target = Ref{Namespace: ref.Namespace, ID: lease.id}
		}
		requests = append(requests, &tickdpb.KeepAliveRequest{
			Timer: k.client.refToProto(target), Ttl: optionalDuration(lease.ttl), Sequence: k.nextSequence,
		})
	}
	return requests
}

// untilNextBeat is the wait until the earliest lease is due (an hour when none is kept:
// Add wakes the session).
func (k *LeaseKeeper) untilNextBeat() time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	wait := time.Hour
	now := time.Now()
	for _, lease := range k.leases {
		if until := lease.nextBeat.Sub(now); until < wait {
			wait = until
		}
	}
	if wait < 0 {
		wait = 0
	}
	return wait
}

// onAnswer applies one heartbeat's answer: a new deadline, or the lease lost.
func (k *LeaseKeeper) onAnswer(response *tickdpb.KeepAliveResponse) {
	k.mu.Lock()
	ref, known := k.inFlight[response.GetSequence()]
	delete(k.inFlight, response.GetSequence())
	lease, kept := k.leases[ref]
	if !known || !kept {
		k.mu.Unlock() // an answer for a lease removed meanwhile
		return
	}
	failure := response.GetError()
	if failure == nil && lease.id != "" && response.GetId() != lease.id {
		// Only a heartbeat sent by key before the id was known can meet another timer: the
		// lease it was kept for is gone.
		failure = &tickdpb.Error{Code: int32(codes.NotFound), Message: "the key " + ref.Key + " names another timer (" + response.GetId() + ") than the lease kept (" + lease.id + ")"}
	}
	if failure == nil {
		if ref.Key != "" && lease.id == "" {
			lease.id = response.GetId()
		}
		lease.lastDeadline = optionalTime(response.GetDeadline())
		k.mu.Unlock()
		if k.options.OnRenewed != nil {
			k.options.OnRenewed(LeaseRenewed{Ref: ref, ID: response.GetId(), Deadline: lease.lastDeadline})
		}
		return
	}
	err := newItemError(failure.GetCode(), failure.GetMessage())
	if err.Code() != codes.NotFound {
		k.mu.Unlock()
		if k.options.OnHeartbeatError != nil {
			k.options.OnHeartbeatError(ref, err)
		}
		return
	}
	delete(k.leases, ref)
	lastDeadline := lease.lastDeadline
	k.mu.Unlock()
	if k.options.OnLost != nil {
		k.options.OnLost(LeaseLost{Ref: ref, LastDeadline: lastDeadline, Err: err})
	}
}

// normalize names a lease the same way however the caller named its namespace.
func (k *LeaseKeeper) normalize(ref Ref) Ref {
	ref.Namespace = k.client.namespaceOr(ref.Namespace)
	if ref.ID != "" {
		ref.Key = ""
	}
	return ref
}

func (k *LeaseKeeper) signal() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// heartbeatInterval is a third of the ttl: two heartbeats can be lost before the lease expires.
func heartbeatInterval(ttl time.Duration) time.Duration {
	if interval := ttl / 3; interval > 0 {
		return interval
	}
	return time.Second
}
