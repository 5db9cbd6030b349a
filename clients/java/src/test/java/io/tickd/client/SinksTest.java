package io.tickd.client;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import com.google.gson.JsonParser;
import com.sun.net.httpserver.HttpServer;
import io.grpc.Status;
import io.tickd.v1.PauseSinkResponse;
import io.tickd.v1.ResumeSinkResponse;
import io.tickd.v1.SetSinkRequest;
import io.tickd.v1.SetSinkResponse;
import io.tickd.v1.SinkOrigin;
import io.tickd.v1.SinkState;
import io.tickd.v1.SinkView;
import io.tickd.v1.TimerSpec;
import java.io.InputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import org.junit.After;
import org.junit.Before;
import org.junit.Test;

/**
 * Push sinks through {@link TickdClient#sinks()}, against a real tickd pushing to a real HTTP
 * receiver: set, pushed to, listed with the URL's credentials masked, paused (nothing pushed
 * while another namespace's sink is), resumed, removed; and a refused rate.
 */
public class SinksTest {
    private TickdServer server;
    private HttpServer receiver;
    /** Timer keys pushed, by request path (the body is the expiration in proto3 JSON). */
    private final Map<String, List<String>> pushes = new HashMap<>();

    @Before
    public void start() throws Exception {
        server = TickdServer.start("--sink-allow", "127.0.0.1");
        receiver = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        receiver.createContext("/", exchange -> {
            String body;
            try (InputStream in = exchange.getRequestBody()) {
                body = new String(in.readAllBytes(), StandardCharsets.UTF_8);
            }
            String key = JsonParser.parseString(body).getAsJsonObject().getAsJsonObject("timer").get("key").getAsString();
            exchange.sendResponseHeaders(200, -1);
            exchange.close();
            synchronized (pushes) {
                pushes.computeIfAbsent(exchange.getRequestURI().getPath(), path -> new ArrayList<>()).add(key);
                pushes.notifyAll();
            }
        });
        receiver.start();
    }

    @After
    public void stop() {
        if (receiver != null) {
            receiver.stop(0);
        }
        if (server != null) {
            server.close();
        }
    }

    private String receiverAddress() {
        return "127.0.0.1:" + receiver.getAddress().getPort();
    }

    private List<String> keys(String path) {
        synchronized (pushes) {
            return pushes.getOrDefault(path, List.of()).stream().sorted().collect(Collectors.toList());
        }
    }

    /** Returns once every key has been pushed to path: woken by each push, bounded by Await.GENEROUS. */
    private void awaitPushes(String path, String... expected) throws InterruptedException {
        long end = System.nanoTime() + Await.GENEROUS.toNanos();
        synchronized (pushes) {
            while (!pushes.getOrDefault(path, List.of()).containsAll(Arrays.asList(expected))) {
                long left = end - System.nanoTime();
                if (left <= 0) {
                    fail("timed out waiting for pushes of " + Arrays.toString(expected) + " to " + path + ": " + pushes);
                }
                pushes.wait(Math.max(1, left / 1_000_000));
            }
        }
    }

    private static void registerSoon(TickdClient tickd, Duration delay, String... keys) {
        for (String key : keys) {
            tickd.register(TimerSpec.newBuilder().setKey(key).setDelay(ProtoTime.duration(delay)).build());
        }
    }

    @Test
    public void aSinkPushesIsListedPausedResumedAndRemoved() throws Exception {
        try (TickdClient tickd = server.client().namespace("pushed").build()) {
            TickdClient control = tickd.withNamespace("control");
            String masked = "http://***@" + receiverAddress() + "/pushed";
            String url = "http://user:secret@" + receiverAddress() + "/pushed";

            SetSinkResponse set = tickd.sinks().set(url, "50/s,burst=10");
            assertTrue(set.getChanged());
            assertEquals("pushed", set.getSink().getNamespace());
            assertEquals(masked, set.getSink().getUrl());
            assertEquals("50/s,burst=10", set.getSink().getRate());
            assertEquals(SinkOrigin.SINK_ORIGIN_API, set.getSink().getOrigin());
            assertFalse("the same sink again, as a retry would set it", tickd.sinks().set(url, "50/s,burst=10").getChanged());
            control.sinks().set("http://" + receiverAddress() + "/control");

            registerSoon(tickd, Duration.ofMillis(50), "first", "second", "third");
            awaitPushes("/pushed", "first", "second", "third");
            assertEquals(List.of("first", "second", "third"), keys("/pushed"));

            Map<String, String> listed = tickd.sinks().list().stream()
                    .collect(Collectors.toMap(SinkView::getNamespace, SinkView::getUrl));
            assertEquals(masked, listed.get("pushed"));
            assertEquals("http://" + receiverAddress() + "/control", listed.get("control"));

            PauseSinkResponse paused = tickd.sinks().pause();
            assertTrue(paused.getChanged());
            assertTrue(paused.getSink().getPaused());
            assertFalse(tickd.sinks().pause().getChanged());
            assertTrue(tickd.sinks().get().getPaused());
            // Due before the control's timer: once that one is pushed, these have fired, and wait.
            registerSoon(tickd, Duration.ofMillis(50), "held-1", "held-2");
            registerSoon(control, Duration.ofMillis(500), "later");
            awaitPushes("/control", "later");
            assertEquals(List.of("first", "second", "third"), keys("/pushed"));
            SinkState state = tickd.sinks().status();
            assertTrue(state.getSink().getPaused());
            assertEquals(3, state.getDelivered());
            List<String> all = tickd.sinks().statusOfAll().stream()
                    .map(each -> each.getSink().getNamespace()).collect(Collectors.toList());
            assertTrue(all.toString(), all.containsAll(List.of("pushed", "control")));

            ResumeSinkResponse resumed = tickd.sinks().resume();
            assertTrue(resumed.getChanged());
            assertFalse(resumed.getSink().getPaused());
            awaitPushes("/pushed", "held-1", "held-2");
            assertEquals(List.of("first", "held-1", "held-2", "second", "third"), keys("/pushed"));

            tickd.sinks().remove();
            try {
                tickd.sinks().get();
                fail("GetSink after RemoveSink answered");
            } catch (TickdException missing) {
                assertEquals(Status.Code.NOT_FOUND, missing.code());
            }
        }
    }

    @Test
    public void secretsStayUntilCleared() {
        try (TickdClient tickd = server.client().namespace("signed").build()) {
            String url = "http://127.0.0.1:9/unused";
            assertTrue(tickd.sinks().set(SetSinkRequest.newBuilder().setUrl(url)
                    .addSecrets("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").build()).getSink().getSigned());
            assertTrue(tickd.sinks().set(url, "5/s").getSink().getSigned());
            assertFalse(tickd.sinks().set(SetSinkRequest.newBuilder().setUrl(url).setClearSecrets(true).build())
                    .getSink().getSigned());
        }
    }

    @Test
    public void aRateTickdCannotReadIsInvalidArgumentNamingRate() {
        try (TickdClient tickd = server.client().namespace("bad").build()) {
            tickd.sinks().set("http://127.0.0.1:9/x", "fast");
            fail("SetSink with rate \"fast\" answered");
        } catch (TickdException refused) {
            assertEquals(Status.Code.INVALID_ARGUMENT, refused.code());
            assertTrue(refused.description(), refused.description().contains("rate"));
        }
    }
}
