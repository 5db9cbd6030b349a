package io.tickd.client;

import io.grpc.Channel;
import io.grpc.ClientInterceptor;
import io.grpc.ManagedChannel;
import io.grpc.netty.GrpcSslContexts;
import io.grpc.netty.NettyChannelBuilder;
import io.netty.handler.ssl.SslContext;
import io.netty.handler.ssl.SslContextBuilder;
import io.netty.handler.ssl.TickdJdkAlpnContexts;
import java.io.File;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.TimeUnit;
import javax.net.ssl.SSLException;

/**
 * Options for a {@link TickdClient}: where tickd is, how to authenticate, which namespace to
 * default to, how long a call may take and how calls are retried.
 */
public final class TickdClientBuilder {
    private String target = "127.0.0.1:50051";
    private Channel channel;
    private File trustedCertificates;
    private File clientCertificateChain;
    private File clientPrivateKey;
    private String serverNameOverride;
    private String bearerToken;
    private String namespace = "";
    private Duration callDeadline = Duration.ofSeconds(10);
    private RetryPolicy retryPolicy = RetryPolicy.defaults();
    private RetryPolicy reconnectPolicy = RetryPolicy.reconnectDefaults();
    private boolean tls;
    private Duration keepAliveTime = Duration.ofSeconds(30);
    private Duration keepAliveTimeout = Duration.ofSeconds(20);
    private final List<ClientInterceptor> interceptors = new ArrayList<>();
    private TracingHook tracing = TracingHook.NONE;

    TickdClientBuilder() {
    }

    /** {@code host:port} (or any grpc-java target, e.g. {@code dns:///tickd:50051}). */
    public TickdClientBuilder target(String target) {
        this.target = Objects.requireNonNull(target);
        return this;
    }

    /**
     * Uses a channel the caller made and owns (its own TLS, interceptors, load balancing);
     * target and TLS options are then ignored, and {@link TickdClient#close()} leaves it open.
     */
    public TickdClientBuilder channel(Channel channel) {
        this.channel = Objects.requireNonNull(channel);
        return this;
    }

    /**
     * Connects with TLS, trusting the JDK's default trust roots (its cacerts, or
     * {@code javax.net.ssl.trustStore}): for a tickd whose certificate a public CA signed.
     * {@link #trustedCertificates} and {@link #clientCertificate} imply TLS already.
     */
    public TickdClientBuilder useTls() {
        this.tls = true;
        return this;
    }

    /**
     * HTTP/2 keepalive pings: after {@code time} without reads the channel pings tickd, and
     * drops the connection if no answer comes within {@code timeout} (so a stream over a dead
     * connection, e.g. a NAT that forgot it, breaks and reconnects instead of hanging). Pings
     * go even without calls in flight, which keeps idle subscriber and KeepAlive connections
     * open through middleboxes. Default 30 s / 20 s; tickd (hyper's HTTP/2) accepts pings at
     * any rate. {@code Duration.ZERO} as {@code time} turns the pings off.
     */
    public TickdClientBuilder keepAlive(Duration time, Duration timeout) {
        if (time.isNegative() || timeout.isNegative() || timeout.isZero()) {
            throw new IllegalArgumentException("keepAlive needs time >= 0 and timeout > 0");
        }
        this.keepAliveTime = time;
        this.keepAliveTimeout = timeout;
        return this;
    }

    /** Connects with TLS, trusting the CA certificates in this PEM file. */
    public TickdClientBuilder trustedCertificates(File caPem) {
        this.trustedCertificates = Objects.requireNonNull(caPem);
        return this;
    }

    /** Presents this client certificate (PEM chain, PKCS#8 PEM key), for a tickd with {@code --tls-client-ca}. */
    public TickdClientBuilder clientCertificate(File certificateChainPem, File privateKeyPem) {
        this.clientCertificateChain = Objects.requireNonNull(certificateChainPem);
        this.clientPrivateKey = Objects.requireNonNull(privateKeyPem);
        return this;
    }

    /** The name the server's certificate is checked against, when it is not the target's host. */
    public TickdClientBuilder serverNameOverride(String serverName) {
        this.serverNameOverride = Objects.requireNonNull(serverName);
        return this;
    }

