package io.tickd.client;

import io.grpc.Status;

/**
 * The refusals a reconnect cannot cure: tickd (or the channel) answered a stream with a code
 * that the same request on a new stream would get again. Subscribers and lease keepers end
 * with such an error (reported to their listener and failing their {@code ended()} future)
 * rather than reconnecting forever with a token that is missing, wrong or not allowed the
 * namespace, an invalid request, or a server without the method.
 */
final class StreamRefusals {
    private StreamRefusals() {
    }

    static boolean cannotBeCuredByReconnecting(TickdException error) {
        Status.Code code = error.code();
        return code == Status.Code.UNAUTHENTICATED
                || code == Status.Code.PERMISSION_DENIED
                || code == Status.Code.INVALID_ARGUMENT
                || code == Status.Code.UNIMPLEMENTED;
    }
}
