"""lockstorm adapter for kazoo's ZooKeeper lock, `kazoo.recipe.lock.Lock`.

ZooKeeper's recipe: an ephemeral sequential node under the lock's path, the
lowest sequence holds, a waiter watches its predecessor; the node lives as
long as the session, whose timeout is ttl_ms. Topology: `zookeeper` (the
ensemble's client addresses). `check` is kazoo's documented rule: the lock
is held only while the connection is CONNECTED; a SUSPENDED connection may
already have lost it (its session can expire meanwhile) and LOST has. The
fence, with `fenced`, is the lock node's creation zxid (czxid).
"""
import threading

from kazoo.client import KazooClient
from kazoo.exceptions import LockTimeout, NoNodeError, SessionExpiredError
from kazoo.protocol.states import KazooState

from protocol import Adapter, serve, version


class KazooLock(Adapter):
    # An expired session took its ephemeral lock node with it: definitely gone.
    NOT_HELD = (NoNodeError, SessionExpiredError)

    def init(self, req):
        if req["topology"] != "zookeeper":
            raise ValueError(f"unsupported topology {req['topology']!r}")
        self.ttl_s = req["ttl_ms"] / 1000
        # One try per connection: kazoo's default retries would turn a lost
        # reply into a second attempt whose answer means something else.
        self.zk = KazooClient(hosts=",".join(req["nodes"]), timeout=self.ttl_s,
                              connection_retry={"max_tries": 1}, command_retry={"max_tries": 1})
        self.state = KazooState.LOST
        self.changed = threading.Lock()
        self.zk.add_listener(self.listen)
        self.zk.start(timeout=max(5.0, self.ttl_s))
        self.path = "/" + req["key"].replace("/", "_")
        self.identifier = f"worker-{req['worker']}"
        self.lock = None
        return version("kazoo"), ["check", "fence"]

    def listen(self, state):
        # kazoo calls listeners on its own thread: kept as it says.
        with self.changed:
            self.state = state

    def options(self):
        return {"session_timeout_ms": int(self.ttl_s * 1000), "connection_retry.max_tries": 1,
                "command_retry.max_tries": 1}

    def acquire(self, timeout_s):
        lock = self.zk.Lock(self.path, self.identifier)
        try:
            got = lock.acquire(blocking=True, timeout=timeout_s)
        except LockTimeout:  # the wait ran out: someone else holds it
            got = False
        if not got:
            lock.cancel()
            return None
        return lock

    def fence(self, lock):
        stat = self.zk.exists(f"{lock.path}/{lock.node}")
        if stat is None:  # gone already: the session expired under us
            raise NoNodeError("the lock node is gone")
        return stat.czxid

    def check(self, lock):
        with self.changed:
            connected = self.state == KazooState.CONNECTED
        return connected and lock.is_acquired

    def release(self, lock):
        if not lock.is_acquired:
            raise NoNodeError("not held")
        node = f"{lock.path}/{lock.node}"
        if self.zk.exists(node) is None:
            lock.is_acquired = False
            raise NoNodeError("the lock node is gone")
        lock.release()


if __name__ == "__main__":
    serve(KazooLock())
