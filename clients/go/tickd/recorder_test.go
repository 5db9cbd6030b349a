package tickd_test

import (
	"sync"

	"github.com/tickd/tickd/clients/go/tickd"
)

// ackRecorder remembers, per timer id, how often its expiration was handled and whether
// one of the subscriber's acks was answered as acknowledged; it signals each change.
type ackRecorder struct {
	mu       sync.Mutex
	handled  map[string]int
	acked    map[string]bool
	changed  chan struct{}
	failures []error
}

func newAckRecorder() *ackRecorder {
	return &ackRecorder{handled: map[string]int{}, acked: map[string]bool{}, changed: make(chan struct{}, 1)}
}

func (r *ackRecorder) onHandled(expiration *tickd.Expiration) {
	r.mu.Lock()
	r.handled[expiration.Timer.ID]++
	r.mu.Unlock()
	r.signal()
}

func (r *ackRecorder) onAck(event tickd.AckEvent) {
	r.mu.Lock()
	if event.Acknowledged {
		r.acked[event.Expiration.Timer.ID] = true
	}
	if event.Err != nil {
		r.failures = append(r.failures, event.Err)
	}
	r.mu.Unlock()
	r.signal()
}

func (r *ackRecorder) signal() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// allAcked tells whether every id was handled and acknowledged.
func (r *ackRecorder) allAcked(ids []string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		if r.handled[id] == 0 || !r.acked[id] {
			return false
		}
	}
	return true
}

func (r *ackRecorder) missing(ids []string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var missing []string
	for _, id := range ids {
		if !r.acked[id] {
			missing = append(missing, id)
		}
	}
	return missing
}
