package tickd

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
)

// ErrAlreadyRunning is returned by Run when the Subscriber or LeaseKeeper is already running
// (each runs once; make a new one to run again).
var ErrAlreadyRunning = errors.New("tickd: already running, or run before")

// lifecycle gives Subscriber and LeaseKeeper their Run/Stop contract: Run runs once; Stop
// asks it to end and returns once it has (at once if Run never started).
type lifecycle struct {
	mu      sync.Mutex
	started bool
	stopped bool
	stop    chan struct{}
	done    chan struct{}
}

func newLifecycle() lifecycle {
	return lifecycle{stop: make(chan struct{}), done: make(chan struct{})}
}

// begin marks the start of Run; false if it ran before or Stop came first.
func (l *lifecycle) begin() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started {
		return ErrAlreadyRunning
	}
	l.started = true
	if l.stopped {
		close(l.done)
		return errStoppedBeforeRun
	}
	return nil
}

var errStoppedBeforeRun = errors.New("stopped before run")

// end marks the end of Run.
func (l *lifecycle) end() { close(l.done) }

// requestStop asks Run to end and waits until it has.
func (l *lifecycle) requestStop() {
	l.mu.Lock()
	if !l.stopped {
		l.stopped = true
		close(l.stop)
	}
	started := l.started
	l.mu.Unlock()
	if started {
		<-l.done
	}
}

// runContext is ctx, also cancelled when Stop is asked.
func (l *lifecycle) runContext(ctx context.Context) (context.Context, context.CancelFunc) {
	runCtx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-l.stop:
			cancel()
		case <-runCtx.Done():
		}
	}()
	return runCtx, cancel
}

// stopRequested tells whether Stop (rather than the caller's context) ended the run.
func (l *lifecycle) stopRequested() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

// permanentStreamCodes are the stream errors that reopening the stream cannot cure until
// someone changes the configuration (a token, a namespace, a server version): Run returns
// them instead of retrying forever. Everything else (UNAVAILABLE, RESOURCE_EXHAUSTED,
// a drain's end of stream, ...) is retried with back-off.
var permanentStreamCodes = map[codes.Code]bool{
	codes.Unauthenticated: true, codes.PermissionDenied: true, codes.InvalidArgument: true, codes.Unimplemented: true,
}

// detachedContext keeps a context's values (metadata, traces) without its cancellation:
// what finishing work runs under once its run is stopping (Go 1.19 has no
// context.WithoutCancel).
type detachedContext struct{ parent context.Context }

func (detachedContext) Deadline() (time.Time, bool)         { return time.Time{}, false }
func (detachedContext) Done() <-chan struct{}               { return nil }
func (detachedContext) Err() error                          { return nil }
func (d detachedContext) Value(key interface{}) interface{} { return d.parent.Value(key) }
