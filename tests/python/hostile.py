"""Hostile and careless clients, played against a real tickd by tests/hostile.rs.

Not a pytest module (no test_ prefix): each subcommand plays one case, prints one line of
`key=value` figures for the Rust test to assert on, and exits 0 unless the client itself
broke. Stubs are generated at run time, as the pytest suite does (see conftest.py).

    python hostile.py idle-connections ADDR COUNT
    python hostile.py big-batch ADDR COUNT PAYLOAD_BYTES
    python hostile.py keepalive-flood ADDR NAMESPACE HEARTBEATS
    python hostile.py busy-loop
"""

import os
import resource
import socket
import sys
import tempfile
import pathlib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))


def stubs():
    from conftest import _generate_stubs

    return _generate_stubs(pathlib.Path(tempfile.mkdtemp(prefix="tickd-stubs-")))


def idle_connections(addr, count):
    """Opens COUNT TCP connections that never send a byte, says so, and holds them until
    stdin closes."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    host, port = addr.rsplit(":", 1)
    held = []
    for _ in range(count):
        held.append(socket.create_connection((host, int(port))))
    print(f"idle-connections held={len(held)}", flush=True)
    sys.stdin.read()


def big_batch(addr, count, payload_bytes):
    """One NewTimeouts of COUNT timers of PAYLOAD_BYTES each, from a client with grpcio's
    default options (4 MiB receive limit)."""
    import grpc
    from google.protobuf import duration_pb2

    pb, pb_grpc = stubs()
    with grpc.insecure_channel(addr) as channel:
        stub = pb_grpc.TimersStub(channel)
        specs = [
            pb.TimerSpec(
                namespace="hostile-big-batch",
                payload=os.urandom(payload_bytes),
                delay=duration_pb2.Duration(seconds=3600),
            )
            for _ in range(count)
        ]
        try:
            answer = stub.NewTimeouts(pb.NewTimeoutsRequest(timers=specs), timeout=60)
        except grpc.RpcError as error:
            print(f"big-batch code={error.code().name} message={error.details()!r}")
            return
        registered = sum(1 for result in answer.results if result.HasField("registered"))
        print(f"big-batch code=OK registered={registered} results={len(answer.results)}")


def keepalive_flood(addr, namespace, heartbeats):
    """Registers 100 leases, then sends HEARTBEATS heartbeats for them over one KeepAlive
    stream as fast as grpcio will take them, reading every answer."""
    import grpc
    from google.protobuf import duration_pb2

    pb, pb_grpc = stubs()
    with grpc.insecure_channel(addr) as channel:
        stub = pb_grpc.TimersStub(channel)
        leases = []
        for index in range(100):
            answer = stub.NewTimeout(
                pb.NewTimeoutRequest(
                    timer=pb.TimerSpec(
                        namespace=namespace,
                        key=f"lease-{index}",
                        ttl=duration_pb2.Duration(seconds=3600),
                    )
                ),
                timeout=30,
            )
            leases.append(answer.timer.id)

        def requests():
            for sequence in range(heartbeats):
                yield pb.KeepAliveRequest(
                    sequence=sequence,
                    timer=pb.TimerRef(namespace=namespace, id=leases[sequence % len(leases)]),
                )

        answered = failed = 0
        try:
            for answer in stub.KeepAlive(requests()):
                if answer.HasField("error"):
                    failed += 1
                else:
                    answered += 1
            status = "OK"
        except grpc.RpcError as error:
            status = f"{error.code().name}:{error.details()!r}".replace(" ", "_")
        print(f"keepalive-flood status={status} answered={answered} failed={failed}", flush=True)


def busy_loop():
    """Burns a core until killed: the CPU contention a shared node gives."""
    while True:
        pass


def main():
    command, args = sys.argv[1], sys.argv[2:]
    if command == "idle-connections":
        idle_connections(args[0], int(args[1]))
    elif command == "big-batch":
        big_batch(args[0], int(args[1]), int(args[2]))
    elif command == "keepalive-flood":
        keepalive_flood(args[0], args[1], int(args[2]))
    elif command == "busy-loop":
        busy_loop()
    else:
        raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    main()
