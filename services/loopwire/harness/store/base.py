"""The session store's engine-independent part: records, statements and the replica lease.

An append-only ``items`` table is the transcript; (session_id, seq) is its primary key, so a
second writer of a slot is refused (SequenceTaken), never interleaved. Every item is committed
before the next model call, so a harness killed at any point resumes with exactly the
transcript it had (invariant 7). Tool calls of an unfinished turn (waiting for approval) live
in ``pending_calls`` until resolved.

Several harness replicas may share one database (PostgreSQL): the replica running a session
owns it (``owner``) and keeps a heartbeat; another replica may take it over only once that
heartbeat is older than the lease, so one session never runs twice at once. A cancel asked on
another replica is a flag the owner's heartbeat picks up.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field

from loopwire.common.errors import Code, RequestError
from loopwire.v1 import common_pb2, harness_pb2

log = logging.getLogger("loopwire.harness.store")

Status = harness_pb2.SessionStatus
Statement = tuple[str, tuple]

# A session whose owner has not written a heartbeat for this long may be taken over.
DEFAULT_LEASE_S = 15.0

# ListSessions pages stay far below gRPC's default 4 MiB client limit whatever the tasks hold:
# a summary carries the task's first LIST_TASK_CHARS characters (GetSession has it whole), and
# a page ends early (with a next token) once its sessions reach LIST_PAGE_BYTES.
LIST_TASK_CHARS = 1000
LIST_PAGE_BYTES = 1024 * 1024
TRUNCATED = "…"

# The columns every engine has; `?` placeholders (an engine rewrites them if it must).
SESSION_COLUMNS = (
    "session_id", "status", "task", "workspace", "instructions", "tools", "start", "replay_source",
    "created_at_ms", "updated_at_ms", "item_count", "turn_count", "last_response_id", "held_items", "error",
    "tenant", "owner", "heartbeat_ms", "cancel_requested",
)


class Decision:
    NONE = 0  # the call needs no approval (it ran, or waits behind another call)
    PENDING = 1
    APPROVED = 2
    DENIED = 3


class StoreError(Exception):
    """Base of the errors a store raises whatever its engine."""


class SequenceTaken(StoreError):
    """Another writer already appended at this position of the transcript (nothing was written)."""


class SessionBusy(StoreError):
    """The session runs on another harness replica (its lease is fresh)."""


class StoreUnavailable(StoreError, RequestError):
    """The database cannot be reached or written now (down, an I/O error); nothing was written.
    A RequestError too, so whoever reports it (a run, a Run request) gives its code, retryable."""

    CODE = Code.ERROR_CODE_UNAVAILABLE
    PREFIX = "the session store is unavailable: "

    def __init__(self, cause: str) -> None:
        super().__init__(self.CODE, self.PREFIX + cause, retryable=True)


class StoreFull(StoreUnavailable):
    """The database's disk is full; nothing was written, and a retry works once space is freed."""

    CODE = Code.ERROR_CODE_RESOURCE_EXHAUSTED
    PREFIX = "the session store's disk is full: "


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class PendingCall:
    index: int
    call: common_pb2.FunctionCall
    approval_id: str
    # A Decision value: PENDING until a human answers.
    decision: int
    # Set once the call ran (or was refused) while another call of its turn still waits.
    result: common_pb2.FunctionCallOutput | None


@dataclass
class StoredSession:
    session: harness_pb2.Session
    start: harness_pb2.StartTask
    instructions: str
    tools: list[common_pb2.Tool]
    items: list[common_pb2.Item]
    turns: list[harness_pb2.TurnProfile]
    last_response_id: str
    held_items: int
    pending: list[PendingCall] = field(default_factory=list)
    tenant: str = ""  # the tenant that owns the session: no other tenant sees or drives it
    # Calls whose tool started before the turn that made them was stored (write-ahead journal).
    started_calls: list[common_pb2.FunctionCall] = field(default_factory=list)


