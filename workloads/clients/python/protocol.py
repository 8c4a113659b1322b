"""The JSON-lines loop shared by lockstorm's Python lock adapters.

The protocol is docs/protocol.md in the lockstorm repository (its examples are
tested against this file). An adapter subclasses `Adapter` and calls
`serve(adapter)`.
"""
import importlib.metadata
import json
import logging
import os
import sys

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

# Replies go to a private copy of the real stdout. fd 1 and sys.stdout now lead
# to stderr, so a stray print (even from C code) lands in the log instead of
# corrupting the protocol.
_replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
os.dup2(2, 1)
sys.stdout = sys.stderr
logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                    format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")
log = logging.getLogger("adapter")

# pottery monkey-patches json.dumps on import; an encoder of our own is immune.
_encode = json.JSONEncoder(ensure_ascii=True, separators=(",", ":")).encode

# Without a socket timeout a paused or partitioned node hangs us (and the worker)
# forever. redis-py 6 retries a failed command 3 times by default; a retried
# SET NX or release script turns a lost reply into a wrong *definite* answer
# ("busy", "not-held"), so each command gets exactly one attempt.
SOCKET_TIMEOUT_S = 1.0


# The database init names (a --target's /db): every data-node connection
# selects it, so no key of the run lands in another database.
_db = 0


def login():
    """A deployment's user and password, from the environment lockstorm sets
    for a --target run (empty on its own nodes, which have none), and the
    database init named."""
    return dict(username=os.environ.get("LOCKSTORM_REDIS_USER") or None,
                password=os.environ.get("LOCKSTORM_REDIS_PASSWORD") or None,
                db=_db)


# What redis_opts changes from redis-py's defaults, as init's "options" says.
CONNECTION_OPTIONS = {
    "socket_timeout": "1 s (default: none)",
    "socket_connect_timeout": "1 s (default: none)",
    "retry": "none (default: 3 retries)",
}


def redis_opts(socket_timeout=SOCKET_TIMEOUT_S, data_node=True):
    """Options for a connection to a data node (with the deployment's login)
    or, with data_node=False, to a Sentinel (asked without it)."""
    opts = dict(socket_timeout=socket_timeout, socket_connect_timeout=SOCKET_TIMEOUT_S,
                retry=Retry(NoBackoff(), 0))
    if data_node:
        opts.update(login())
    return opts


def host_port(addr):
    host, _, port = addr.rpartition(":")
    return host, int(port)


def lock_nodes(req, topologies=("redlock", "single")):
    """The nodes a Redlock-style client locks on: all of them on `redlock`,
    the first on `single`; another topology is refused."""
    if req["topology"] not in topologies:
        raise ValueError(f"unsupported topology {req['topology']!r}")
    return req["nodes"][:1] if req["topology"] == "single" else req["nodes"]


def version(dist, name=None):
    return f"{name or dist} {importlib.metadata.version(dist)}"


def describe(e):
    # pottery wraps the RedisErrors it met per master; classify by the first.
    cause = next(iter(getattr(e, "redis_errors", None) or ()), e)
    if isinstance(cause, (redis.TimeoutError, TimeoutError)):
        kind = "timeout"
    elif isinstance(cause, (redis.ConnectionError, ConnectionError)):
        kind = "connection"
    else:
        kind = "error"
    return f"{kind}: {type(e).__name__}: {e}"[:500]


class Adapter:
    NOT_HELD = ()  # exceptions by which release says "that lock was not ours"

    def init(self, req):  # -> (client, features)
        raise NotImplementedError

    def stored_key(self, key):
        """The key the library stores the lock under, given init's `key`:
        init's reply names it when the library prefixes it, so lockstorm's
        observer watches that key."""
        return key

    def options(self):
        """The library settings this adapter chose over the library's
        defaults (init's "options", recorded in run.json): each with why in
        docs/protocol.md."""
        return dict(CONNECTION_OPTIONS)

    def acquire(self, timeout_s):  # -> a fresh lock object that we hold, or None if busy
        raise NotImplementedError

    def token(self, lock):
        return None

    def fence(self, lock):  # -> the grant's fencing token (an int), for a "fence" adapter
        return None

    def check(self, lock):
        raise NotImplementedError

    def release(self, lock):
        raise NotImplementedError

    def settle(self):
        """Runs before each request after init: an adapter whose acquire
        answered lock-busy while the library was still trying releases a
        late win here, so no lock is left that no worker thinks it holds."""


def _handle(adapter, req, state):
    global _db
    op = req.get("op")
    if op == "init":
        _db = int(req.get("db") or 0)
        try:
            client, features = adapter.init(req)
        except Exception as e:
            log.exception("init failed")
            return {"ok": False, "error": "init: " + describe(e)}
        state.update(features=features, timeout_ms=req.get("acquire_timeout_ms", 4000))
        reply = {"ok": True, "client": client, "features": features, "options": adapter.options()}
        stored = adapter.stored_key(req["key"])
        if stored != req["key"]:
            reply["key"] = stored
        return reply
    if "features" not in state:
        return {"ok": False, "error": "error: not initialised"}
    try:
        adapter.settle()
    except Exception:  # the request at hand is not what failed
        log.exception("settling an earlier acquire failed")
    if op == "acquire":
        # A worker may acquire again after check said its lease lapsed. Dropping
        # the old object also ends python-redis-lock's renewal (it holds a weakref).
        if state.get("lock") is not None:
            log.warning("acquire while still holding a lock; forgetting the old one")
        state["lock"] = None
        lock = adapter.acquire(req.get("timeout_ms", state["timeout_ms"]) / 1000)
        if lock is None:
            return {"ok": False, "error": "lock-busy"}
        state["lock"] = lock
        reply = {"ok": True}
        token = adapter.token(lock)
        if token is not None:
            reply["token"] = token
        if "fence" in state["features"]:
            reply["fence"] = adapter.fence(lock)
        return reply
    if op == "check" and "check" in state["features"]:
        lock = state.get("lock")
        return {"ok": True, "valid": lock is not None and bool(adapter.check(lock))}
    if op == "release":
        lock, state["lock"] = state.get("lock"), None  # whatever the outcome, it is no longer ours
        if lock is None:
            return {"ok": False, "error": "not-held"}
        try:
            adapter.release(lock)
        except adapter.NOT_HELD as e:
            if getattr(e, "redis_errors", None):  # pottery: some masters failed, so unknown
                raise
            return {"ok": False, "error": "not-held"}
        return {"ok": True}
    return {"ok": False, "error": f"unsupported: {op}"}


def serve(adapter):
    state = {}
    for line in iter(sys.stdin.readline, ""):
        if not line.strip():
            continue
        req = {}
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                req = {}
                raise ValueError("request is not a JSON object")
            reply = _handle(adapter, req, state)
        except Exception as e:
            # An exception means we cannot tell what happened: "info", not a crash.
            log.exception("request %s failed", line.strip())
            reply = {"ok": None, "error": describe(e)}
        try:
            _replies.write(_encode({"id": req.get("id"), **reply}) + "\n")
            _replies.flush()
        except OSError:  # the worker is gone
            os._exit(1)
    # stdin closed: leave now; lock-renewal and executor threads must not keep us alive.
    os._exit(0)
