package tickd

import (
	"crypto/tls"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
)

// Option configures a Client at Dial.
type Option func(*clientOptions)

type clientOptions struct {
	token       string
	tls         *TLS
	tlsConfig   *tls.Config
	namespace   string
	callTimeout time.Duration
	retry       RetryPolicy
	keepalive   keepalive.ClientParameters
	dialOptions []grpc.DialOption
	tracing     Tracing
}

// TLS names the PEM files of a TLS connection. CAFile is the authority that signed tickd's
// certificate (empty: the system's roots); CertFile and KeyFile are this client's
// certificate, for a tickd started with --tls-client-ca. ServerName overrides the name
// checked in tickd's certificate (default: the host of the address dialed).
type TLS struct {
	CAFile     string
	CertFile   string
	KeyFile    string
	ServerName string
}

// RetryPolicy says how idempotent calls are retried when tickd is UNAVAILABLE (down,
// restarting, or unreachable): up to MaxAttempts attempts in all, waiting Backoff between
// them. The same back-off paces gRPC's reconnection, so that a retry finds a fresh
// connection soon after tickd is back.
//
// Retried: registrations WITH a key (a batch only when every item has one), Cancel, Get,
// Touch, Ack, Pending (and the calls built on it), Reschedule to a deadline, and every call
// of the Sinks service (each sets a state rather than adding to one). NOT retried:
// registrations without a key (an attempt that reached tickd before the connection broke
// has registered the timer, and a retry would register it a second time), Reschedule with a
// delay (a retry would count the delay again from a later now), and Redrive (a retry
// would report as not dead the expirations the lost attempt sent back).
//
// A retried call can report what its first attempt already did: a retried Cancel may answer
// cancelled=false, a retried Ack may list the id as unknown.
type RetryPolicy struct {
	MaxAttempts int
	Backoff     Backoff
	// OnRetry, when set, is told of each failed attempt that will be retried.
	OnRetry func(method string, attempt int, err error)
}

// DefaultRetryPolicy: 5 attempts, 100ms doubling to at most 2s, with jitter (about 4s in all).
var DefaultRetryPolicy = RetryPolicy{
	MaxAttempts: 5,
	Backoff:     Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Multiplier: 2},
}

// retryableCodes are the codes after which an idempotent call is tried again.
var retryableCodes = map[codes.Code]bool{codes.Unavailable: true}

// WithToken sends `authorization: Bearer TOKEN` on every call (tickd's --auth-token-file).
func WithToken(token string) Option {
	return func(o *clientOptions) { o.token = token }
}

// WithTLS connects with TLS using the given PEM files.
func WithTLS(files TLS) Option {
	return func(o *clientOptions) { o.tls = &files }
}

// WithTLSConfig connects with TLS using a ready crypto/tls configuration.
func WithTLSConfig(config *tls.Config) Option {
	return func(o *clientOptions) { o.tlsConfig = config }
}

// WithNamespace sets the namespace used when a call names none (default: "", which tickd
// reads as its default namespace; for Pending, "" means every namespace).
func WithNamespace(namespace string) Option {
	return func(o *clientOptions) { o.namespace = namespace }
}

// WithCallTimeout bounds each attempt of each unary call (default 10s; 0: no bound beyond
// the caller's context). Streams are not bounded by it.
func WithCallTimeout(timeout time.Duration) Option {
	return func(o *clientOptions) { o.callTimeout = timeout }
}

// WithRetry replaces DefaultRetryPolicy; MaxAttempts 1 turns retries off.
func WithRetry(policy RetryPolicy) Option {
	return func(o *clientOptions) { o.retry = policy }
}

// DefaultKeepalive is how the connection checks that tickd is still there: an HTTP/2 ping
// after 30s without traffic, even with no call open, and the connection is closed (streams
// break with UNAVAILABLE, and subscribers and lease keepers reconnect) when the ping is not
// answered within 20s. Without it, a tickd host that vanished without closing the TCP
// connection (a crash of the machine, a network partition, a NAT dropping the flow) would
// leave a subscriber or lease keeper waiting on a dead stream until the kernel gives up,
// which can take many minutes, while its leases expire. tickd (tonic/hyper) answers pings
// and has no ping policy that would refuse them (no GOAWAY ENHANCE_YOUR_CALM for pings).
var DefaultKeepalive = keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 20 * time.Second, PermitWithoutStream: true}

// WithKeepalive replaces DefaultKeepalive (grpc-go raises a Time below 10s to 10s). A zero
// ClientParameters turns client pings off.
func WithKeepalive(parameters keepalive.ClientParameters) Option {
	return func(o *clientOptions) { o.keepalive = parameters }
}

// WithDialOptions passes further options to grpc.DialContext (interceptors, a dialer, ...).
func WithDialOptions(options ...grpc.DialOption) Option {
	return func(o *clientOptions) { o.dialOptions = append(o.dialOptions, options...) }
}