    /** Sends {@code authorization: Bearer TOKEN} on every call. */
    public TickdClientBuilder bearerToken(String token) {
        this.bearerToken = Objects.requireNonNull(token);
        return this;
    }

    /** The namespace used where a request leaves it empty (default: tickd's default, ""). */
    public TickdClientBuilder namespace(String namespace) {
        this.namespace = Objects.requireNonNull(namespace);
        return this;
    }

    /** How long each unary call (each attempt of it) may take; default 10 s. */
    public TickdClientBuilder callDeadline(Duration deadline) {
        if (deadline.isNegative() || deadline.isZero()) {
            throw new IllegalArgumentException("callDeadline must be positive");
        }
        this.callDeadline = deadline;
        return this;
    }

    /** Retries of idempotent calls on UNAVAILABLE (not the streams' reconnects: see {@link #reconnectBackoff}). */
    public TickdClientBuilder retryPolicy(RetryPolicy policy) {
        this.retryPolicy = Objects.requireNonNull(policy);
        return this;
    }

    /**
     * The back-off between reconnects of lease keepers and subscribers (its maxAttempts is
     * ignored: they reconnect until closed); default {@link RetryPolicy#reconnectDefaults()}.
     * It must start above zero.
     */
    public TickdClientBuilder reconnectBackoff(RetryPolicy policy) {
        this.reconnectPolicy = Objects.requireNonNull(policy).requirePositiveBackoff();
        return this;
    }

    /** Adds an interceptor to every call (tracing, metrics, extra metadata); it sees each retry as its own call. */
    public TickdClientBuilder interceptor(ClientInterceptor interceptor) {
        this.interceptors.add(Objects.requireNonNull(interceptor));
        return this;
    }

    /**
     * Traces registrations and handlers with this hook (see {@link TracingHook}): register,
     * registerAll and reschedule send the W3C context it names, and each subscriber's handler
     * runs inside the span it starts. Default {@link TracingHook#NONE}.
     */
    public TickdClientBuilder tracing(TracingHook hook) {
        this.tracing = Objects.requireNonNull(hook);
        return this;
    }

    public TickdClient build() {
        if (channel != null) {
            return new TickdClient(null, channel, interceptors, bearerToken, namespace, callDeadline, retryPolicy,
                    reconnectPolicy, tracing);
        }
        ManagedChannel owned = buildChannel();
        return new TickdClient(owned, owned, interceptors, bearerToken, namespace, callDeadline, retryPolicy,
                reconnectPolicy, tracing);
    }

    /**
     * Netty's usual client context, or (for Debian's Netty, built without JDK ALPN support in
     * its usual place) the same context wired by {@link TickdJdkAlpnContexts}.
     */
    private SslContext clientTlsContext() {
        try {
            try {
                SslContextBuilder ssl = GrpcSslContexts.forClient();
                if (trustedCertificates != null) {
                    ssl.trustManager(trustedCertificates);
                }
                if (clientCertificateChain != null) {
                    ssl.keyManager(clientCertificateChain, clientPrivateKey);
                }
                return ssl.build();
            } catch (UnsupportedOperationException noAlpnInThisNetty) {
                return TickdJdkAlpnContexts.forClient(trustedCertificates, clientCertificateChain, clientPrivateKey);
            }
        } catch (SSLException | IllegalArgumentException error) {
            throw new IllegalArgumentException("cannot set up TLS from the given files: " + error.getMessage(), error);
        }
    }

    private ManagedChannel buildChannel() {
        NettyChannelBuilder builder = NettyChannelBuilder.forTarget(target);
        if (!keepAliveTime.isZero()) {
            builder.keepAliveTime(keepAliveTime.toNanos(), TimeUnit.NANOSECONDS)
                    .keepAliveTimeout(keepAliveTimeout.toNanos(), TimeUnit.NANOSECONDS)
                    .keepAliveWithoutCalls(true);
        }
        if (!tls && trustedCertificates == null && clientCertificateChain == null) {
            return builder.usePlaintext().build();
        }
        builder.sslContext(clientTlsContext());
        if (serverNameOverride != null) {
            builder.overrideAuthority(serverNameOverride);
        }
        return builder.build();
    }
}
