"""lockstorm adapter for redis-py's built-in lock, `redis.lock.Lock`.

One key, SET NX PX with a random token; release and ownership checks compare
the token in Lua/GET. Topologies: `single` (nodes[0]), `replicated` (the
master that Redis Sentinel names; nodes[0] when no sentinels are given) and
`cluster` (redis-py's `RedisCluster`, seeded with every node: it follows the
cluster's slots and redirections itself). No renewal: the lock simply
expires after ttl_ms.
"""
import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import LockError
from redis.sentinel import Sentinel

from protocol import Adapter, host_port, redis_opts, serve, version


class RedisPyLock(Adapter):
    # LockNotOwnedError (a subclass) when the key no longer holds our token,
    # LockError itself when we never held it.
    NOT_HELD = (LockError,)

    def init(self, req):
        topology = req["topology"]
        if topology == "replicated" and req.get("sentinels"):
            sentinel = Sentinel([host_port(s) for s in req["sentinels"]],
                                sentinel_kwargs=redis_opts(data_node=False), **redis_opts())
            self.redis = sentinel.master_for(req["master"])
        elif topology == "cluster":
            seeds = [ClusterNode(*host_port(n)) for n in req["nodes"]]
            # A cluster has database 0 only: init never names another.
            opts = {k: v for k, v in redis_opts().items() if k != "db"}
            self.redis = RedisCluster(startup_nodes=seeds, **opts)
        elif topology in ("single", "replicated"):
            self.redis = redis.Redis(*host_port(req["nodes"][0]), **redis_opts())
        else:
            raise ValueError(f"unsupported topology {topology!r}")
        self.key = req["key"]
        self.ttl_s = req["ttl_ms"] / 1000  # redis-py takes float seconds, sends PX
        return version("redis", "redis-py"), ["check", "token"]

    def acquire(self, timeout_s):
        # thread_local=False: the token lives on the Lock object, not in the
        # calling thread (we only ever use one thread, but be explicit).
        lock = self.redis.lock(self.key, timeout=self.ttl_s, blocking=True,
                               blocking_timeout=timeout_s, thread_local=False)
        return lock if lock.acquire() else None

    def token(self, lock):
        return lock.local.token.decode()

    def check(self, lock):
        # owned() is all the library offers: it GETs the key and compares it
        # with our token, i.e. Redis's view at that instant, not a lease.
        return lock.owned()

    def release(self, lock):
        lock.release()


if __name__ == "__main__":
    serve(RedisPyLock())
