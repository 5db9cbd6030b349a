package tickd_test

import (
	"context"
	"log"
	"time"

	"github.com/tickd/tickd/clients/go/tickd"
)

// The quick start of README.md, compiled with the tests so that it stays true.
func Example() {
	ctx := context.Background()
	client, err := tickd.Dial(ctx, "127.0.0.1:50051", tickd.WithNamespace("orders"), tickd.WithToken("secret"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	// A timer: the key makes the registration safe to retry.
	_, err = client.Register(ctx, tickd.TimerSpec{Key: "order-42", Delay: 30 * time.Minute, Payload: []byte("close 42")})
	if err != nil {
		log.Fatal(err)
	}

	// Expirations: acknowledged when the handler returns nil, delivered again otherwise.
	subscriber := client.NewSubscriber(func(ctx context.Context, e *tickd.Expiration) error {
		log.Printf("fired %s (attempt %d): %s", e.Timer.Key, e.Attempt, e.Timer.Payload)
		return nil
	}, tickd.SubscriberOptions{MaxInFlight: 8})
	go func() { _ = subscriber.Run(ctx) }()
	defer subscriber.Stop()

	// A lease, heartbeaten every ttl/3 over one stream; its loss is reported, not repaired.
	_, err = client.Register(ctx, tickd.TimerSpec{Key: "worker-7", TTL: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	keeper := client.NewLeaseKeeper(tickd.LeaseKeeperOptions{
		OnLost: func(lost tickd.LeaseLost) { log.Printf("lease %s lost: %v", lost.Ref.Key, lost.Err) },
	})
	keeper.Add(tickd.ByKey("worker-7"), 30*time.Second)
	go func() { _ = keeper.Run(ctx) }()
	defer keeper.Stop()
}

// Walking the pending timers a page at a time.
func ExamplePendingIterator() {
	ctx := context.Background()
	client, err := tickd.Dial(ctx, "127.0.0.1:50051", tickd.WithNamespace("orders"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	it := client.Pending(100)
	for it.Next(ctx) {
		log.Printf("%s due %v", it.Timer().ID, it.Timer().Deadline)
	}
	if err := it.Err(); err != nil {
		log.Fatal(err)
	}
}
