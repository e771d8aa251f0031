"""placer_client.Client: one round per call to a Placer service, as
placer::client does in C++ (service/src/client.cpp), whose framing, request
ids, timeouts, resync and failover over several endpoints it follows."""
from __future__ import annotations

import random
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

    def __init__(self, endpoint: str | list[str], timeout_ms: int = 5000, session: str | None = None,
                 retries: int = 0, server_key: str | None = None,
                 client_cert: str | None = None, retry_budget_ms: int = 30000,
                 backoff_ms: int = 50, backoff_max_ms: int = 2000, busy_retries: int = 2) -> None:
        """`endpoint`: one, or several replicas ("tcp://a:5555,tcp://b:5555"
        or a list). A round that is lost (no reply in time, or its connection
        refused or dropped in flight) goes to the next endpoint at once, as
        a full snapshot of the session, and later deltas go there; a
        ResourceExhausted with a retry hint is sent again to the same
        endpoint after the hint (times a random factor in [1, 1.5))
        `busy_retries` times, then counts as lost there. `retries`: lost
        rounds sent again (at least once to each other endpoint); a resent
        delta that the service no longer holds is answered StaleEpoch and
        resynced, so each call still answers exactly one round. Coming back
        to an endpoint that failed in the call waits a jittered back-off
        (`backoff_ms` doubling to `backoff_max_ms`, times [0.5, 1)); no
        attempt starts after `retry_budget_ms` (0: no bound but `retries`).
        `server_key` (the service's public certificate) and `client_cert`
        (this client's secret certificate), files that `placer keygen`
        writes, connect to a CURVE service."""
        self.endpoints = _endpoints(endpoint)
        self._at = 0  # the endpoint the socket is connected to
        self._holder: int | None = None  # the endpoint holding the session (its last accepted round)
        self.timeout_ms = timeout_ms
        self.session = session or f"client-{secrets.randbits(64)}"
        if min(timeout_ms - 1, retries, retry_budget_ms, backoff_ms, backoff_max_ms, busy_retries) < 0:
            raise ValueError("timeout_ms must be positive; retries, the retry budget, back-off and "
                             "busy_retries not negative")
        self.retries = retries
        self.retry_budget_ms = retry_budget_ms
        self.backoff_ms = backoff_ms
        self.backoff_max_ms = backoff_max_ms
        self.busy_retries = busy_retries
        self.resyncs = 0  # full snapshots sent because the service did not hold the session
        self.retried = 0  # requests sent again after a timeout
        self.failovers = 0  # rounds accepted by another endpoint than the session's holder
        self.busy_retried = 0  # rounds sent again after a ResourceExhausted with a retry hint
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
        self._monitor: zmq.Socket | None = None
        self._up = False  # the socket has a connection now (its monitor's last word)
        self._connect()

    @property
    def endpoint(self) -> str:
        """The endpoint the next request goes to."""
        return self.endpoints[self._at]

    def close(self) -> None:
        self._close_socket()
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
        reply = self._send(request, full=round_)
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

    def _close_socket(self) -> None:
        if self._socket is not None:
            if self._monitor is not None:
                self._socket.disable_monitor()  # before its reader goes
                self._monitor.close(linger=0)
            self._socket.close(linger=0)
        self._socket = self._monitor = None

    def _connect(self) -> None:
        self._close_socket()
        self._socket = self._context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        # A send waits at most the timeout for a connected peer (a DEALER with
        # none, e.g. while a CURVE service refuses the handshake, would block).
        self._socket.setsockopt(zmq.SNDTIMEO, self.timeout_ms)
        self._socket.setsockopt(zmq.RECONNECT_IVL_MAX, 2000)
        if self._curve is not None:
            self._socket.curve_serverkey, self._socket.curve_publickey, self._socket.curve_secretkey = self._curve
        # The socket's monitor: a connection refused or dropped ends the wait
        # for a reply at once, not at the timeout.
        self._monitor = self._socket.get_monitor_socket(
            zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED)
        self._up = False
        try:
            self._socket.connect(self.endpoint)
        except zmq.ZMQError as e:
            raise ClientError(f"cannot connect to {self.endpoint!r}: {e}") from e

    def _connection_lost(self) -> bool:
        """Reads the monitor's waiting events: whether one says a request on
        its way is lost (the connection dropped, or an attempt to make one
        failed while there is none)."""
        lost = False
        while self._monitor.poll(0, zmq.POLLIN):
            frames = self._monitor.recv_multipart()
            event = int.from_bytes(frames[0][:2], "little") if frames and len(frames[0]) >= 2 else 0
            if event == zmq.EVENT_CONNECTED:
                self._up = True
            elif event == zmq.EVENT_DISCONNECTED:
                self._up = False
                lost = True
            elif event == zmq.EVENT_CONNECT_RETRIED and not self._up:
                lost = True
        return lost

    def _send(self, request: ScheduleRequestT, full: ScheduleRequestT | None = None) -> Reply:
        """`request`, or `full` (the whole round) where the session's holder is
        another endpoint."""
        reply = self._exchange(Body.ScheduleRequest, request, full=full)
        if not isinstance(reply, Reply):
            raise ClientError("unexpected reply to a round: a HealthReply")
        return reply

    def _exchange(self, body_type: int, body: object, retries: int | None = None,
                  full: object | None = None) -> Reply | HealthReplyT:
        """Sends one request and waits for the reply to it; a lost request
        goes again (under a new request id, on a rebuilt socket) to the next
        endpoint, as `full` where that endpoint does not hold the session."""
        n = len(self.endpoints)
        max_lost = max(self.retries if retries is None else retries, n - 1 if retries is None else 0)
        began = time.monotonic()
        failed = [False] * n
        passes = busy = lost = 0
        refused: Reply | None = None

        def past_budget(wait_s: float) -> bool:
            return self.retry_budget_ms > 0 and time.monotonic() + wait_s - began >= self.retry_budget_ms / 1000

        while True:
            elsewhere = self._holder is not None and self._holder != self._at
            sent = full if (full is not None and (elsewhere or self._holder is None)) else body
            why = None
            reply = self._attempt(body_type, sent)
            if reply is None:
                why = f"no reply from {self.endpoints[self._at]} within {self.timeout_ms} ms (or its connection dropped)"
            elif (isinstance(reply, Reply) and reply.code == ErrorCode.ResourceExhausted
                  and reply.retry_after_ms > 0):
                refused = reply
                wait = max(reply.retry_after_ms, self.backoff_ms) / 1000 * random.uniform(1.0, 1.5)
                if busy < self.busy_retries and not past_budget(wait):
                    busy += 1
                    self.busy_retried += 1
                    time.sleep(wait)
                    continue
                why = f"ResourceExhausted from {self.endpoints[self._at]} past {busy} retries: {reply.message}"
            if why is None:
                if body_type == Body.ScheduleRequest and isinstance(reply, Reply) and reply.ok:
                    if elsewhere:
                        self.failovers += 1
                        if sent is not body:
                            self.resyncs += 1
                    self._holder = self._at
                return reply
            failed[self._at] = True
            busy = 0
            nxt = (self._at + 1) % n
            wait = 0.0
            if failed[nxt]:
                wait = min(self.backoff_max_ms, self.backoff_ms * 2 ** min(passes, 20)) / 1000 * random.uniform(0.5, 1.0)
                passes += 1
            if lost >= max_lost or past_budget(wait):
                if refused is not None:
                    return refused
                raise ClientError(f"{why}{f' ({lost + 1} requests lost over {n} endpoints)' if lost or n > 1 else ''}: "
                                  "is the Placer service running there? (start it with `placer serve`; "
                                  "a CURVE service that does not list this client's key never answers)")
            lost += 1
            self.retried += 1
            time.sleep(wait)
            if nxt != self._at:
                self._at = nxt
                self._connect()

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
        self._connection_lost()  # what happened before this request does not count against it
        try:
            self._socket.send_multipart([b"", builder.Output()])
        except zmq.Again:
            self._connect()
            return None
        poller = zmq.Poller()
        poller.register(self._socket, zmq.POLLIN)
        poller.register(self._monitor, zmq.POLLIN)
        while True:
            left_ms = max(0, round((deadline - time.monotonic()) * 1000))
            ready = dict(poller.poll(left_ms)) if left_ms > 0 else {}
            if self._socket not in ready:
                if self._monitor in ready and not self._connection_lost() and left_ms > 0:
                    continue  # an event that loses nothing
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


def _endpoints(endpoint: str | list[str]) -> list[str]:
    """The endpoints of "a,b" or ["a", "b"], each checked non-empty."""
    parts = endpoint.split(",") if isinstance(endpoint, str) else list(endpoint)
    out = [p.strip() for p in parts]
    if not out or any(not p for p in out):
        raise ClientError(f"endpoint list {endpoint!r} has an empty entry: give one or more endpoints "
                          "separated by commas, e.g. tcp://10.0.0.1:5555,tcp://10.0.0.2:5555")
    return out


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
