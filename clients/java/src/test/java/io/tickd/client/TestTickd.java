package io.tickd.client;

/** A real tickd for tests in other packages (the netty adapter's): {@link TickdServer}, opened up. */
public final class TestTickd implements AutoCloseable {
    private final TickdServer server;

    private TestTickd(TickdServer server) {
        this.server = server;
    }

    public static TestTickd start(String... extraArguments) throws Exception {
        return new TestTickd(TickdServer.start(extraArguments));
    }

    public String address() {
        return server.address();
    }

    @Override
    public void close() {
        server.close();
    }
}
