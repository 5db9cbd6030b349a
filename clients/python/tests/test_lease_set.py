"""A lease keeper names a lease by its id alone, whatever namespace it was added with (no
server needed: the keeper's table is fed the answer a heartbeat would get)."""

from __future__ import annotations

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from tickd._requests import Requests
from tickd.lease_set import LeaseSet
from tickd.v1 import tickd_pb2 as pb

LEASE_ID = "00000000000000ca"


class _Leases(LeaseSet):
    def _heartbeats_changed(self) -> None:
        pass


def _heartbeat_answered(leases: _Leases, deadline_seconds: int) -> None:
    (heartbeat,) = leases._table.due_heartbeats()
    leases._table.answered(
        pb.KeepAliveResponse(sequence=heartbeat.sequence, id=LEASE_ID, deadline=Timestamp(seconds=deadline_seconds))
    )


def test_a_lease_added_from_its_timer_is_found_by_its_id_in_the_namespace_it_was_added_with() -> None:
    leases = _Leases(Requests(default_namespace=""))
    leases.add_timer(pb.Timer(id=LEASE_ID, namespace="orders", ttl=Duration(seconds=3)))
    _heartbeat_answered(leases, 1_900_000_000)

    deadline = leases.deadline(LEASE_ID)
    assert deadline is not None and deadline.timestamp() == 1_900_000_000
    assert leases.deadline(LEASE_ID, namespace="orders") == deadline
    assert leases.deadline(LEASE_ID, namespace="") is None  # named in another namespace: not kept
    assert leases.remove(LEASE_ID)
    assert leases.leases() == []


def test_without_a_kept_lease_the_clients_default_namespace_is_meant() -> None:
    leases = _Leases(Requests(default_namespace="jobs"))
    leases.add(LEASE_ID, 3)
    assert [lease.namespace for lease in leases.leases()] == ["jobs"]
    assert not leases.remove("0000000000000001")
    assert leases.remove(LEASE_ID)
