"""lockstorm adapter for pottery's `Redlock` (the Redis "Redlock" algorithm).

SET NX PX of a random UUID on every master in parallel; acquired when a
majority said yes within the validity time. Topologies: `redlock` (every node
is a master) and `single` (nodes[0] only). pottery stores the lock under
"redlock:<key>", not <key>. No renewal (extend() exists but is never called).
"""
from pottery import Redlock
from pottery.exceptions import ReleaseUnlockedLock
import redis

from protocol import Adapter, host_port, lock_nodes, redis_opts, serve, version


class PotteryRedlock(Adapter):
    # Fewer than a majority of masters deleted our UUID. With raise_on_redis_errors
    # a majority of *errors* raises QuorumIsImpossible instead; protocol.py treats
    # a ReleaseUnlockedLock that lists redis errors as unknown, not as not-held.
    NOT_HELD = (ReleaseUnlockedLock,)

    def init(self, req):
        nodes = lock_nodes(req)
        self.masters = {redis.Redis(*host_port(n), **redis_opts()) for n in nodes}
        self.key = req["key"]
        # pottery 3.0.1 takes auto_release_time in (float) seconds and sends
        # PX int(auto_release_time * 1000).
        self.ttl_s = req["ttl_ms"] / 1000
        # The UUID is only in the private `_uuid` slot, so no "token" feature.
        return f"{version('pottery')} ({version('redis', 'redis-py')})", ["check"]

    def stored_key(self, key):
        return "redlock:" + key

    def acquire(self, timeout_s):
        # Errors from a majority of masters raise (-> unknown) rather than
        # reading as "not acquired".
        lock = Redlock(key=self.key, masters=self.masters, auto_release_time=self.ttl_s,
                       raise_on_redis_errors=True)
        # With blocking=True, timeout=0 would return False without trying once.
        got = lock.acquire(timeout=timeout_s) if timeout_s > 0 else lock.acquire(blocking=False)
        return lock if got else None

    def check(self, lock):
        # locked() returns the remaining validity (a majority of masters still
        # hold our UUID, minus drift and elapsed time) in *seconds* as a float in
        # 3.0.1 (its docstring says ms), 0 when not held.
        return lock.locked() > 0

    def release(self, lock):
        lock.release()


if __name__ == "__main__":
    serve(PotteryRedlock())
