package tickd

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/keepalive"

	"github.com/tickd/tickd/clients/go/tickdpb"
)

// DefaultCallTimeout bounds each attempt of a unary call unless WithCallTimeout says otherwise.
const DefaultCallTimeout = 10 * time.Second

// Client is a connection to tickd. It is safe for concurrent use; one per process is enough.
type Client struct {
	connection *grpc.ClientConn
	stub       tickdpb.TimersClient
	sinks      tickdpb.SinksClient
	options    clientOptions
}

// Dial connects to tickd at target ("host:port", or any gRPC target). The connection is
// made in the background; the first call waits for it (and fails UNAVAILABLE if tickd
// cannot be reached, retried for the calls that are safe to retry).
func Dial(ctx context.Context, target string, options ...Option) (*Client, error) {
	settings := clientOptions{callTimeout: DefaultCallTimeout, retry: DefaultRetryPolicy, keepalive: DefaultKeepalive}
	for _, option := range options {
		option(&settings)
	}
	if settings.retry.MaxAttempts < 1 {
		settings.retry.MaxAttempts = 1
	}
	transport, err := transportOption(&settings)
	if err != nil {
		return nil, err
	}
	reconnect := settings.retry.Backoff.withDefaults()
	dialOptions := []grpc.DialOption{
		transport,
		// gRPC's own reconnection back-off grows to 120s by default: after an outage of a
		// minute, calls would fail UNAVAILABLE for minutes after tickd is back.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay: reconnect.Initial, Multiplier: reconnect.Multiplier, Jitter: 0.2, MaxDelay: reconnect.Max,
			},
			MinConnectTimeout: 5 * time.Second,
		}),
	}
	if settings.keepalive != (keepalive.ClientParameters{}) {
		dialOptions = append(dialOptions, grpc.WithKeepaliveParams(settings.keepalive))
	}
	if settings.token != "" {
		dialOptions = append(dialOptions, grpc.WithPerRPCCredentials(bearerToken(settings.token)))
	}
	dialOptions = append(dialOptions, settings.dialOptions...)
	connection, err := grpc.DialContext(ctx, target, dialOptions...)
	if err != nil {
		return nil, newError(err)
	}
	return &Client{
		connection: connection,
		stub:       tickdpb.NewTimersClient(connection),
		sinks:      tickdpb.NewSinksClient(connection),
		options:    settings,
	}, nil
}

// Close closes the connection; streams still open on it end.
func (c *Client) Close() error { return c.connection.Close() }

// InNamespace is a view of the same connection whose calls default to another namespace
// (closing either closes both).
func (c *Client) InNamespace(namespace string) *Client {
	view := *c
	view.options.namespace = namespace
	return &view
}

// Namespace is the namespace calls use when they name none.
func (c *Client) Namespace() string { return c.options.namespace }

// Stub is the generated gRPC client, for what this package does not wrap.
func (c *Client) Stub() tickdpb.TimersClient { return c.stub }

// SinksStub is the generated client of the Sinks service, on the same connection.
func (c *Client) SinksStub() tickdpb.SinksClient { return c.sinks }

// namespaceOr is the given namespace, or the client's default when it is empty.
func (c *Client) namespaceOr(namespace string) string {
	if namespace != "" {
		return namespace
	}
	return c.options.namespace
}

// call runs one unary attempt, bounded by the call timeout; with retry, UNAVAILABLE answers
// are tried again per the retry policy, as long as ctx allows.
func (c *Client) call(ctx context.Context, method string, retry bool, attempt func(context.Context) error) error {
	attempts := c.options.retry.MaxAttempts
	if !retry {
		attempts = 1
	}
	for number := 1; ; number++ {
		err := c.attemptOnce(ctx, attempt)
		if err == nil {
			return nil
		}
		if number >= attempts || !retryableCodes[codeOf(err)] || ctx.Err() != nil {
			return newError(err)
		}
		if c.options.retry.OnRetry != nil {
			c.options.retry.OnRetry(method, number, err)
		}
		if sleepContext(ctx, c.options.retry.Backoff.Delay(number)) != nil {
			return newError(err)
		}
	}
}

func (c *Client) attemptOnce(ctx context.Context, attempt func(context.Context) error) error {
	if c.options.callTimeout <= 0 {
		return attempt(ctx)
	}
	bounded, cancel := context.WithTimeout(ctx, c.options.callTimeout)
	defer cancel()
	return attempt(bounded)
}
