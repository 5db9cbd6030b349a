"""The one exception type of the client: a gRPC status, as tickd answered it."""

from __future__ import annotations

import grpc
import grpc.aio

# grpc.StatusCode's values are (int, name) pairs; per-item errors (a batch item, a
# heartbeat) carry only the int.
_STATUS_BY_NUMBER: dict[int, grpc.StatusCode] = {status.value[0]: status for status in grpc.StatusCode}


#: Refusals that a new attempt cannot cure (a wrong token, a namespace the token may not use, a
#: request tickd rejects, an RPC it lacks): a subscriber or lease keeper ends on them and
#: reports the error instead of reconnecting forever.
FINAL_STREAM_CODES: frozenset[grpc.StatusCode] = frozenset({
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.UNIMPLEMENTED,
})


class TickdError(Exception):
    """A call (or one item of a batch, or one heartbeat) that tickd refused or could not answer.

    ``code`` is the gRPC status (``grpc.StatusCode.NOT_FOUND``, ...) and ``message`` tickd's
    explanation, e.g. ``INVALID_ARGUMENT`` with a message naming the offending field.
    """

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message

    @property
    def is_final_for_streams(self) -> bool:
        """Whether re-opening a stream that ended with this error would only fail the same way."""
        return self.code in FINAL_STREAM_CODES

    @classmethod
    def from_rpc_error(cls, error: grpc.RpcError) -> TickdError:
        """The status of a failed call: the blocking API raises RpcErrors that are also
        grpc.Call objects, grpc.aio raises AioRpcError; both carry code() and details()."""
        if isinstance(error, (grpc.Call, grpc.aio.AioRpcError)):
            return cls(error.code() or grpc.StatusCode.UNKNOWN, error.details() or "")
        return cls(grpc.StatusCode.UNKNOWN, str(error))

    @classmethod
    def from_status_number(cls, code: int, message: str) -> TickdError:
        """An error that tickd sent inside an answer (``tickd.v1.Error``) rather than as a status."""
        return cls(_STATUS_BY_NUMBER.get(code, grpc.StatusCode.UNKNOWN), message)

    def __reduce__(self) -> tuple[type[TickdError], tuple[grpc.StatusCode, str]]:
        return (type(self), (self.code, self.message))
