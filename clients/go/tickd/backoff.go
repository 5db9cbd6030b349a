package tickd

import (
	"context"
	"math/rand"
	"sync"
	"time"
)

// Backoff is an exponential back-off: Initial, then multiplied by Multiplier after each
// failure, never above Max. Each wait is drawn at random between half of it and all of it
// (jitter), so that many clients cut off by the same outage do not come back in step;
// NoJitter turns that off (tests, or a caller that jitters itself). Jitter is on in the
// zero value on purpose: a Backoff{} left to its defaults must not make every client of an
// outage reconnect in step.
type Backoff struct {
	Initial    time.Duration
	Max        time.Duration
	Multiplier float64
	NoJitter   bool
}

// DefaultReconnectBackoff is what subscribers and lease keepers wait between attempts to
// open their stream again: 100ms, doubling, at most 5s, with jitter.
var DefaultReconnectBackoff = Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Multiplier: 2}

// withDefaults fills the zero fields from DefaultReconnectBackoff.
func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = DefaultReconnectBackoff.Initial
	}
	if b.Max <= 0 {
		b.Max = DefaultReconnectBackoff.Max
	}
	if b.Max < b.Initial {
		b.Max = b.Initial
	}
	if b.Multiplier < 1 {
		b.Multiplier = DefaultReconnectBackoff.Multiplier
	}
	return b
}

// Delay is the wait before retry number `failures` (1 for the first retry).
func (b Backoff) Delay(failures int) time.Duration {
	b = b.withDefaults()
	wait := float64(b.Initial)
	for i := 1; i < failures && wait < float64(b.Max); i++ {
		wait *= b.Multiplier
	}
	if wait > float64(b.Max) {
		wait = float64(b.Max)
	}
	if !b.NoJitter {
		wait = wait/2 + jitterSource.float64()*wait/2
	}
	return time.Duration(wait)
}

// sleepContext waits d, or less if ctx ends first (then it returns ctx's error).
func sleepContext(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// lockedRand is a seeded source safe for concurrent use (Go 1.19's global source is not
// seeded, so every process would jitter alike).
type lockedRand struct {
	mu     sync.Mutex
	random *rand.Rand
}

func (r *lockedRand) float64() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.random.Float64()
}

var jitterSource = &lockedRand{random: rand.New(rand.NewSource(time.Now().UnixNano()))}
