package io.tickd.client;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;

import io.tickd.v1.TimerSpec;
import java.time.Duration;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.logging.Handler;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import org.junit.AfterClass;
import org.junit.BeforeClass;
import org.junit.Test;

/** The subscriber's handler limit, manual acks and clean stop, against a real tickd. */
public class SubscriberTest {
    private static TickdServer server;

    @BeforeClass
    public static void startTickd() throws Exception {
        server = TickdServer.start("--sync", "none");
    }

    @AfterClass
    public static void stopTickd() {
        if (server != null) {
            server.close();
        }
    }

    private static void registerDueNow(TickdClient tickd, String key) {
        tickd.register(TimerSpec.newBuilder().setKey(key).setDelay(ProtoTime.duration(Duration.ZERO)).build());
    }

    @Test
    public void noMoreHandlersRunAtOnceThanTheLimit() throws Exception {
        int limit = 3;
        AtomicInteger inFlight = new AtomicInteger();
        AtomicInteger mostInFlight = new AtomicInteger();
        CountDownLatch release = new CountDownLatch(1);
        Set<String> handled = ConcurrentHashMap.newKeySet();
        try (TickdClient tickd = server.client().namespace("limit").build();
                Subscriber subscriber = tickd.subscriber(delivery -> {
                    mostInFlight.accumulateAndGet(inFlight.incrementAndGet(), Math::max);
                    try {
                        release.await(60, TimeUnit.SECONDS);
                        handled.add(delivery.timer().getKey());
                    } finally {
                        inFlight.decrementAndGet();
                    }
                }).maxInFlight(limit).start()) {
            for (int i = 0; i < 12; i++) {
                registerDueNow(tickd, "t" + i);
            }
            Await.until("the limit of handlers to be busy at once", () -> inFlight.get() == limit);
            release.countDown();
            Await.until("all twelve handled", () -> handled.size() == 12);
            assertEquals("at most " + limit + " at once, and the limit was reached", limit, mostInFlight.get());
        }
    }

    @Test
    public void aHandlerThatThrowsIsLoggedWhenNoListenerSaysOtherwise() throws Exception {
        List<LogRecord> records = new CopyOnWriteArrayList<>();
        Handler capture = new Handler() {
            @Override
            public void publish(LogRecord record) {
                records.add(record);
            }

            @Override
            public void flush() {
            }

            @Override
            public void close() {
            }
        };
        Logger logger = Logger.getLogger(Subscriber.class.getName());
        logger.addHandler(capture);
        try (TickdClient tickd = server.client().namespace("loud").build();
                Subscriber subscriber = tickd.subscriber(delivery -> {
                    throw new IllegalStateException("this handler fails loudly");
                }).start()) {
            String id = tickd.register(TimerSpec.newBuilder().setDelay(ProtoTime.duration(Duration.ZERO)).build())
                    .getTimer().getId();
            Await.until("the failure to be logged",
                    () -> records.stream().anyMatch(r -> r.getMessage().contains("handler failed")));
            LogRecord record = records.stream().filter(r -> r.getMessage().contains("handler failed")).findFirst().get();
            assertEquals(java.util.logging.Level.WARNING, record.getLevel());
            assertTrue(record.getMessage(), record.getMessage().contains("timer " + id + ", attempt 1"));
            assertEquals("this handler fails loudly", record.getThrown().getMessage());
        } finally {
            logger.removeHandler(capture);
        }
    }

    @Test
    public void manualAckLeavesTheAckToTheHandler() throws Exception {
        List<Delivery> received = new CopyOnWriteArrayList<>();
        AtomicBoolean subscriberAcked = new AtomicBoolean();
        try (TickdClient tickd = server.client().namespace("manual").build();
                Subscriber subscriber = tickd.subscriber(received::add)
                        .manualAck(true).ackTimeout(Duration.ofMinutes(10))
                        .listener(new SubscriberListener() {
                            @Override
                            public void onAcknowledged(Delivery delivery, boolean acknowledged) {
                                subscriberAcked.set(true);
                            }
                        }).start()) {
            registerDueNow(tickd, "manual-1");
            Await.until("the delivery", () -> !received.isEmpty());
            Delivery delivery = received.get(0);
            assertEquals("manual-1", delivery.timer().getKey());
            assertEquals(1, delivery.attempt());
            assertTrue("tickd still awaited the ack: nothing acked it for the handler", delivery.ack());
            assertFalse("a second ack finds nothing to acknowledge", delivery.ack());
            assertFalse(subscriberAcked.get());
        }
    }

