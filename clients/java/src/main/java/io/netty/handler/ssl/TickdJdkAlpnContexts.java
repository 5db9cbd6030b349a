package io.netty.handler.ssl;

import io.netty.handler.codec.http2.Http2SecurityUtil;
import java.io.File;
import javax.net.ssl.SSLException;

/**
 * Client TLS contexts that negotiate HTTP/2 with the JDK's own ALPN (Java 9+), for Netty
 * builds that lack {@code JdkAlpnApplicationProtocolNegotiator}.
 *
 * <p>Why this class sits in Netty's package: Debian's libnetty-java 4.1.48 is built without
 * that negotiator (it drags in Jetty ALPN and Conscrypt), so {@code GrpcSslContexts.forClient()}
 * fails with "JDK provider does not support ALPN protocol" although the JDK itself does ALPN.
 * Netty's {@code Java9SslEngine}, which does the work, is still in the jar but package-private,
 * as is the negotiator base class; this class wires them together exactly as the missing
 * negotiator would. The tickd client uses it only after the ordinary way failed, so with a
 * complete Netty it is never used. (On the module path the split package would not load; the
 * client is meant for the class path, where Debian's jars live.)
 */
public final class TickdJdkAlpnContexts {
    private static final String HTTP2 = "h2";

    private TickdJdkAlpnContexts() {
    }

    /**
     * A client context trusting {@code trustedCertificates} (null: the JDK's default trust) and
     * presenting {@code certificateChain}/{@code privateKey} (null: no client certificate).
     */
    @SuppressWarnings("deprecation")
    public static SslContext forClient(File trustedCertificates, File certificateChain, File privateKey) throws SSLException {
        JdkApplicationProtocolNegotiator http2 = new JdkBaseApplicationProtocolNegotiator(
                (engine, negotiator, isServer) -> new Java9SslEngine(engine, negotiator, isServer),
                JdkBaseApplicationProtocolNegotiator.FAIL_SELECTOR_FACTORY,
                JdkBaseApplicationProtocolNegotiator.FAIL_SELECTION_LISTENER_FACTORY,
                HTTP2);
        return new JdkSslClientContext(trustedCertificates, null, certificateChain, privateKey, null, null,
                Http2SecurityUtil.CIPHERS, SupportedCipherSuiteFilter.INSTANCE, http2, 0, 0);
    }
}
