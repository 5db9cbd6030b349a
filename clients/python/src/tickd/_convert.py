"""Python times to protobuf and back: durations are timedelta or seconds, times are aware datetimes."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

#: A duration: a timedelta, or a number of seconds.
Seconds = timedelta | float | int


def to_seconds(value: Seconds) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def to_duration(value: Seconds) -> Duration:
    duration = Duration()
    duration.FromNanoseconds(round(to_seconds(value) * 1e9))
    return duration


def to_timestamp(value: datetime) -> Timestamp:
    """A naive datetime is refused: which zone it meant cannot be known."""
    if value.tzinfo is None:
        raise ValueError("deadline must be timezone-aware (e.g. datetime.now(timezone.utc))")
    timestamp = Timestamp()
    timestamp.FromDatetime(value.astimezone(timezone.utc))
    return timestamp


def from_timestamp(value: Timestamp) -> datetime:
    return value.ToDatetime(tzinfo=timezone.utc)
