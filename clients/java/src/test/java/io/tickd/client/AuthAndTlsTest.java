package io.tickd.client;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import io.grpc.Status;
import io.tickd.v1.TimerRef;
import io.tickd.v1.TimerSpec;
import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.After;
import org.junit.BeforeClass;
import org.junit.Test;

/** Bearer tokens and TLS (server-authenticated, then mutual) against a real tickd. */
public class AuthAndTlsTest {
    private static TestCertificates certificates;
    private TickdServer server;

    @BeforeClass
    public static void makeCertificates() throws Exception {
        certificates = TestCertificates.create(TickdServer.newScratchDir("certs-"));
    }

    @After
    public void stopTickd() {
        if (server != null) {
            server.close();
        }
    }

    private static final TimerSpec HOUR = TimerSpec.newBuilder().setDelay(ProtoTime.duration(Duration.ofHours(1))).build();

    @Test
    public void aTokenIsRequiredAndGrantsItsNamespaces() throws Exception {
        Path tokens = TickdServer.newScratchDir("tokens-").resolve("tokens");
        Files.write(tokens, "team-a-secret orders,billing\n".getBytes());
        server = TickdServer.start("--sync", "none", "--auth-token-file", tokens.toString());
        try (TickdClient anonymous = server.client().namespace("orders").build()) {
            assertCode(Status.Code.UNAUTHENTICATED, () -> anonymous.register(HOUR));
        }
        try (TickdClient wrongToken = server.client().namespace("orders").bearerToken("guess").build()) {
            assertCode(Status.Code.UNAUTHENTICATED, () -> wrongToken.register(HOUR));
        }
        try (TickdClient teamA = server.client().namespace("orders").bearerToken("team-a-secret").build()) {
            assertTrue(teamA.register(HOUR).getCreated());
            assertEquals(1, teamA.pendingCount());
        }
        try (TickdClient elsewhere = server.client().namespace("hr").bearerToken("team-a-secret").build()) {
            assertCode(Status.Code.PERMISSION_DENIED, () -> elsewhere.register(HOUR));
        }
    }

    @Test
    public void aSubscriberAndAKeeperRefusedByTickdEndWithTheRefusal() throws Exception {
        Path tokens = TickdServer.newScratchDir("tokens-").resolve("tokens");
        Files.write(tokens, "team-a-secret orders\n".getBytes());
        server = TickdServer.start("--sync", "none", "--auth-token-file", tokens.toString());
        try (TickdClient anonymous = server.client().namespace("orders").build();
                TickdClient wrongToken = server.client().namespace("orders").bearerToken("guess").build();
                TickdClient otherNamespace = server.client().namespace("hr").bearerToken("team-a-secret").build()) {
            CompletableFuture<TickdException> told = new CompletableFuture<>();
            Subscriber subscriber = anonymous.subscriber(delivery -> { }).listener(new SubscriberListener() {
                @Override
                public void onFailed(TickdException error) {
                    told.complete(error);
                }
            }).start();
            assertEquals(Status.Code.UNAUTHENTICATED, endedWith(subscriber.ended()).code());
            assertEquals(Status.Code.UNAUTHENTICATED, told.get(60, TimeUnit.SECONDS).code());
            subscriber.stop();

            Subscriber elsewhere = otherNamespace.subscriber(delivery -> { }).start();
            assertEquals(Status.Code.PERMISSION_DENIED, endedWith(elsewhere.ended()).code());
            elsewhere.stop();

            CompletableFuture<TickdException> keeperTold = new CompletableFuture<>();
            LeaseKeeper keeper = wrongToken.leaseKeeper(new LeaseListener() {
                @Override
                public void onLost(TimerRef lease, TickdException reason) {
                }

                @Override
                public void onFailed(TickdException error) {
                    keeperTold.complete(error);
                }
            });
            assertEquals(Status.Code.UNAUTHENTICATED, endedWith(keeper.ended()).code());
            assertEquals(Status.Code.UNAUTHENTICATED, keeperTold.get(60, TimeUnit.SECONDS).code());
            keeper.close();
        }
    }

    /** Waits (generously) for a subscriber's or keeper's end, which must be a failure. */
    private static TickdException endedWith(CompletableFuture<Void> ended) throws Exception {
        try {
            ended.get(60, TimeUnit.SECONDS);
        } catch (ExecutionException failed) {
            return (TickdException) failed.getCause();
        }
        fail("ended without an error");
        return null;
    }

    @Test
    public void useTlsTrustsTheJdkRootsNotAnUnknownCa() throws Exception {
        server = TickdServer.start("--sync", "none",
                "--tls-cert", certificates.serverCertificate.toString(), "--tls-key", certificates.serverKey.toString());
        // The test CA is in no JDK trust store: a TLS client on the JDK's roots must refuse
        // tickd's certificate (a plaintext client would fail differently: no TLS handshake).
        try (TickdClient jdkRoots = server.client().namespace("tls").useTls().retryPolicy(RetryPolicy.none()).build()) {
            try {
                jdkRoots.register(HOUR);
                fail("a certificate from an unknown CA must not be trusted");
            } catch (TickdException refused) {
                assertEquals(Status.Code.UNAVAILABLE, refused.code());
                assertTrue(describe(refused), describe(refused).contains("PKIX"));
            }
        }
    }

    private static String describe(Throwable error) {
        StringBuilder all = new StringBuilder();
        for (Throwable cause = error; cause != null; cause = cause.getCause()) {
            all.append(cause).append(" | ");
        }
        return all.toString();
    }

    @Test
    public void tlsWithTheServersCa() throws Exception {
        server = TickdServer.start("--sync", "none",
                "--tls-cert", certificates.serverCertificate.toString(), "--tls-key", certificates.serverKey.toString());
        try (TickdClient trusting = server.client().namespace("tls").trustedCertificates(certificates.ca.toFile()).build()) {
            assertTrue(trusting.register(HOUR).getCreated());
        }
        try (TickdClient plaintext = server.client().namespace("tls").retryPolicy(RetryPolicy.none()).build()) {
            // grpc-java reads the TLS alert as a broken HTTP/2 preface: INTERNAL or UNAVAILABLE.
            try {
                plaintext.register(HOUR);
                fail("a plaintext client must not get through to a TLS tickd");
            } catch (TickdException refused) {
                assertTrue(refused.getMessage(), refused.code() == Status.Code.INTERNAL || refused.code() == Status.Code.UNAVAILABLE);
            }
        }
    }

    @Test
    public void mutualTlsNeedsAClientCertificate() throws Exception {
        server = TickdServer.start("--sync", "none",
                "--tls-cert", certificates.serverCertificate.toString(), "--tls-key", certificates.serverKey.toString(),
                "--tls-client-ca", certificates.ca.toString());
        File ca = certificates.ca.toFile();
        try (TickdClient withCertificate = server.client().namespace("mtls").trustedCertificates(ca)
                .clientCertificate(certificates.clientCertificate.toFile(), certificates.clientKey.toFile()).build()) {
            assertTrue(withCertificate.register(HOUR).getCreated());
        }
        try (TickdClient withoutCertificate = server.client().namespace("mtls").trustedCertificates(ca)
                .retryPolicy(RetryPolicy.none()).build()) {
            assertCode(Status.Code.UNAVAILABLE, () -> withoutCertificate.register(HOUR));
        }
    }

    private static void assertCode(Status.Code expected, Runnable call) {
        try {
            call.run();
            fail("expected " + expected);
        } catch (TickdException error) {
            assertEquals(error.getMessage(), expected, error.code());
        }
    }
}
