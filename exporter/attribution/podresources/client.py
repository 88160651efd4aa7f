"""A background poller of the kubelet's PodResources API (``v1.PodResourcesLister/List``).

Why a poller and not a call per scrape: the kubelet rate-limits the API (100 QPS, burst 10)
and a large node's answer takes a while to parse, so one ``List`` every ``interval`` seconds
runs in a daemon thread and the collection reads the latest result (``state()``), which costs
a lock and nothing else. A kubelet that is missing, slow, refusing, restarting or answering
more than the receive limit only changes ``state().status``; it never raises into the caller
and never blocks a scrape (dcgm-exporter's whole ``/metrics`` fails on a 4.7 MB answer over
gRPC's 4 MiB default, as its users report).

The receive limit is raised to ``max_message_bytes`` (16 MiB by default, what Kubernetes' own
node tests use) and bounded (at most ``MAX_MESSAGE_BYTES_LIMIT``), so a runaway answer costs
bounded memory and is reported as ``too_large``.

The last good table is kept through failures for ``stale_after`` seconds (a kubelet restart
takes a few seconds), then dropped: allocations are never served from an old answer forever.

``grpc`` and the generated messages are imported on the first poll only, so an exporter with
the feature off never loads them (resident memory).
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from exporter.allocations import AllocationTable, allocations_from_pods
from exporter.catalogue.defaults import (
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_SOCKET,
    MAX_MESSAGE_BYTES_LIMIT,
    MIN_INTERVAL_SECONDS,
    MIN_MESSAGE_BYTES,
    check_max_message_bytes,
)

log = logging.getLogger("exporter.attribution.podresources")

#: Kind counted in ``Snapshot.errors`` for each failed poll.
ERROR_KIND = "pod_resources"
#: The gRPC service and the one method called (gRPC's path is ``/<package>.<service>/<method>``).
SERVICE = "v1.PodResourcesLister"
LIST_METHOD = "List"


class PollStatus(str, Enum):
    """Outcome of the latest poll (exposed as a label, so values are stable)."""

    PENDING = "pending"  # no poll finished yet
    OK = "ok"
    SOCKET_MISSING = "socket_missing"  # no such file: not a kubelet node, or not mounted
    NOT_A_SOCKET = "not_a_socket"
    PERMISSION_DENIED = "permission_denied"  # the socket is root-only: run the exporter as root
    UNAVAILABLE = "unavailable"  # connection refused / kubelet restarting
    TIMEOUT = "timeout"
    TOO_LARGE = "too_large"  # the answer exceeded max_message_bytes
    REJECTED = "rejected"  # RESOURCE_EXHAUSTED for another reason (the kubelet's rate limit)
    UNIMPLEMENTED = "unimplemented"  # a kubelet without the v1 API (before 1.20)
    ERROR = "error"  # anything else (message in ``PodResourcesState.error``)


@dataclass(frozen=True, slots=True)
class PodResourcesState:
    """What the collection reads: the table (None when nothing current is known) and health."""

    table: AllocationTable | None
    status: PollStatus
    error: str | None = None
    last_success_unix: float | None = None  # time.time() of the last good answer
    response_bytes: int | None = None  # size of the last good answer


class PollError(Exception):
    """A failed poll: a status and a message for the log and the JSON model."""

    def __init__(self, status: PollStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Grpc:
    """The lazily imported gRPC pieces."""

    def __init__(self) -> None:
        import grpc  # noqa: PLC0415 (lazy: only when the feature is on)

        from exporter.attribution.podresources.v1 import api_pb2  # noqa: PLC0415

        self.grpc: Any = grpc
        self.api_pb2: Any = api_pb2


class PodResourcesClient:
    """One synchronous ``List`` call at a time (``list_allocations``). Not thread-safe."""

    def __init__(
        self,
        socket_path: str = DEFAULT_SOCKET,
        *,
        timeout_seconds: float = 2.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        extra_resource_names: frozenset[str] = frozenset(),
    ) -> None:
        self.socket_path = os.path.abspath(socket_path)
        self.timeout_seconds = timeout_seconds
        self.max_message_bytes = check_max_message_bytes(max_message_bytes)
        self.extra_resource_names = extra_resource_names
        self._grpc: _Grpc | None = None

    def list_allocations(self) -> tuple[AllocationTable, int]:
        """The node's GPU allocations and the answer's size in bytes.

        Raises:
            PollError: the socket cannot be reached or the call failed (status says why).
        """
        self._check_socket()
        if self._grpc is None:
            self._grpc = _Grpc()
        pieces = self._grpc
        grpc = pieces.grpc
        options = [
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.max_send_message_length", MIN_MESSAGE_BYTES),
            ("grpc.enable_retries", 0),
        ]
        try:
            with grpc.insecure_channel(f"unix:{self.socket_path}", options=options) as channel:
                list_pods = channel.unary_unary(
                    f"/{SERVICE}/{LIST_METHOD}",
                    request_serializer=pieces.api_pb2.ListPodResourcesRequest.SerializeToString,
                    response_deserializer=pieces.api_pb2.ListPodResourcesResponse.FromString,
                )
                response = list_pods(pieces.api_pb2.ListPodResourcesRequest(),
                                     timeout=self.timeout_seconds)
        except grpc.RpcError as err:
            raise self._rpc_error(err) from None
        table = allocations_from_pods(response.pod_resources, self.extra_resource_names)
        return table, int(response.ByteSize())

    def _check_socket(self) -> None:
        """Connect once with a plain socket: errno gives a clearer reason than gRPC does."""
        path = self.socket_path
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            raise PollError(PollStatus.SOCKET_MISSING, f"{path}: no such socket") from None
        except PermissionError:
            raise PollError(PollStatus.PERMISSION_DENIED, f"{path}: permission denied") from None
        except OSError as err:
            raise PollError(PollStatus.ERROR, f"{path}: {err.strerror}") from None
        if not stat.S_ISSOCK(mode):
            raise PollError(PollStatus.NOT_A_SOCKET, f"{path}: not a unix socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(self.timeout_seconds)
        try:
            probe.connect(path)
        except PermissionError:
            raise PollError(
                PollStatus.PERMISSION_DENIED,
                f"{path}: permission denied (the kubelet's socket is root-only; run as root)",
            ) from None
        except TimeoutError:
            raise PollError(PollStatus.TIMEOUT, f"{path}: connect timed out") from None
        except OSError as err:
            status = (PollStatus.UNAVAILABLE if err.errno in (errno.ECONNREFUSED, errno.ENOENT)
                      else PollStatus.ERROR)
            raise PollError(status, f"{path}: {err.strerror}") from None
        finally:
            probe.close()

    def _rpc_error(self, err: Any) -> PollError:
        codes = self._grpc.grpc.StatusCode if self._grpc else None
        code = err.code() if callable(getattr(err, "code", None)) else None
        details = (err.details() if callable(getattr(err, "details", None)) else None) or str(err)
        message = f"List: {getattr(code, 'name', code)}: {details}"
        if codes is None or code is None:
            return PollError(PollStatus.ERROR, message)
        if code == codes.DEADLINE_EXCEEDED:
            return PollError(PollStatus.TIMEOUT, f"List: no answer within {self.timeout_seconds} s")
        if code == codes.RESOURCE_EXHAUSTED:
            if "larger than max" in details:
                return PollError(
                    PollStatus.TOO_LARGE,
                    f"{message} (raise --kubernetes.pod-resources-max-bytes, at most "
                    f"{MAX_MESSAGE_BYTES_LIMIT})",
                )
            return PollError(PollStatus.REJECTED, message)
        if code == codes.UNAVAILABLE:
            return PollError(PollStatus.UNAVAILABLE, message)
        if code == codes.UNIMPLEMENTED:
            return PollError(PollStatus.UNIMPLEMENTED, message)
        return PollError(PollStatus.ERROR, message)


class PodResourcesPoller:
    """Polls a ``PodResourcesClient`` every ``interval`` seconds in a daemon thread.

    ``state()`` is safe from any thread. ``poll_once()`` runs one poll synchronously (the
    thread calls it; tests may too).
    """

    def __init__(
        self,
        client: PodResourcesClient,
        *,
        interval_seconds: float = 5.0,
        stale_after_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if interval_seconds < MIN_INTERVAL_SECONDS:
            raise ValueError(f"poll interval must be at least {MIN_INTERVAL_SECONDS} s")
        self.client = client
        self.interval_seconds = interval_seconds
        self.stale_after_seconds = max(stale_after_seconds, interval_seconds)
        self._clock = clock
        self._wall_clock = wall_clock
        self._lock = threading.Lock()
        self._state = PodResourcesState(None, PollStatus.PENDING)
        self._good_at: float | None = None  # monotonic time of the last good answer
        self._errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def state(self) -> PodResourcesState:
        """The latest state (the table is None once it is older than ``stale_after``)."""
        with self._lock:
            current = self._state
            if (current.table is not None and self._good_at is not None
                    and self._clock() - self._good_at > self.stale_after_seconds):
                current = PodResourcesState(None, current.status, current.error,
                                            current.last_success_unix)
            return current

    def take_errors(self) -> dict[str, int]:
        """Failed polls since the last call, as ``{ERROR_KIND: n}`` (empty when none; a
        missing socket is a state, not an error: not counted)."""
        with self._lock:
            count, self._errors = self._errors, 0
        return {ERROR_KIND: count} if count else {}

    def poll_once(self) -> PodResourcesState:
        """One ``List`` call; updates and returns the state. Never raises."""
        try:
            table, size = self.client.list_allocations()
        except PollError as err:
            return self._failed(err.status, str(err))
        except Exception as err:  # a bug or an odd answer must not kill the thread
            log.exception("PodResources poll failed")
            return self._failed(PollStatus.ERROR, f"{type(err).__name__}: {err}")
        now = self._clock()
        state = PodResourcesState(table, PollStatus.OK, None, self._wall_clock(), size)
        with self._lock:
            if self._state.status is not PollStatus.OK:
                log.info("PodResources: %d GPU allocations from %s", len(table.allocations),
                         self.client.socket_path)
            self._state, self._good_at = state, now
        return state

    def _failed(self, status: PollStatus, message: str) -> PodResourcesState:
        with self._lock:
            previous = self._state
            if previous.status is not status:
                log.warning("PodResources: %s", message)
            if status is not PollStatus.SOCKET_MISSING:  # a state (see the status metric)
                self._errors += 1
            self._state = PodResourcesState(previous.table, status, message,
                                            previous.last_success_unix, previous.response_bytes)
        return self.state()

    # --- thread -------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the polling thread (first poll at once). Idempotent."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="gpu-exporter-podresources",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and wait up to ``timeout`` for it (a call in flight ends by its own
        timeout; the thread is a daemon, so it never holds the process up)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = self._clock()
            self.poll_once()
            self._stop.wait(max(0.0, self.interval_seconds - (self._clock() - started)))
