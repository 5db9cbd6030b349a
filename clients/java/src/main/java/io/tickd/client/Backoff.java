package io.tickd.client;

import java.time.Duration;
import java.util.concurrent.ThreadLocalRandom;

/**
 * One sequence of exponentially growing, jittered waits (see {@link RetryPolicy}).
 * Each retry loop or stream owns one; synchronized because a stream resets it from gRPC
 * threads while its supervisor takes the next wait.
 */
public final class Backoff {
    private final RetryPolicy policy;
    private double nextNanos;

    Backoff(RetryPolicy policy) {
        this.policy = policy;
        reset();
    }

    /** The next wait: the current step with jitter (its upper half), then the step grows. */
    public synchronized Duration next() {
        double capNanos = policy.maxBackoff().toNanos();
        double step = Math.min(nextNanos, capNanos);
        nextNanos = Math.min(capNanos, nextNanos * policy.multiplier());
        double jittered = step / 2 + ThreadLocalRandom.current().nextDouble() * step / 2;
        return Duration.ofNanos((long) jittered);
    }

    /** Back to the initial step, e.g. once a stream is healthy again. */
    public synchronized void reset() {
        nextNanos = policy.initialBackoff().toNanos();
    }
}