    @Test
    public void anObserverSeesACopyAndAnAutoAckSubscriberNeedsNoAck() throws Exception {
        List<String> observed = new CopyOnWriteArrayList<>();
        List<String> taken = new CopyOnWriteArrayList<>();
        List<String> takenDeliveryIds = new CopyOnWriteArrayList<>();
        AtomicInteger accepted = new AtomicInteger();
        try (TickdClient tickd = server.client().namespace("modes").interceptor(new SubscribeAccepted(accepted)).build();
                Subscriber observer = tickd.subscriber(delivery -> observed.add(delivery.timer().getKey()))
                        .observer(true).start();
                Subscriber atMostOnce = tickd.subscriber(delivery -> {
                    takenDeliveryIds.add(delivery.deliveryId());
                    taken.add(delivery.timer().getKey());
                }).autoAck(true).start()) {
            // An observer gets copies only of what fires while it is subscribed.
            Await.until("both subscriptions accepted by tickd", () -> accepted.get() == 2);
            registerDueNow(tickd, "m1");
            Await.until("the observer's copy and the sharing subscriber's delivery",
                    () -> observed.contains("m1") && taken.contains("m1"));
            // Acknowledged by tickd when sent: nothing awaits an ack for it.
            assertEquals(List.of(takenDeliveryIds.get(0)), tickd.ack(takenDeliveryIds).getUnknownList());
            assertEquals(0, tickd.pendingCount());
            assertEquals(0, tickd.deadCount());
        }
    }

    @Test
    public void stopWaitsForHandlersInFlightAndTheirAcks() throws Exception {
        CountDownLatch handlerStarted = new CountDownLatch(1);
        CountDownLatch finishHandler = new CountDownLatch(1);
        AtomicBoolean handlerFinished = new AtomicBoolean();
        List<Boolean> acks = new ArrayList<>();
        try (TickdClient tickd = server.client().namespace("stop").build()) {
            Subscriber subscriber = tickd.subscriber(delivery -> {
                handlerStarted.countDown();
                finishHandler.await(60, TimeUnit.SECONDS);
                handlerFinished.set(true);
            }).listener(new SubscriberListener() {
                @Override
                public void onAcknowledged(Delivery delivery, boolean acknowledged) {
                    synchronized (acks) {
                        acks.add(acknowledged);
                    }
                }
            }).start();
            registerDueNow(tickd, "slow");
            assertTrue(handlerStarted.await(60, TimeUnit.SECONDS));
            Thread stopper = new Thread(subscriber::stop, "stopper");
            stopper.start();
            // stop() began, and its thread is parked (or done): if it did not wait for the
            // handler, it would be done here, with the handler still held.
            Await.until("stop() to begin and block or return", () -> subscriber.isStopping()
                    && EnumSet.of(Thread.State.WAITING, Thread.State.TIMED_WAITING, Thread.State.TERMINATED)
                            .contains(stopper.getState()));
            assertTrue("stop() waits for the handler in flight", stopper.isAlive());
            assertFalse(handlerFinished.get());
            finishHandler.countDown();
            stopper.join(60_000);
            assertFalse("stop() returned once the handler finished", stopper.isAlive());
            assertTrue(handlerFinished.get());
            synchronized (acks) {
                assertEquals("its ack went out before stop() returned", List.of(true), acks);
            }
            assertEquals(0, tickd.pendingCount());
            assertEquals(0, tickd.deadCount());
        }
    }
}
