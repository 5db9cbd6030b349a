package io.tickd.client;

import io.grpc.Status;
import io.grpc.StatusRuntimeException;

/**
 * An error from tickd (or from reaching it), carrying the gRPC status code and tickd's message.
 *
 * <p>Unchecked, like grpc-java's own {@link StatusRuntimeException} which it wraps: callers
 * switch on {@link #code()} (e.g. {@code NOT_FOUND} for an unknown timer,
 * {@code INVALID_ARGUMENT} naming the offending field, {@code UNAVAILABLE} when tickd cannot
 * be reached even after the retries the {@link RetryPolicy} allows).
 */
public final class TickdException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final Status.Code code;
    private final String description;

    public TickdException(Status.Code code, String description, Throwable cause) {
        super(code + ": " + description, cause);
        this.code = code;
        this.description = description == null ? "" : description;
    }

    /** Wraps a failed call. */
    public static TickdException fromStatus(StatusRuntimeException error) {
        Status status = error.getStatus();
        return new TickdException(status.getCode(), status.getDescription(), error);
    }

    /** Wraps whatever a stream or call failed with (a status, or any other throwable). */
    public static TickdException fromThrowable(Throwable error) {
        if (error instanceof TickdException) {
            return (TickdException) error;
        }
        Status status = Status.fromThrowable(error);
        String description = status.getDescription() != null ? status.getDescription() : String.valueOf(error);
        return new TickdException(status.getCode(), description, error);
    }

    /** A per-item error inside a batch answer or a KeepAlive answer (the call itself went on). */
    public static TickdException fromItemError(io.tickd.v1.Error error) {
        return new TickdException(Status.fromCodeValue(error.getCode()).getCode(), error.getMessage(), null);
    }

    /** The gRPC status code, e.g. {@code NOT_FOUND}. */
    public Status.Code code() {
        return code;
    }

    /** tickd's message without the code, e.g. {@code "cron: ..."}. */
    public String description() {
        return description;
    }
}
