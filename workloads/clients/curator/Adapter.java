// lockstorm adapter for Apache Curator's InterProcessMutex (Curator 5.4, on
// ZooKeeper 3.8: Debian's libcurator-recipes-java).
//
// ZooKeeper's recipe: an ephemeral sequential node under the lock's path,
// the lowest sequence holds, a waiter watches its predecessor; the node
// lives as long as the session, whose timeout is ttl_ms. Topology:
// `zookeeper` (the ensemble's client addresses). `check` is what Curator's
// documentation asks of a lock holder: the lock is held only while the
// connection state is CONNECTED or RECONNECTED; on SUSPENDED it must assume
// the lock lost (the session may expire meanwhile), as it is on LOST. The
// fence is the lock node's creation zxid (czxid).

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.RetryNTimes;
import org.apache.zookeeper.data.Stat;

public final class Adapter extends Protocol.Adapter {
    /** InterProcessMutex keeps its node's path to itself: this shows it. */
    static final class Mutex extends InterProcessMutex {
        Mutex(CuratorFramework client, String path) {
            super(client, path);
        }

        String node() {
            return getLockPath();
        }
    }

    private CuratorFramework client;
    private String path;
    private int sessionMs;
    private Mutex mutex;
    private volatile ConnectionState state = ConnectionState.LOST;

    @Override
    public String[] init(Map<String, Object> req) throws Exception {
        if (!"zookeeper".equals(req.get("topology"))) {
            throw new IllegalArgumentException("unsupported topology '" + req.get("topology") + "'");
        }
        @SuppressWarnings("unchecked")
        List<Object> nodes = (List<Object>) req.get("nodes");
        sessionMs = ((Number) req.get("ttl_ms")).intValue();
        path = "/" + String.valueOf(req.get("key")).replace('/', '_');
        // One try per operation: Curator's retries would turn a lost reply
        // into a second attempt whose answer means something else.
        client = CuratorFrameworkFactory.builder()
                .connectString(String.join(",", nodes.stream().map(String::valueOf).toList()))
                .sessionTimeoutMs(sessionMs)
                .connectionTimeoutMs(Math.min(sessionMs, 1000))
                .retryPolicy(new RetryNTimes(0, 0))
                .build();
        client.getConnectionStateListenable().addListener((c, s) -> state = s);
        client.start();
        if (!client.blockUntilConnected(Math.max(5000, sessionMs), TimeUnit.MILLISECONDS)) {
            throw new IllegalStateException("no member of " + nodes + " answered");
        }
        state = ConnectionState.CONNECTED;
        String version = CuratorFramework.class.getPackage().getImplementationVersion();
        return new String[] {"curator " + (version == null ? "5.4.0" : version), "check", "fence"};
    }

    @Override
    public Map<String, Object> options() {
        Map<String, Object> options = new LinkedHashMap<>();
        options.put("sessionTimeoutMs", sessionMs);
        options.put("connectionTimeoutMs", Math.min(sessionMs, 1000));
        options.put("retryPolicy", "RetryNTimes(0, 0)");
        return options;
    }

    @Override
    public boolean acquire(long timeoutMs) throws Exception {
        mutex = new Mutex(client, path);
        return mutex.acquire(timeoutMs, TimeUnit.MILLISECONDS);
    }

    @Override
    public Long fence() throws Exception {
        Stat stat = client.checkExists().forPath(mutex.node());
        if (stat == null) {
            throw new IllegalStateException("the lock node is gone");
        }
        return stat.getCzxid();
    }

    @Override
    public boolean check() {
        ConnectionState now = state;
        boolean connected = now == ConnectionState.CONNECTED || now == ConnectionState.RECONNECTED;
        return connected && mutex.isOwnedByCurrentThread();
    }

    @Override
    public boolean release() throws Exception {
        // Curator's release deletes the node and says nothing if it was
        // gone already (the session expired): ask first.
        String node = mutex.node();
        if (node == null || client.checkExists().forPath(node) == null) {
            return false;
        }
        mutex.release();
        return true;
    }

    public static void main(String[] args) throws Exception {
        Protocol.serve(new Adapter());
    }
}
