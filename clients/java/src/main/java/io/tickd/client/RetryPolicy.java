package io.tickd.client;

import java.time.Duration;
import java.util.Objects;

/**
 * How often and how patiently a call is retried on {@code UNAVAILABLE}, and how streams
 * back off between reconnects.
 *
 * <p>The wait before retry {@code n} (counted from 1) is
 * {@code min(maxBackoff, initialBackoff * multiplier^(n-1))}, with jitter taking it down to
 * a random point in its upper half so that many clients do not reconnect in lock step.
 * {@code maxAttempts} counts the first try; streams ignore it and reconnect until stopped.
 */
public final class RetryPolicy {
    private final int maxAttempts;
    private final Duration initialBackoff;
    private final Duration maxBackoff;
    private final double multiplier;

    private RetryPolicy(int maxAttempts, Duration initialBackoff, Duration maxBackoff, double multiplier) {
        if (maxAttempts < 1) {
            throw new IllegalArgumentException("maxAttempts must be at least 1 (the first try)");
        }
        if (initialBackoff.isNegative() || maxBackoff.compareTo(initialBackoff) < 0) {
            throw new IllegalArgumentException("need 0 <= initialBackoff <= maxBackoff");
        }
        if (multiplier < 1.0) {
            throw new IllegalArgumentException("multiplier must be at least 1");
        }
        this.maxAttempts = maxAttempts;
        this.initialBackoff = initialBackoff;
        this.maxBackoff = maxBackoff;
        this.multiplier = multiplier;
    }

    /** 6 attempts, 200 ms doubling up to 5 s: the five waits add up to 3 to 6 s, a quick restart. */
    public static RetryPolicy defaults() {
        return new RetryPolicy(6, Duration.ofMillis(200), Duration.ofSeconds(5), 2.0);
    }

    /**
     * The streams' reconnect back-off: 500 ms doubling up to 30 s, with jitter. Separate from
     * the call retry policy so that turning retries off ({@link #none()}, zero back-off) never
     * makes a subscriber or lease keeper reconnect in a tight loop.
     */
    public static RetryPolicy reconnectDefaults() {
        return new RetryPolicy(1, Duration.ofMillis(500), Duration.ofSeconds(30), 2.0);
    }

    /** For reconnect back-offs: a zero first wait would reconnect in a tight loop. */
    RetryPolicy requirePositiveBackoff() {
        if (initialBackoff.isZero()) {
            throw new IllegalArgumentException("a reconnect back-off needs a positive initialBackoff: " + this);
        }
        return this;
    }

    /** One attempt: never retried (and no back-off: not for reconnects). */
    public static RetryPolicy none() {
        return new RetryPolicy(1, Duration.ZERO, Duration.ZERO, 1.0);
    }

    public static RetryPolicy of(int maxAttempts, Duration initialBackoff, Duration maxBackoff, double multiplier) {
        return new RetryPolicy(maxAttempts, Objects.requireNonNull(initialBackoff),
                Objects.requireNonNull(maxBackoff), multiplier);
    }

    public int maxAttempts() {
        return maxAttempts;
    }

    public Duration initialBackoff() {
        return initialBackoff;
    }

    public Duration maxBackoff() {
        return maxBackoff;
    }

    public double multiplier() {
        return multiplier;
    }

    /** A fresh back-off sequence following this policy. */
    public Backoff newBackoff() {
        return new Backoff(this);
    }

    @Override
    public String toString() {
        return "RetryPolicy(maxAttempts=" + maxAttempts + ", initialBackoff=" + initialBackoff
                + ", maxBackoff=" + maxBackoff + ", multiplier=" + multiplier + ")";
    }
}
