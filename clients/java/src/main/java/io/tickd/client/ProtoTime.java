package io.tickd.client;

import com.google.protobuf.Duration;
import com.google.protobuf.Timestamp;
import java.time.Instant;

/** Conversions between java.time and the protobuf well-known types tickd's API uses. */
public final class ProtoTime {
    private ProtoTime() {
    }

    public static Duration duration(java.time.Duration duration) {
        return Duration.newBuilder().setSeconds(duration.getSeconds()).setNanos(duration.getNano()).build();
    }

    public static java.time.Duration duration(Duration duration) {
        return java.time.Duration.ofSeconds(duration.getSeconds(), duration.getNanos());
    }

    public static Timestamp timestamp(Instant instant) {
        return Timestamp.newBuilder().setSeconds(instant.getEpochSecond()).setNanos(instant.getNano()).build();
    }

    public static Instant instant(Timestamp timestamp) {
        return Instant.ofEpochSecond(timestamp.getSeconds(), timestamp.getNanos());
    }
}
