package io.tickd.client;

import static org.junit.Assert.fail;

import java.time.Duration;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;

/**
 * Waits for a condition with a generous overall deadline: the tests wait on events, never on
 * guessed durations, and the deadline only bounds a test that would otherwise hang.
 */
final class Await {
    static final Duration GENEROUS = Duration.ofSeconds(60);

    private Await() {
    }

    static void until(String what, BooleanSupplier condition) throws InterruptedException {
        until(what, GENEROUS, condition);
    }

    static void until(String what, Duration deadline, BooleanSupplier condition) throws InterruptedException {
        long end = System.nanoTime() + deadline.toNanos();
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > end) {
                fail("timed out after " + deadline + " waiting for " + what);
            }
            Thread.sleep(20); // polling interval, not a synchronisation guess
        }
    }

    /** Like {@link #until} but shows the last value seen when it times out. */
    static <T> void untilValue(String what, Supplier<T> value, java.util.function.Predicate<T> accepted)
            throws InterruptedException {
        long end = System.nanoTime() + GENEROUS.toNanos();
        T last = value.get();
        while (!accepted.test(last)) {
            if (System.nanoTime() > end) {
                fail("timed out waiting for " + what + "; last value: " + last);
            }
            Thread.sleep(20);
            last = value.get();
        }
    }
}
