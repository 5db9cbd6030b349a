package tickd

import (
	"context"

	"github.com/tickd/tickd/clients/go/tickdpb"
)

// DefaultPageSize is how many timers a PendingIterator asks for per page unless told.
const DefaultPageSize = 500

// PendingIterator walks the pending timers of a namespace page by page, asking tickd for
// the next page only when the current one is used up:
//
//	it := client.Pending(0)
//	for it.Next(ctx) {
//		use(it.Timer())
//	}
//	if err := it.Err(); err != nil { ... }
//
// A page may hold fewer timers than asked, even none, and still have a successor; the
// iterator follows page tokens until tickd gives none. A timer that stays pending for the
// whole walk is seen exactly once. Not safe for concurrent use.
type PendingIterator struct {
	client    *Client
	pageSize  uint32
	page      []*tickdpb.Timer
	index     int
	pageToken string
	pages     int
	finished  bool
	count     uint64
	deadCount uint64
	current   Timer
	err       error
}

// Pending is a lazy iterator over the client's namespace's pending timers ("" lists every
// namespace), pageSize timers a call (0: DefaultPageSize). Nothing is asked until Next.
func (c *Client) Pending(pageSize uint32) *PendingIterator {
	if pageSize == 0 {
		pageSize = DefaultPageSize
	}
	return &PendingIterator{client: c, pageSize: pageSize}
}

// Next moves to the next timer, fetching pages as needed; false at the end or on error.
func (it *PendingIterator) Next(ctx context.Context) bool {
	for it.err == nil {
		if it.index < len(it.page) {
			it.current = timerFromProto(it.page[it.index])
			it.index++
			return true
		}
		if it.finished {
			return false
		}
		it.fetchPage(ctx)
	}
	return false
}

func (it *PendingIterator) fetchPage(ctx context.Context) {
	response, err := it.client.pendingPage(ctx, &tickdpb.PendingRequest{
		Namespace: it.client.options.namespace, PageSize: it.pageSize, PageToken: it.pageToken,
	})
	if err != nil {
		it.err = err
		return
	}
	it.pages++
	it.page, it.index = response.GetTimers(), 0
	it.pageToken = response.GetNextPageToken()
	it.finished = it.pageToken == ""
	it.count, it.deadCount = response.GetCount(), response.GetDeadCount()
}

// Timer is the timer Next moved to.
func (it *PendingIterator) Timer() Timer { return it.current }

// Err is the error that ended the walk, if any.
func (it *PendingIterator) Err() error { return it.err }

// Count is the number of pending timers tickd reported with the latest page (0 before Next).
func (it *PendingIterator) Count() uint64 { return it.count }

// PagesFetched is how many pages Next has asked tickd for so far (the walk is lazy).
func (it *PendingIterator) PagesFetched() int { return it.pages }

// Counts are how many timers are pending and how many expirations are dead (out of delivery
// attempts) in the client's namespace ("" counts every namespace).
type Counts struct {
	Pending uint64
	Dead    uint64
}

// Counts asks tickd for the namespace's counts without listing timers.
func (c *Client) Counts(ctx context.Context) (Counts, error) {
	response, err := c.pendingPage(ctx, &tickdpb.PendingRequest{Namespace: c.options.namespace})
	if err != nil {
		return Counts{}, err
	}
	return Counts{Pending: response.GetCount(), Dead: response.GetDeadCount()}, nil
}

// DeadExpirations lists the namespace's dead expirations (those that ran out of delivery
// attempts), oldest first: all of them unless their payloads are large (then as many as fit
// in one answer). Their DeliveryID is what Redrive takes.
func (c *Client) DeadExpirations(ctx context.Context) ([]*Expiration, error) {
	response, err := c.pendingPage(ctx, &tickdpb.PendingRequest{Namespace: c.options.namespace, IncludeDead: true})
	if err != nil {
		return nil, err
	}
	dead := make([]*Expiration, len(response.GetDeadExpirations()))
	for i, expiration := range response.GetDeadExpirations() {
		dead[i] = expirationFromProto(expiration)
	}
	return dead, nil
}

func (c *Client) pendingPage(ctx context.Context, request *tickdpb.PendingRequest) (*tickdpb.PendingResponse, error) {
	var response *tickdpb.PendingResponse
	err := c.call(ctx, "Pending", true, func(ctx context.Context) (err error) {
		response, err = c.stub.Pending(ctx, request)
		return err
	})
	return response, err
}
