"""A retry policy that tells the tests when it decided to retry."""

from __future__ import annotations

import threading

import tickd


class RecordingRetryPolicy(tickd.RetryPolicy):
    """Says when a retry was decided on, so the test knows a call failed while tickd was down."""

    retried = threading.Event()

    def should_retry(self, error: tickd.TickdError, attempt: int) -> bool:
        decision = super().should_retry(error, attempt)
        if decision:
            type(self).retried.set()
        return decision
