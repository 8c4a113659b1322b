"""lockstorm adapter for aioredlock's `Aioredlock` (asyncio Redlock on aioredis 1.x).

A Lua SET PX of a random UUID on every node (it also succeeds when the key
already holds our UUID); acquired when a majority said yes within the lease
minus drift. The lock is taken without a lock_timeout, so the library's
watchdog extends it: every 0.6 * internal_lock_timeout (= ttl_ms) it sets the
lease again, and a failed extension unlocks it and marks it invalid. The key
is <key> itself, no prefix. Topologies: `redlock` (every node is a master)
and `single` (nodes[0] only).

The library is asyncio and this helper is not: the event loop runs in a
thread of its own, so the watchdog keeps extending between requests.
"""
import asyncio
import contextlib
import threading
import uuid

from aioredlock import Aioredlock, LockAcquiringError

from protocol import login, SOCKET_TIMEOUT_S, Adapter, host_port, lock_nodes, log, serve, version

# aioredlock's default pause between attempts is uniform(0.1, 0.3) s.
RETRY_DELAY_S = 0.2


class NotHeld(Exception):
    """Every node that answered refused: the key holds another UUID."""


class AioredlockAdapter(Adapter):
    NOT_HELD = (NotHeld,)

    def options(self):
        # aioredis 1.x connections, not redis-py's: a connect timeout only.
        return {"timeout": "1 s connect (default: none)"}

    def init(self, req):
        nodes = lock_nodes(req)
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.key = req["key"]
        # aioredis 1.x has a connect timeout but no read timeout and never
        # retries a command; each op is bounded below instead.
        # aioredis 1.x takes a password, not an ACL user.
        password, db = login()["password"], login()["db"]
        connections = [{"host": h, "port": p, "timeout": SOCKET_TIMEOUT_S, "password": password,
                        "db": db} for h, p in map(host_port, nodes)]
        self.manager = Aioredlock(connections, internal_lock_timeout=req["ttl_ms"] / 1000)
        self.pending = None  # the UUID of an acquire answered lock-busy while it ran
        client = f"{version('aioredlock')} ({version('aioredis')})"
        return client, ["check", "token"]

    def run(self, coro, timeout_s):
        return asyncio.run_coroutine_threadsafe(
            asyncio.wait_for(coro, timeout_s), self.loop).result()

    def acquire(self, timeout_s):
        lock_id = str(uuid.uuid4())
        # The library counts attempts, for acquire and extend alike (a public
        # attribute): the count whose pauses, one fewer, fit in timeout_ms.
        self.manager.retry_count = max(1, int(timeout_s / RETRY_DELAY_S) - 1)
        try:
            # No lock_timeout: the lease is internal_lock_timeout, extended by
            # the watchdog.
            return self.run(self.manager.lock(self.key, lock_identifier=lock_id), timeout_s)
        except LockAcquiringError:  # the last attempt was refused, no node failed
            return None
        except asyncio.TimeoutError:
            # Cancelled mid-attempt, the library unsets its UUID in the
            # background; settle() makes sure of it before the next request.
            log.warning("acquire still running when its %.3f s ran out: answered lock-busy", timeout_s)
            self.pending = lock_id
            return None

    def settle(self):
        if self.pending is None:
            return
        lock_id, self.pending = self.pending, None
        with contextlib.suppress(LockAcquiringError):  # already gone, or another's
            self.run(self.manager.redis.unset_lock(self.key, lock_id), 2 * SOCKET_TIMEOUT_S)

    def token(self, lock):
        return lock.id

    def check(self, lock):
        # The library's own view: only unlock (also after a failed
        # extension) turns it False.
        return lock.valid

    def release(self, lock):
        try:
            # unlock() stops the watchdog, then runs the unset script on every
            # node, which counts a missing key as released.
            self.run(self.manager.unlock(lock), 2 * SOCKET_TIMEOUT_S)
        except LockAcquiringError as e:
            raise NotHeld() from e


if __name__ == "__main__":
    serve(AioredlockAdapter())
