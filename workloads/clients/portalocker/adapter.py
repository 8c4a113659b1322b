"""lockstorm adapter for portalocker's `RedisLock` (portalocker.redis).

No key and no TTL: the lock is a pub/sub subscription. The holder subscribes
to the channel <key> on a connection of its own, which a daemon thread keeps
reading; a contender counts the channel's subscribers, pings them, and a
holder that stays silent for unavailable_timeout (1 s) gets its connection
killed (CLIENT KILL). So the lock lasts as long as the holder's connection,
and ends when the holder unsubscribes or a contender reaps it. Nothing is
stored under <key> at all. Topology: `single` (the library requires one
standalone Redis).
"""
import threading

import portalocker
from portalocker.exceptions import AlreadyLocked

from protocol import Adapter, host_port, log, redis_opts, serve, version


class Lost(Exception):
    """The library recorded that the lock was revoked while held."""


class PortalockerRedisLock(Adapter):
    NOT_HELD = (Lost,)

    def init(self, req):
        if req["topology"] != "single":
            raise ValueError(f"unsupported topology {req['topology']!r}")
        host, port = host_port(req["nodes"][0])
        # The subscription connection is cloned from these (with its own
        # zero-retry policy), so it gets the one-second socket timeout too.
        self.redis_kwargs = dict(host=host, port=port, **redis_opts())
        self.channel = req["key"]
        self.pending = None  # an acquire still running after it was answered
        client = f"{version('portalocker')} ({version('redis', 'redis-py')})"
        # There is no lease: ttl_ms has nothing to set.
        return client, ["check", "token", "no-ttl"]

    def acquire(self, timeout_s):
        lock = portalocker.RedisLock(
            self.channel, redis_kwargs=dict(self.redis_kwargs),
            # 4.x interrupts the main thread (KeyboardInterrupt) on a loss by
            # default, which would kill this adapter; `lost` reports it.
            interrupt_on_lost=False,
            on_lost=lambda lk: log.warning("lock lost (holder %s)", lk.holder_id))
        outcome = {}

        def attempt():
            try:
                lock.acquire(timeout=timeout_s)
                outcome["won"] = True
            except AlreadyLocked:  # it unsubscribed again: definitely not held
                outcome["won"] = False
            except BaseException as e:
                outcome["error"] = e

        # A probe waits up to 1 s for silent holders and may run past the
        # library's timeout; the answer may not, so the attempt runs in a
        # thread and one still running is settled before the next request.
        thread = threading.Thread(target=attempt, daemon=True)
        thread.start()
        thread.join(timeout_s)
        if thread.is_alive():
            log.warning("acquire still running when its %.3f s ran out: answered lock-busy", timeout_s)
            self.pending = (thread, lock, outcome)
            return None
        if "error" in outcome:
            raise outcome["error"]
        return lock if outcome["won"] else None

    def settle(self):
        if self.pending is None:
            return
        thread, lock, outcome = self.pending
        self.pending = None
        thread.join()
        if outcome.get("won"):
            log.warning("acquire won after it was answered lock-busy: releasing it")
            lock.release()

    def token(self, lock):
        return lock.holder_id

    def check(self, lock):
        # The library's own view: its reader thread records a loss when the
        # subscription's connection dies (killed by a contender, or reset).
        return not lock.lost

    def release(self, lock):
        # Unsubscribing is the release. It does not raise for a lock that was
        # lost, but `lost` stays True after it: that one was not ours.
        lock.release()
        if lock.lost:
            raise Lost()


if __name__ == "__main__":
    serve(PortalockerRedisLock())
