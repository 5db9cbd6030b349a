package io.tickd.client.netty;

/**
 * A task run when its timeout expires: the same shape as Netty's {@code io.netty.util.TimerTask},
 * so existing tasks move over by changing the import.
 */
@FunctionalInterface
public interface TimerTask {
    void run(Timeout timeout) throws Exception;
}
