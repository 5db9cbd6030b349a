package tickd

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tickd/tickd/clients/go/tickdpb"
)

// Push sinks (the tickd.v1.Sinks service). Every call is retried on UNAVAILABLE: each sets
// a state rather than adding to one, so a repeat after a lost first attempt changes nothing
// more (a retried SetSink answers Changed false; a retried RemoveSink, NOT_FOUND).

// SinkSpec is what SetSink asks for.
type SinkSpec struct {
	// Namespace; empty: the client's namespace.
	Namespace string
	// URL as tickd's --sink takes it: http[s]://[user:password@]host[:port]/path[#json|#protobuf],
	// or grpc[s]://host:port. Credentials in it are never answered back (they show as ***@).
	URL string
	// Rate caps the pushes a second: "50/s", or "50/s,burst=10". Empty: no limit.
	Rate string
	// Secrets (whsec_<base64>, 1 to 4) sign every push by the Standard Webhooks spec. None:
	// the sink keeps the secrets it was given before, so a new rate or URL keeps signing.
	Secrets []string
	// ClearSecrets forgets the secrets given before (tickd refuses it together with Secrets).
	ClearSecrets bool
}

// Sink is a namespace's sink as tickd shows it.
type Sink struct {
	Namespace string
	// URL has any user:password@ replaced by ***@.
	URL    string
	Origin tickdpb.SinkOrigin
	// Paused by PauseSink: nothing is pushed until ResumeSink, across restarts.
	Paused bool
	Rate   string
	// Signed says its pushes are signed; the secrets themselves are never answered.
	Signed bool
}

// SinkChange is the answer to SetSink, PauseSink and ResumeSink.
type SinkChange struct {
	Sink Sink
	// Changed is false when the sink already was as asked.
	Changed bool
}

// SinkState is how a sink is doing, counted since this tickd process started it (a sink
// whose URL changed counts afresh).
type SinkState struct {
	Sink        Sink
	Circuit     tickdpb.SinkCircuit
	InFlight    uint64
	Delivered   uint64
	Retry       uint64
	Rejected    uint64
	Unreachable uint64
	// LastError is what the last push that did not deliver met; empty if none did.
	LastError string
	// Slowed counts the sink's asks to be sent less (429, a 503 with Retry-After), and
	// SlowedTo is the pushes a second they hold it to now (0: not slowed).
	Slowed   uint64
	SlowedTo float64
}

