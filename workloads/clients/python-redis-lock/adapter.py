"""lockstorm adapter for python-redis-lock's `redis_lock.Lock` with auto-renewal.

SET NX EX of a random id; waiters BLPOP a signal list that release pushes to.
With auto_renewal a daemon thread re-EXPIREs the key every expire*2/3 s for as
long as the lock is held, so the lock only lapses if this process stalls
(e.g. SIGSTOP) or loses Redis. The library prefixes the key: it stores
"lock:<key>" (and signals on "lock-signal:<key>"). Topology: `single`.
"""
import logging
import math
import time

import redis
import redis_lock

from protocol import SOCKET_TIMEOUT_S, Adapter, host_port, log, redis_opts, serve, version

POLL_S = 0.05
# Non-blocking attempts log a warning each time they find the lock busy.
logging.getLogger("redis_lock.acquire").setLevel(logging.ERROR)


class PythonRedisLock(Adapter):
    NOT_HELD = (redis_lock.NotAcquired,)

    def options(self):
        return {**super().options(), "socket_timeout": "2 s (default: none)",
                "auto_renewal": "True (default: False)"}

    def init(self, req):
        if req["topology"] != "single":
            raise ValueError(f"unsupported topology {req['topology']!r}")
        # Blocking acquires BLPOP for up to 1 s, so reads may take that long.
        self.redis = redis.Redis(*host_port(req["nodes"][0]),
                                 **redis_opts(socket_timeout=1 + SOCKET_TIMEOUT_S))
        self.key = req["key"]
        # expire is whole seconds and the library truncates with int(): 2.5 -> 2
        # shortens the lease, 0.5 -> 0 makes SET fail ("invalid expire time"),
        # and 0 itself means "never expires". So round up, to at least 1 s.
        self.expire = max(1, math.ceil(req["ttl_ms"] / 1000))
        if self.expire * 1000 != req["ttl_ms"]:
            log.warning("ttl_ms %s rounded up to expire=%d s", req["ttl_ms"], self.expire)
        return f"{version('python-redis-lock')} ({version('redis', 'redis-py')})", ["check", "token"]

    def stored_key(self, key):
        return "lock:" + key

    def acquire(self, timeout_s):
        lock = redis_lock.Lock(self.redis, self.key, expire=self.expire, auto_renewal=True, id=None)
        # The library's timeout is whole seconds too (int(0.3) == 0 even waits
        # forever), and a wake-up that loses the race restarts its full wait. So
        # use its blocking acquire 1 s at a time and poll for the sub-second rest.
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if lock.acquire(blocking=True, timeout=1) if left >= 1 else lock.acquire(blocking=False):
                return lock
            if left <= 0:
                return None
            if left < 1:
                time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))

    def token(self, lock):
        return lock.id

    def check(self, lock):
        # The library's own locked() only says whether *anyone* holds the key,
        # and whether the renewal thread still runs is private state. Its public
        # get_owner_id() (a GET) against our id says whether Redis still has us.
        return lock.get_owner_id() == lock.id

    def release(self, lock):
        lock.release()  # stops (joins) the renewal thread first


if __name__ == "__main__":
    serve(PythonRedisLock())
