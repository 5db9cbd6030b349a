"""What a Python operator's script does with tickd, knowing nothing but its address.

Lists the services through grpcio-reflection's client (which speaks reflection v1alpha),
builds NewTimeoutRequest from the descriptors the server returns, and registers a timer
with the request gzip-compressed. Prints one JSON object for tests/tools.rs to check.

Usage: python grpcio_client.py HOST:PORT NAMESPACE PAYLOAD_TEXT
"""

import json
import sys

import grpc
from google.protobuf import descriptor_pool, json_format, message_factory
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)


def main():
    address, namespace, payload = sys.argv[1:4]
    with grpc.insecure_channel(address) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        services = sorted(database.get_services())
        pool = descriptor_pool.DescriptorPool(database)
        method = pool.FindServiceByName("tickd.v1.Timers").methods_by_name["NewTimeout"]
        request_class = message_factory.GetMessageClass(method.input_type)
        response_class = message_factory.GetMessageClass(method.output_type)
        request = request_class()
        request.timer.namespace = namespace
        request.timer.delay.seconds = 3600
        request.timer.payload = payload.encode()
        new_timeout = channel.unary_unary(
            "/tickd.v1.Timers/NewTimeout",
            request_serializer=request_class.SerializeToString,
            response_deserializer=response_class.FromString,
        )
        response = new_timeout(request, compression=grpc.Compression.Gzip, timeout=30)
        print(
            json.dumps(
                {
                    "services": services,
                    "response": json_format.MessageToDict(response),
                }
            )
        )


if __name__ == "__main__":
    main()
