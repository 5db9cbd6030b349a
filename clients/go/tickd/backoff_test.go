package tickd

import (
	"testing"
	"time"
)

func TestBackoffGrowsToItsCap(t *testing.T) {
	backoff := Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2, NoJitter: true}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, wantMillis := range want {
		if got := backoff.Delay(i + 1); got != wantMillis*time.Millisecond {
			t.Fatalf("Delay(%d) = %v, want %v", i+1, got, wantMillis*time.Millisecond)
		}
	}
}

func TestBackoffJitterStaysBetweenHalfAndAll(t *testing.T) {
	backoff := Backoff{Initial: time.Second, Max: 4 * time.Second, Multiplier: 2}
	for failures := 1; failures <= 5; failures++ {
		full := Backoff{Initial: time.Second, Max: 4 * time.Second, Multiplier: 2, NoJitter: true}.Delay(failures)
		for i := 0; i < 100; i++ {
			if got := backoff.Delay(failures); got < full/2 || got > full {
				t.Fatalf("Delay(%d) = %v, want within [%v, %v]", failures, got, full/2, full)
			}
		}
	}
}

func TestBackoffZeroValueUsesDefaults(t *testing.T) {
	if got := (Backoff{}).Delay(1); got < DefaultReconnectBackoff.Initial/2 || got > DefaultReconnectBackoff.Initial {
		t.Fatalf("zero Backoff's first delay %v", got)
	}
	if got := (Backoff{}).Delay(100); got > DefaultReconnectBackoff.Max {
		t.Fatalf("zero Backoff's delay beyond its cap: %v", got)
	}
	// The zero value jitters: of many draws, not all are the full delay. (Without jitter
	// every draw is exactly Initial; with it, a draw equal to Initial has probability ~0.)
	unjittered := 0
	for i := 0; i < 100; i++ {
		if (Backoff{}).Delay(1) == DefaultReconnectBackoff.Initial {
			unjittered++
		}
	}
	if unjittered == 100 {
		t.Fatal("the zero Backoff does not jitter: every delay was exactly the initial one")
	}
}