// SetSink makes tickd push the namespace's expirations to spec.URL. Durable once answered.
func (c *Client) SetSink(ctx context.Context, spec SinkSpec) (*SinkChange, error) {
	request := &tickdpb.SetSinkRequest{
		Namespace: c.namespaceOr(spec.Namespace), Url: spec.URL, Rate: spec.Rate,
		Secrets: spec.Secrets, ClearSecrets: spec.ClearSecrets,
	}
	var response *tickdpb.SetSinkResponse
	err := c.call(ctx, "SetSink", true, func(ctx context.Context) (err error) {
		response, err = c.sinks.SetSink(ctx, request)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &SinkChange{Sink: sinkFromProto(response.GetSink()), Changed: response.GetChanged()}, nil
}

// GetSink returns the namespace's sink (empty: the client's namespace); NOT_FOUND if none.
func (c *Client) GetSink(ctx context.Context, namespace string) (*Sink, error) {
	request := &tickdpb.GetSinkRequest{Namespace: c.namespaceOr(namespace)}
	var response *tickdpb.GetSinkResponse
	err := c.call(ctx, "GetSink", true, func(ctx context.Context) (err error) {
		response, err = c.sinks.GetSink(ctx, request)
		return err
	})
	if err != nil {
		return nil, err
	}
	sink := sinkFromProto(response.GetSink())
	return &sink, nil
}

// ListSinks returns every sink the token may see, --sink's and the API's, by namespace.
func (c *Client) ListSinks(ctx context.Context) ([]Sink, error) {
	var response *tickdpb.ListSinksResponse
	err := c.call(ctx, "ListSinks", true, func(ctx context.Context) (err error) {
		response, err = c.sinks.ListSinks(ctx, &tickdpb.ListSinksRequest{})
		return err
	})
	if err != nil {
		return nil, err
	}
	sinks := make([]Sink, len(response.GetSinks()))
	for i, sink := range response.GetSinks() {
		sinks[i] = sinkFromProto(sink)
	}
	return sinks, nil
}

// PauseSink stops the namespace's pushes until ResumeSink, across restarts; what fires
// meanwhile waits in tickd, spending no attempt. It returns once the pushes under way ended.
func (c *Client) PauseSink(ctx context.Context, namespace string) (*SinkChange, error) {
	request := &tickdpb.PauseSinkRequest{Namespace: c.namespaceOr(namespace)}
	var response *tickdpb.PauseSinkResponse
	err := c.call(ctx, "PauseSink", true, func(ctx context.Context) (err error) {
		response, err = c.sinks.PauseSink(ctx, request)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &SinkChange{Sink: sinkFromProto(response.GetSink()), Changed: response.GetChanged()}, nil
}

// ResumeSink lets a paused sink push again, what waited included.
func (c *Client) ResumeSink(ctx context.Context, namespace string) (*SinkChange, error) {
	request := &tickdpb.ResumeSinkRequest{Namespace: c.namespaceOr(namespace)}
	var response *tickdpb.ResumeSinkResponse
	err := c.call(ctx, "ResumeSink", true, func(ctx context.Context) (err error) {
		response, err = c.sinks.ResumeSink(ctx, request)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &SinkChange{Sink: sinkFromProto(response.GetSink()), Changed: response.GetChanged()}, nil
}

// RemoveSink removes a sink set through the API: the namespace's expirations wait for
// subscribers again.
func (c *Client) RemoveSink(ctx context.Context, namespace string) error {
	request := &tickdpb.RemoveSinkRequest{Namespace: c.namespaceOr(namespace)}
	return c.call(ctx, "RemoveSink", true, func(ctx context.Context) error {
		_, err := c.sinks.RemoveSink(ctx, request)
		return err
	})
}

// SinkStatus returns how the namespace's sink (empty: the client's namespace) is doing.
func (c *Client) SinkStatus(ctx context.Context, namespace string) (*SinkState, error) {
	states, err := c.sinkStatus(ctx, &tickdpb.SinkStatusRequest{Namespace: c.namespaceOr(namespace)})
	if err != nil {
		return nil, err
	}
	if len(states) != 1 {
		return nil, &Error{grpcStatus: status.New(codes.Internal, "tickd answered SinkStatus of one namespace without exactly one sink")}
	}
	return &states[0], nil
}

// AllSinkStatus returns how every sink the token may see is doing.
func (c *Client) AllSinkStatus(ctx context.Context) ([]SinkState, error) {
	return c.sinkStatus(ctx, &tickdpb.SinkStatusRequest{All: true})
}

func (c *Client) sinkStatus(ctx context.Context, request *tickdpb.SinkStatusRequest) ([]SinkState, error) {
	var response *tickdpb.SinkStatusResponse
	err := c.call(ctx, "SinkStatus", true, func(ctx context.Context) (err error) {
		response, err = c.sinks.SinkStatus(ctx, request)
		return err
	})
	if err != nil {
		return nil, err
	}
	states := make([]SinkState, len(response.GetSinks()))
	for i, state := range response.GetSinks() {
		states[i] = SinkState{
			Sink: sinkFromProto(state.GetSink()), Circuit: state.GetCircuit(),
			InFlight: state.GetInFlight(), Delivered: state.GetDelivered(), Retry: state.GetRetry(),
			Rejected: state.GetRejected(), Unreachable: state.GetUnreachable(), LastError: state.GetLastError(),
			Slowed: state.GetSlowed(), SlowedTo: state.GetSlowedTo(),
		}
	}
	return states, nil
}

func sinkFromProto(sink *tickdpb.SinkView) Sink {
	return Sink{
		Namespace: sink.GetNamespace(), URL: sink.GetUrl(), Origin: sink.GetOrigin(),
		Paused: sink.GetPaused(), Rate: sink.GetRate(), Signed: sink.GetSigned(),
	}
}
