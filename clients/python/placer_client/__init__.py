"""Placer's Python client: send scheduling rounds to `placer serve` over
ZeroMQ, as FlatBuffers messages of schemas/placement.fbs (clients/python/README.md)."""
try:
    import placer.wire  # noqa: F401
except ModuleNotFoundError as e:
    raise ModuleNotFoundError(
        "placer_client needs the wire code flatc generates from schemas/placement.fbs "
        "on sys.path: `flatc --python --gen-object-api -o DIR schemas/placement.fbs` "
        "and PYTHONPATH=DIR "
        "(the CMake build generates it in BUILD/clients/python/wire)") from e

from placer_client.client import Client, ClientError, Reply
from placer_client.objects import enum_name, make, plain

__all__ = ["Client", "ClientError", "Reply", "enum_name", "make", "plain"]