class SessionStore(ABC):
    """Sessions, their append-only items, turn profiles and pending approvals.

    Methods are blocking (callers use worker threads); an engine supplies ``_tx`` and ``_query``.
    """

    # Whether several processes share the database (then leases and heartbeats matter).
    shared = False

    def __init__(self, lease_s: float = DEFAULT_LEASE_S) -> None:
        self.owner = f"h-{uuid.uuid4().hex[:12]}"  # this replica, as written in `sessions.owner`
        self.lease_s = lease_s
        # Called (from the heartbeat thread) with a session id another replica asked to cancel.
        self.on_cancel_requested: Callable[[str], None] | None = None
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        # Sessions whose run is in this process. Only their leases are kept fresh: a run whose final
        # status could not be written (a full disk) leaves its row RUNNING, and that lease must run out.
        self._running: set[str] = set()
        self._stamp_lock = threading.Lock()
        self._last_started_ns = 0

    @abstractmethod
    def _tx(self, statements: list[Statement], recheck: Callable[[], bool] | None = None) -> list[int]:
        """Run the statements in one transaction; their row counts. ``recheck`` (after a retry whose
        first try may have committed) says whether a conflict is that first try's own write."""

    @abstractmethod
    def _query(self, sql: str, params: tuple = ()) -> list[tuple]: ...

    @abstractmethod
    def _close(self) -> None: ...

    @abstractmethod
    def describe(self) -> str:
        """Where the sessions live, as a --sessions value (no password)."""

    def close(self) -> None:
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join(timeout=5)
        self._close()

    def start_heartbeat(self) -> None:
        """Keep this replica's leases fresh and pick up cancels asked elsewhere (shared engines)."""
        if self.shared and self._heartbeat is None:
            self._heartbeat = threading.Thread(target=self._beat, name="session-lease", daemon=True)
            self._heartbeat.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            try:
                self.heartbeat()
            except StoreError as e:
                log.warning("session lease heartbeat failed: %s", e)

    def heartbeat(self) -> list[str]:
        """Refresh the leases of sessions running here; the ids of those another replica asked to cancel."""
        running = sorted(self._running.copy())  # a copy: runs start and end in worker threads
        if not running:
            return []
        mine = f"owner = ? AND status = ? AND session_id IN ({', '.join('?' * len(running))})"
        params = (self.owner, Status.SESSION_STATUS_RUNNING, *running)
        self._tx([(f"UPDATE sessions SET heartbeat_ms = ? WHERE {mine}", (now_ms(), *params))])
        rows = self._query(f"SELECT session_id FROM sessions WHERE {mine} AND cancel_requested = 1", params)
        cancelled = [r[0] for r in rows]
        if cancelled and self.on_cancel_requested is not None:
            for sid in cancelled:
                self.on_cancel_requested(sid)
        return cancelled

    def _free_or_mine(self) -> tuple[str, tuple]:
        """SQL condition (and parameters): the session is not running under another replica's fresh lease."""
        return ("(status != ? OR owner = '' OR owner = ? OR heartbeat_ms < ?)",
                (Status.SESSION_STATUS_RUNNING, self.owner, now_ms() - int(self.lease_s * 1000)))

    # -- writes --------------------------------------------------------------------

    def create(
        self,
        session_id: str,
        start: harness_pb2.StartTask,
        instructions: str,
        tools: list[common_pb2.Tool],
        workspace: str,
        replay_source: str,
        tenant: str = "",
    ) -> None:
        t = now_ms()
        tools_blob = common_pb2.ToolSearchOutput(tools=tools).SerializeToString(deterministic=True)
        start_blob = start.SerializeToString(deterministic=True)

        def ours() -> bool:
            rows = self._query("SELECT start, tenant FROM sessions WHERE session_id = ?", (session_id,))
            return bool(rows) and bytes(rows[0][0]) == start_blob and rows[0][1] == tenant

        cond, cond_params = self._free_or_mine()
        self._tx([(  # first, what a start whose task could not be stored left (see exists)
            f"DELETE FROM sessions WHERE session_id = ? AND item_count = 0 AND {cond}", (session_id, *cond_params),
        ), (
            "INSERT INTO sessions (session_id, status, task, workspace, instructions, tools, start, replay_source,"
            " created_at_ms, updated_at_ms, tenant, owner, heartbeat_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (session_id, Status.SESSION_STATUS_RUNNING, start.task, workspace, instructions, tools_blob,
             start_blob, replay_source, t, t, tenant, self.owner, t),
        )], recheck=ours)
        self._running.add(session_id)  # its run starts next

    def exists(self, session_id: str) -> bool:
        """Whether the id is taken; not by a start whose task could not be stored (a full disk): no
        items and no run anywhere. A retried start replaces that."""
        if session_id in self._running:
            return True
        cond, cond_params = self._free_or_mine()
        return bool(self._query(f"SELECT 1 FROM sessions WHERE session_id = ? AND NOT (item_count = 0 AND {cond})",
                                (session_id, *cond_params)))

    def append(self, session_id: str, items: list[common_pb2.Item], *, first_seq: int, new_turn: bool = False) -> None:
        """Append items at ``first_seq``; SequenceTaken if another writer holds any of those slots."""
        t = now_ms()
        blobs = [item.SerializeToString(deterministic=True) for item in items]
        statements: list[Statement] = [
            ("INSERT INTO items (session_id, seq, item, created_at_ms) VALUES (?, ?, ?, ?)",
             (session_id, first_seq + i, blob, t))
            for i, blob in enumerate(blobs)
        ]
        statements.append((
            "UPDATE sessions SET item_count = ?, turn_count = turn_count + ?, updated_at_ms = ? WHERE session_id = ?",
            (first_seq + len(items), int(new_turn), t, session_id),
        ))

        def ours() -> bool:  # a retried commit that had in fact succeeded: the same bytes are there
            rows = self._query("SELECT item FROM items WHERE session_id = ? AND seq >= ? AND seq < ? ORDER BY seq",
                               (session_id, first_seq, first_seq + len(blobs)))
            return [bytes(r[0]) for r in rows] == blobs

        try:
            self._tx(statements, recheck=ours)
        except StoreUnavailable:
            if first_seq == 0:
                self._drop_unstarted(session_id)
            raise

    def _drop_unstarted(self, session_id: str) -> None:
        """A new session whose task could not be stored has nothing to resume and no run: remove it.
        Best effort: if that fails too, it shows INTERRUPTED and a retried start replaces it."""
        self._running.discard(session_id)
        try:
            self._tx([("DELETE FROM sessions WHERE session_id = ? AND owner = ? AND item_count = 0",
                       (session_id, self.owner))])
        except StoreError as e:
            log.warning("session %s: cannot remove it after its task could not be stored: %s", session_id, e)

    def record_call_started(self, session_id: str, call: common_pb2.FunctionCall) -> None:
        """Journal a call before its tool starts: tools start while the model still streams, so
        without this a crash before the turn is stored would leave a side effect and no call.
        Durable (as every write here) when it returns."""
        self._tx([self._started_statement(session_id, call)])

    def try_record_call_started(self, session_id: str, call: common_pb2.FunctionCall) -> bool:
        """Journal a call without waiting for the store (callable on the event loop): True when it is
        journaled, or queued to be, with the guarantees the engine's docstring states; False when this
        engine cannot (its writes go over a network): the caller awaits ``record_call_started`` in a
        worker thread instead."""
        return False

    def _started_statement(self, session_id: str, call: common_pb2.FunctionCall) -> Statement:
        """The journal row of a started call. Its time is strictly increasing in this process, so the
        journal (read in that order) lists calls in the order they were recorded, even within a tick."""
        with self._stamp_lock:
            self._last_started_ns = stamp = max(time.time_ns(), self._last_started_ns + 1)
        return ("INSERT INTO started_calls (session_id, call_id, call, started_at_ns) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (session_id, call_id) DO NOTHING",
                (session_id, call.call_id, call.SerializeToString(deterministic=True), stamp))

    def clear_started_calls(self, session_id: str) -> None:
        """The journaled calls are in the transcript now (or were reported lost)."""
        self._tx([("DELETE FROM started_calls WHERE session_id = ?", (session_id,))])

    def set_conversation(self, session_id: str, last_response_id: str, held_items: int) -> None:
        self._tx([("UPDATE sessions SET last_response_id = ?, held_items = ? WHERE session_id = ?",
                   (last_response_id, held_items, session_id))])

    def add_turn(self, session_id: str, profile: harness_pb2.TurnProfile) -> None:
        self._tx([("INSERT INTO turns (session_id, turn, profile) VALUES (?, ?, ?)"
                   " ON CONFLICT (session_id, turn) DO UPDATE SET profile = excluded.profile",
                   (session_id, profile.turn, profile.SerializeToString(deterministic=True)))])

    def set_status(self, session_id: str, status: int, error: str = "") -> None:
        """Set the status; RUNNING claims the session for this replica. SessionBusy while another
        replica's lease on it is fresh (then nothing changes)."""
        cond, cond_params = self._free_or_mine()
        t = now_ms()
        if status != Status.SESSION_STATUS_RUNNING:
            self._running.discard(session_id)  # the run ends here even if the write below fails
        if status == Status.SESSION_STATUS_RUNNING:
            sql = ("UPDATE sessions SET status = ?, error = ?, updated_at_ms = ?, owner = ?, heartbeat_ms = ?,"
                   f" cancel_requested = 0 WHERE session_id = ? AND {cond}")
            params: tuple = (status, error, t, self.owner, t, session_id, *cond_params)
        else:
            sql = f"UPDATE sessions SET status = ?, error = ?, updated_at_ms = ? WHERE session_id = ? AND {cond}"
            params = (status, error, t, session_id, *cond_params)
        if not self._tx([(sql, params)])[0] and self.exists(session_id):
            raise SessionBusy(self._busy_message(session_id))
        if status == Status.SESSION_STATUS_RUNNING:
            self._running.add(session_id)

    def _busy_message(self, session_id: str) -> str:
        rows = self._query("SELECT owner, heartbeat_ms FROM sessions WHERE session_id = ?", (session_id,))
        owner, beat = rows[0] if rows else ("?", now_ms())
        return (f"session {session_id!r} is running on harness replica {owner} (heartbeat "
                f"{(now_ms() - beat) / 1000:.1f} s ago); cancel it there, or resume it once that replica has "
                f"been silent for {self.lease_s:.0f} s")

    def request_cancel(self, session_id: str, tenant: str) -> bool:
        """Ask the replica running the session to cancel it; False when no replica runs it."""
        fresh = now_ms() - int(self.lease_s * 1000)
        return bool(self._tx([("UPDATE sessions SET cancel_requested = 1 WHERE session_id = ? AND tenant = ?"
                               " AND status = ? AND owner != '' AND heartbeat_ms >= ?",
                               (session_id, tenant, Status.SESSION_STATUS_RUNNING, fresh))])[0])

    def save_pending(self, session_id: str, pending: list[PendingCall]) -> None:
        """Replace the unfinished turn's calls (and mark the session as awaiting approval)."""
        statements: list[Statement] = [("DELETE FROM pending_calls WHERE session_id = ?", (session_id,))]
        for p in pending:
            statements.append((
                "INSERT INTO pending_calls (session_id, call_index, call, approval_id, decision, result)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (session_id, p.index, p.call.SerializeToString(deterministic=True), p.approval_id, p.decision,
                 p.result.SerializeToString(deterministic=True) if p.result is not None else None),
            ))
        if any(p.decision == Decision.PENDING for p in pending):
            self._running.discard(session_id)  # the run suspends
            statements.append(("UPDATE sessions SET status = ?, updated_at_ms = ? WHERE session_id = ?",
                               (Status.SESSION_STATUS_AWAITING_APPROVAL, now_ms(), session_id)))
        self._tx(statements)

    def decide(self, approval_id: str, approved: bool, denial: common_pb2.FunctionCallOutput | None) -> None:
        self._tx([("UPDATE pending_calls SET decision = ?, result = ? WHERE approval_id = ?",
                   (Decision.APPROVED if approved else Decision.DENIED,
                    denial.SerializeToString(deterministic=True) if denial is not None else None, approval_id))])

    def clear_pending(self, session_id: str) -> None:
        self._tx([("DELETE FROM pending_calls WHERE session_id = ?", (session_id,))])

    def mark_interrupted(self) -> int:
        """At startup: sessions left RUNNING by a dead process can be resumed. On a shared database
        only those whose lease ran out (the others run on live replicas)."""
        sql = "UPDATE sessions SET status = ? WHERE status = ?"
        params: tuple = (Status.SESSION_STATUS_INTERRUPTED, Status.SESSION_STATUS_RUNNING)
        if self.shared:
            sql += " AND heartbeat_ms < ?"
            params = (*params, now_ms() - int(self.lease_s * 1000))
        return self._tx([(sql, params)])[0]

    # -- reads ---------------------------------------------------------------------

    def _status_here(self, session: harness_pb2.Session, owner: str) -> harness_pb2.SessionStatus.ValueType:
        """RUNNING in the database under this replica, but no run here: its run ended without its final
        status being stored (a full disk). It is resumable, and shown so (a restart writes the same)."""
        if (session.status == Status.SESSION_STATUS_RUNNING and owner == self.owner
                and session.session_id not in self._running):
            return Status.SESSION_STATUS_INTERRUPTED
        return session.status

    def session_of_approval(self, approval_id: str) -> str | None:
        rows = self._query("SELECT session_id FROM pending_calls WHERE approval_id = ?", (approval_id,))
        return rows[0][0] if rows else None

    def load(self, session_id: str) -> StoredSession | None:
        rows = self._query(
            "SELECT session_id, status, task, workspace, item_count, turn_count, created_at_ms, updated_at_ms,"
            " replay_source, instructions, tools, start, last_response_id, held_items, tenant, owner FROM sessions"
            " WHERE session_id = ?", (session_id,))
        if not rows:
            return None
        row = rows[0]
        tools = common_pb2.ToolSearchOutput.FromString(bytes(row[10])).tools
        items = [common_pb2.Item.FromString(bytes(r[0])) for r in
                 self._query("SELECT item FROM items WHERE session_id = ? ORDER BY seq", (session_id,))]
        turns = [harness_pb2.TurnProfile.FromString(bytes(r[0])) for r in
                 self._query("SELECT profile FROM turns WHERE session_id = ? ORDER BY turn", (session_id,))]
        pending = [
            PendingCall(r[0], common_pb2.FunctionCall.FromString(bytes(r[1])), r[2], r[3],
                        common_pb2.FunctionCallOutput.FromString(bytes(r[4])) if r[4] is not None else None)
            for r in self._query("SELECT call_index, call, approval_id, decision, result FROM pending_calls"
                                 " WHERE session_id = ? ORDER BY call_index", (session_id,))
        ]
        started = [common_pb2.FunctionCall.FromString(bytes(r[0])) for r in
                   self._query("SELECT call FROM started_calls WHERE session_id = ? ORDER BY started_at_ns",
                               (session_id,))]
        session = _session(row[:9])
        session.status = self._status_here(session, row[15])
        return StoredSession(
            session=session,
            start=harness_pb2.StartTask.FromString(bytes(row[11])),
            instructions=row[9],
            tools=list(tools),
            items=items,
            turns=turns,
            last_response_id=row[12],
            held_items=row[13],
            pending=pending,
            tenant=row[14],
            started_calls=started,
        )

    def list(self, page_size: int, page_token: str, tenant: str = "") -> tuple[list[harness_pb2.Session], str]:
        """The tenant's sessions, newest first, at most ``page_size`` (fewer past LIST_PAGE_BYTES),
        tasks cut to LIST_TASK_CHARS; the token is an opaque cursor (created_at_ms, session_id)."""
        sql = (f"SELECT session_id, status, substr(task, 1, {LIST_TASK_CHARS + 1}), workspace, item_count,"
               " turn_count, created_at_ms, updated_at_ms, replay_source, owner FROM sessions WHERE tenant = ?")
        params: tuple = (tenant,)
        if page_token:
            created, sid = decode_page_token(page_token)
            sql += " AND (created_at_ms, session_id) < (?, ?)"
            params = (tenant, created, sid)
        sql += " ORDER BY created_at_ms DESC, session_id DESC LIMIT ?"
        rows = self._query(sql, (*params, page_size + 1))
        sessions: list[harness_pb2.Session] = []
        size = 0
        for row in rows[:page_size]:
            session = _session(row)
            session.status = self._status_here(session, row[9])
            if len(session.task) > LIST_TASK_CHARS:
                session.task = session.task[:LIST_TASK_CHARS] + TRUNCATED
            size += session.ByteSize()
            if sessions and size > LIST_PAGE_BYTES:
                break
            sessions.append(session)
        next_token = ""
        if len(rows) > len(sessions):
            last = sessions[-1]
            next_token = base64.urlsafe_b64encode(f"{last.created_at_ms}:{last.session_id}".encode()).decode()
        return sessions, next_token


def decode_page_token(token: str) -> tuple[int, str]:
    """ValueError for anything that is not a token this store made (a creation time out of the
    databases' 64-bit range included: the engines would overflow binding it)."""
    try:
        created, sid = base64.urlsafe_b64decode(token.encode("ascii")).decode().split(":", 1)
        value = int(created)
    except (ValueError, UnicodeError) as e:
        raise ValueError("not a page token from ListSessions") from e
    if not 0 <= value < 2**63:
        raise ValueError("not a page token from ListSessions (its time is out of range)")
    return value, sid


def _session(row: tuple) -> harness_pb2.Session:
    return harness_pb2.Session(
        session_id=row[0], status=row[1], task=row[2], workspace=row[3], item_count=row[4], turn_count=row[5],
        created_at_ms=row[6], updated_at_ms=row[7], replay_source=row[8],
    )
