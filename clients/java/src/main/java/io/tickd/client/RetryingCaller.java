package io.tickd.client;

import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.util.function.Supplier;

/**
 * Runs one unary call, retrying it on {@code UNAVAILABLE} as the {@link RetryPolicy} allows.
 *
 * <p>Only {@code UNAVAILABLE} is retried: it means the call did not reach tickd or tickd is
 * going away, while every other code is tickd's answer and would come back the same. Callers
 * decide which calls are safe to send twice (see {@link TickdClient}).
 */
final class RetryingCaller {
    private final RetryPolicy policy;
    private final ManagedChannel channelToWake;

    /** {@code channelToWake} (may be null) has its connect back-off reset before each retry. */
    RetryingCaller(RetryPolicy policy, ManagedChannel channelToWake) {
        this.policy = policy;
        this.channelToWake = channelToWake;
    }

    <T> T call(boolean idempotent, Supplier<T> attempt) {
        int attempts = idempotent ? policy.maxAttempts() : 1;
        Backoff backoff = policy.newBackoff();
        for (int attemptNumber = 1; ; attemptNumber++) {
            try {
                return attempt.get();
            } catch (StatusRuntimeException error) {
                boolean retryable = error.getStatus().getCode() == Status.Code.UNAVAILABLE;
                if (!retryable || attemptNumber >= attempts) {
                    throw TickdException.fromStatus(error);
                }
            }
            sleep(backoff);
            // grpc-java's channel waits out its own reconnect back-off (up to two minutes)
            // before trying tickd again; the retry's own back-off is the one that should count.
            if (channelToWake != null) {
                channelToWake.resetConnectBackoff();
            }
        }
    }

    private static void sleep(Backoff backoff) {
        try {
            Thread.sleep(backoff.next().toMillis());
        } catch (InterruptedException interrupted) {
            Thread.currentThread().interrupt();
            throw new TickdException(Status.Code.CANCELLED, "interrupted while waiting to retry", interrupted);
        }
    }
}
