"""placer_client.Client: one round per call to a Placer service, as
placer::client does in C++ (service/src/client.cpp), whose framing, request
ids, timeouts and resync it follows."""
from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from types import TracebackType

import flatbuffers
import zmq
import zmq.auth
from placer.wire.Body import Body
from placer.wire.Envelope import Envelope, EnvelopeT
from placer.wire.ErrorCode import ErrorCode
from placer.wire.Header import HeaderT
from placer.wire.HealthReply import HealthReplyT
from placer.wire.HealthRequest import HealthRequestT
from placer.wire.ScheduleReply import ScheduleReplyT
from placer.wire.ScheduleRequest import ScheduleRequestT
from placer.wire.Status import StatusT

from placer_client.incremental import Snapshot, delta_request
from placer_client.objects import make, plain


class _SharingBuilder(flatbuffers.Builder):
    """A builder that writes each distinct string once and points every
    use at it, as the C++ client does for labels, models and taints: with
    tens of labels a node, the same texts repeat across every node (1,280
    nodes of 42 labels: 3.1 MB packed in 153 ms, 0.38 MB in 63 ms). The
    generated Pack methods call CreateString for every string field."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self._strings: dict[str | bytes, int] = {}

    def CreateString(self, s, encoding="utf-8", errors="strict"):  # noqa: N802 (the runtime's name)
        offset = self._strings.get(s)
        if offset is None:
            offset = super().CreateString(s, encoding, errors)
            self._strings[s] = offset
        return offset


class ClientError(Exception):
    """The service did not answer in time, its answer was not a Placer
    message, or the endpoint is malformed. A round the service refused is
    not one: it comes back as a Reply with a non-Ok code."""


@dataclass
class Reply:
    """The service's answer to one round.

    `code` is an ErrorCode value and `message` says why when it is not Ok
    (the round was refused; `result` is then empty). `result` is the
    ScheduleReply: placements (job index into the round's pending list, job
    name, replicas with node index, GPU indices and share), unplaced jobs
    with reasons, metrics, per-stage timing, preemptions and the rest.
    """

    code: int
    message: str
    result: ScheduleReplyT = field(default_factory=lambda: plain(ScheduleReplyT()))
    retry_after_ms: int = 0  # with ResourceExhausted from a full queue: when a retry may fit

    @property
    def ok(self) -> bool:
        return self.code == ErrorCode.Ok


class Client:
    """A DEALER socket to `endpoint`, and a mirror of what the service holds
    for this client's session (the last round it accepted), so that later
    rounds can go as deltas.

    A round is a ScheduleRequestT holding the full state: `cluster` (its
    `epoch`, `nodes`, `topology`), `pending` and `running` jobs, `policy`,
    `now`, `deadlineUs`; its `delta` and `jobDelta` are the client's to set.
    The client keeps fingerprints of what it sent, not the objects, so the
    caller may change the same objects for its next round.
    """

    def __init__(self, endpoint: str, timeout_ms: int = 5000, session: str | None = None,
                 retries: int = 0, server_key: str | None = None,
                 client_cert: str | None = None) -> None:
        """`retries`: times a request is sent again, on a rebuilt socket, after
        a timeout (a service that died with the round in flight and came
        back); a resent delta that the service no longer holds is answered
        StaleEpoch and resynced, so each call still answers exactly one
        round. `server_key` (the service's public certificate) and
        `client_cert` (this client's secret certificate), files that
        `placer keygen` writes, connect to a CURVE service."""
        self.endpoint = endpoint
        self.timeout_ms = timeout_ms
        self.session = session or f"client-{secrets.randbits(64)}"
        self.retries = retries
        self.resyncs = 0  # full snapshots sent because the service did not hold the session
        self.retried = 0  # requests sent again after a timeout
        self.last_request_bytes = 0  # the size of the last request sent
        self._curve: tuple[bytes, bytes, bytes] | None = None
        if (server_key is None) != (client_cert is None):
            raise ValueError("server_key and client_cert go together")
        if server_key is not None:
            server_public, _ = zmq.auth.load_certificate(server_key)
            public, secret = zmq.auth.load_certificate(client_cert)
            if secret is None:
                raise ValueError(f"{client_cert} is a public certificate: give the *.key_secret file")
            self._curve = (server_public, public, secret)
        self._next_id = 1
        # Without CURVE the service issues the session's secret with the round
        # that makes it; sent with every later request, it keeps the session
        # this client's alone, across rebuilt sockets.
        self.session_secret: str | None = None
        self._mirror: Snapshot | None = None
        self._context = zmq.Context()
        self._socket: zmq.Socket | None = None
        self._connect()

    def close(self) -> None:
        self._socket.close(linger=0)
        self._context.term()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    def solve(self, round_: ScheduleRequestT) -> Reply:
        """Sends the whole round (cluster snapshot, jobs in full) and waits
        for the reply. Raises ClientError when the service does not answer."""
        snapshot = _snapshot(round_)
        return self._keep(snapshot, self._send(round_))

    def solve_incremental(self, round_: ScheduleRequestT) -> Reply:
        """Sends the whole round as the smallest request the session allows,
        working out the deltas against the last round the service accepted:
        the nodes that differ (by index), and the jobs that left and arrived
        (by name; a job that changed or moved in the queue leaves and arrives
        again at the tail). A full snapshot for the first round, when
        round_.cluster.epoch did not move past the session's, or when the
        node count or the topology changed; the jobs in full when a name
        repeats in a list. If the service answers StaleEpoch (it restarted,
        or dropped the session), the client resends the round in full by
        itself and returns that reply."""
        snapshot = _snapshot(round_)
        request = None if self._mirror is None else delta_request(self._mirror, snapshot, round_)
        if request is None:
            return self._keep(snapshot, self._send(round_))
        reply = self._send(request)
        if reply.code == ErrorCode.StaleEpoch:
            self.resyncs += 1
            reply = self._send(round_)
        return self._keep(snapshot, reply)

    def health(self) -> HealthReplyT:
        """Asks the service whether it is up, as `placer health` does: its
        backend, workers, uptime_s and counts of rounds received, answered
        Ok and answered with an error. The service's I/O thread answers, so
        a probe does not wait behind rounds being solved. Raises ClientError
        when the service does not answer."""
        reply = self._exchange(Body.HealthRequest, make(HealthRequestT), retries=0)
        if isinstance(reply, Reply):
            raise ClientError(f"the service answered a health probe with an error: {reply.message}")
        return reply

    def _keep(self, snapshot: Snapshot, reply: Reply) -> Reply:
        # The service moves the session only when it accepts the round.
        if reply.ok:
            self._mirror = snapshot
        return reply

    def _connect(self) -> None:
        if self._socket is not None:
            self._socket.close(linger=0)
        self._socket = self._context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        # A send waits at most the timeout for a connected peer (a DEALER with
        # none, e.g. while a CURVE service refuses the handshake, would block).
        self._socket.setsockopt(zmq.SNDTIMEO, self.timeout_ms)
        if self._curve is not None:
            self._socket.curve_serverkey, self._socket.curve_publickey, self._socket.curve_secretkey = self._curve
        try:
            self._socket.connect(self.endpoint)
        except zmq.ZMQError as e:
            raise ClientError(f"cannot connect to {self.endpoint!r}: {e}") from e

    def _send(self, request: ScheduleRequestT) -> Reply:
        reply = self._exchange(Body.ScheduleRequest, request)
        if not isinstance(reply, Reply):
            raise ClientError("unexpected reply to a round: a HealthReply")
        return reply

    def _exchange(self, body_type: int, body: object, retries: int | None = None) -> Reply | HealthReplyT:
        """Sends one request and waits for the reply to it, sending it again
        (under a new request id, on a rebuilt socket) after each timeout up
        to `retries` times (the client's by default)."""
        attempts = 1 + (self.retries if retries is None else retries)
        for attempt in range(attempts):
            if attempt > 0:
                self.retried += 1
            reply = self._attempt(body_type, body)
            if reply is not None:
                return reply
        raise ClientError(f"no reply from {self.endpoint} within {self.timeout_ms} ms"
                          f"{f' (tried {attempts} times)' if attempts > 1 else ''}: "
                          "is the Placer service running there? (start it with `placer serve`; "
                          "a CURVE service that does not list this client's key never answers)")

    def _attempt(self, body_type: int, body: object) -> Reply | HealthReplyT | None:
        request_id = self._next_id
        self._next_id += 1
        header = make(HeaderT, requestId=request_id, session=self.session,
                      sentAtUs=time.time_ns() // 1000, sessionSecret=self.session_secret)
        envelope = make(EnvelopeT, header=header, bodyType=body_type, body=body)
        builder = _SharingBuilder(1 << 16)
        builder.Finish(envelope.Pack(builder), file_identifier=b"PLCR")
        self.last_request_bytes = len(builder.Output())
        # REQ-compatible framing: an empty delimiter, then the payload.
        deadline = time.monotonic() + self.timeout_ms / 1000
        try:
            self._socket.send_multipart([b"", builder.Output()])
        except zmq.Again:
            self._connect()
            return None
        while True:
            left_ms = max(0, round((deadline - time.monotonic()) * 1000))
            if not self._socket.poll(left_ms, zmq.POLLIN):
                # A fresh socket drops the unanswered request and reaches a
                # restarted service anew.
                self._connect()
                return None
            reply_id, reply, secret = _decode(self._socket.recv_multipart()[-1])
            # A late reply to an earlier request is dropped; error replies to
            # requests the service could not read carry id 0.
            if reply_id in (request_id, 0):
                if secret:
                    self.session_secret = secret
                return reply


def _snapshot(round_: ScheduleRequestT) -> Snapshot:
    if round_.cluster is None or round_.delta is not None or round_.jobDelta is not None:
        raise ValueError("a round is a full snapshot: a cluster, and no delta or jobDelta "
                         "(the client works those out)")
    return Snapshot.of(round_)


def _decode(payload: bytes) -> tuple[int, Reply | HealthReplyT, str | None]:
    """The reply's request id, its contents (a Reply, or a HealthReplyT for a
    probe) and the session secret its header carries."""
    if not Envelope.EnvelopeBufferHasIdentifier(payload, 0):
        raise ClientError("unreadable reply from the service: no PLCR file identifier")
    # The Python FlatBuffers runtime has no verifier: a damaged buffer fails
    # somewhere in the generated readers, with whatever error that raises.
    try:
        envelope = plain(EnvelopeT.InitFromObj(Envelope.GetRootAs(payload, 0)))
    except Exception as e:
        raise ClientError(f"unreadable reply from the service: {e!r}") from e
    request_id = envelope.header.requestId if envelope.header is not None else 0
    secret = envelope.header.sessionSecret if envelope.header is not None else None
    if isinstance(secret, bytes):
        secret = secret.decode()
    body = envelope.body
    if body is None or envelope.bodyType not in (Body.Error, Body.ScheduleReply, Body.HealthReply):
        raise ClientError(f"unexpected reply from the service: body type {envelope.bodyType}")
    if envelope.bodyType == Body.HealthReply:
        return request_id, body, secret
    if envelope.bodyType == Body.Error:
        # An Error with code Ok would read as success without a result.
        code = body.code if body.code != ErrorCode.Ok else ErrorCode.Internal
        return request_id, Reply(code, body.message or "", retry_after_ms=body.retryAfterMs), secret
    status = body.status or StatusT()
    return request_id, Reply(status.code, status.message or "", body), secret
