package io.tickd.client;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.fail;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A real tickd for one test: started from {@code $TICKD_BIN} on a free port with a fresh data
 * directory under the checkout's target/clients/java/, stopped with SIGTERM, restartable on the
 * same port and data directory. Its log goes to {@code tickd.log} beside the data.
 */
final class TickdServer implements AutoCloseable {
    private static final Pattern LISTEN = Pattern.compile("\"listen\":\"([^\"]+)\"");
    private static final long START_TIMEOUT_SECONDS = 60;

    private final Path workDir;
    private final Path dataDir;
    private final List<String> extraArguments;
    private Process process;
    private String address;
    private int starts;

    private TickdServer(Path workDir, List<String> extraArguments) {
        this.workDir = workDir;
        this.dataDir = workDir.resolve("data");
        this.extraArguments = extraArguments;
    }

    /** Starts tickd with these flags besides --listen, --metrics-listen, --data-dir, --log-format. */
    static TickdServer start(String... extraArguments) throws Exception {
        TickdServer server = new TickdServer(newScratchDir("tickd-"), Arrays.asList(extraArguments));
        server.launch("127.0.0.1:0");
        return server;
    }

    /** A fresh directory under target/clients/java/tests (never /tmp: the check cleans its own). */
    static Path newScratchDir(String prefix) throws IOException {
        String scratch = System.getProperty("tickd.scratch");
        Path root = scratch == null || scratch.isEmpty() ? Paths.get("target") : Paths.get(scratch);
        Path tests = Files.createDirectories(root.resolve("tests"));
        return Files.createTempDirectory(tests, prefix);
    }

    static String binary() {
        String binary = System.getenv("TICKD_BIN");
        if (binary == null || binary.isEmpty()) {
            binary = System.getProperty("tickd.bin");
        }
        if (binary == null || binary.isEmpty() || binary.startsWith("${")) {
            fail("TICKD_BIN is not set: point it at the tickd binary (e.g. target/release/tickd)");
        }
        if (!Files.isExecutable(Paths.get(binary))) {
            fail("TICKD_BIN=" + binary + " is not an executable file");
        }
        return binary;
    }

    private void launch(String listen) throws Exception {
        Files.createDirectories(dataDir);
        List<String> command = new ArrayList<>(Arrays.asList(binary(),
                "--listen", listen, "--metrics-listen", "127.0.0.1:0",
                "--data-dir", dataDir.toString(), "--log-format", "json"));
        command.addAll(extraArguments);
        starts++;
        Path log = workDir.resolve("tickd-" + starts + ".log");
        ProcessBuilder builder = new ProcessBuilder(command)
                .redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.to(log.toFile()));
        builder.environment().put("TICKD_LOG", "info");
        builder.environment().put("NO_COLOR", "1");
        process = builder.start();
        // For the check's exit trap: it stops any tickd a killed test JVM left behind.
        Files.write(workDir.resolve("tickd.pid"), (process.pid() + "\n").getBytes(StandardCharsets.US_ASCII));
        Process started = process;
        Runtime.getRuntime().addShutdownHook(new Thread(started::destroyForcibly));
        address = awaitServing(log);
    }

    /** Reads tickd's log until the line saying it serves, and returns the address it names. */
    private String awaitServing(Path log) throws Exception {
        long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(START_TIMEOUT_SECONDS);
        while (System.nanoTime() < end) {
            for (String line : Files.readAllLines(log, StandardCharsets.UTF_8)) {
                Matcher listen = LISTEN.matcher(line);
                if (line.contains("\"tickd serving\"") && listen.find()) {
                    return listen.group(1);
                }
            }
            if (!process.isAlive()) {
                fail("tickd exited with status " + process.exitValue() + " before serving; see " + log);
            }
            Thread.sleep(20);
        }
        process.destroyForcibly();
        fail("tickd did not report serving within " + START_TIMEOUT_SECONDS + " s; see " + log);
        return null;
    }

    /** {@code 127.0.0.1:PORT}. */
    String address() {
        return address;
    }

    Path workDir() {
        return workDir;
    }

    /** A client builder pointed at this tickd, with quick retries so tests stay short. */
    TickdClientBuilder client() {
        return TickdClient.builder().target(address)
                .retryPolicy(RetryPolicy.of(40, java.time.Duration.ofMillis(50), java.time.Duration.ofMillis(500), 2.0))
                .reconnectBackoff(RetryPolicy.of(1, java.time.Duration.ofMillis(50), java.time.Duration.ofMillis(500), 2.0));
    }

    /** SIGTERM, then waits for tickd to exit, which must be with status 0. */
    void stop() throws InterruptedException {
        process.destroy(); // SIGTERM on Unix
        if (!process.waitFor(60, TimeUnit.SECONDS)) {
            process.destroyForcibly();
            fail("tickd did not exit within 60 s of SIGTERM");
        }
        assertEquals("tickd's exit status after SIGTERM", 0, process.exitValue());
    }

    /** SIGKILL (no drain: tickd gets no say), then waits for tickd to exit. */
    void kill() throws InterruptedException {
        process.destroyForcibly(); // SIGKILL on Unix
        if (!process.waitFor(60, TimeUnit.SECONDS)) {
            fail("tickd did not exit within 60 s of SIGKILL");
        }
    }

    /** Starts tickd again on the same port and data directory (after {@link #stop()} or {@link #kill()}). */
    void startAgain() throws Exception {
        launch(address);
    }

    @Override
    public void close() {
        if (process != null && process.isAlive()) {
            process.destroy();
            try {
                if (!process.waitFor(20, TimeUnit.SECONDS)) {
                    process.destroyForcibly().waitFor();
                }
            } catch (InterruptedException interrupted) {
                process.destroyForcibly();
                Thread.currentThread().interrupt();
            }
        }
    }
}
