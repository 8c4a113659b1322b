'use strict';
// lockstorm adapter for npm `redis-semaphore` 5.8.0 on ioredis.
//   topology single  -> Mutex(client, key)            (SET NX PX, one node)
//   topology redlock -> RedlockMutex(clients, key)    (quorum round(N+1)/2)
//   topology cluster -> Mutex(cluster, key) on one ioredis Cluster client
//   Both store the lock under "mutex:<key>", not <key> itself.
//   acquire -> new mutex per acquire: lockTimeout = ttl_ms, acquireTimeout =
//              timeout_ms, default refresh every round(0.8 * ttl_ms) ms
//   check   -> mutex.isAcquired, which turns false only once a refresh has
//              found the lock lost (onLockLost)
//   token   -> mutex.identifier (random UUID stored under the key)
// Run as: NODE_PATH=<dir>/node/node_modules node <dir>/redis-semaphore/adapter.js
const path = require('path');
const proto = require(path.join(__dirname, '..', 'node', 'protocol.js'));
const { Mutex, RedlockMutex, TimeoutError } = require('redis-semaphore');

const adapter = {
  library: 'redis-semaphore',
  topologies: ['single', 'redlock', 'cluster'],
  features: ['check', 'token'],
  mutex: null,

  async init(req) {
    const single = req.topology !== 'redlock';
    const cluster = req.topology === 'cluster';
    this.clients = cluster
      ? [proto.clusterClient(req.nodes)]
      : (single ? req.nodes.slice(0, 1) : req.nodes).map(proto.redisClient);
    if (cluster) this.options = proto.CLUSTER_OPTIONS;
    await proto.waitReady(this.clients, Math.floor(this.clients.length / 2) + 1);
    this.newMutex = (options) => (single
      ? new Mutex(this.clients[0], req.key, options)
      : new RedlockMutex(this.clients, req.key, options));
    this.ttl = req.ttl_ms;
    this.mutex = null;
    const client = `redis-semaphore ${proto.packageVersion('redis-semaphore')} (ioredis ${proto.packageVersion('ioredis')})`;
    // The key it stores the lock under, for lockstorm's observer.
    return { ok: true, client, features: this.features, key: `mutex:${req.key}` };
  },

  async acquire(req) {
    // An abandoned lock must not be kept alive by its refresher.
    if (this.mutex) this.mutex.stopRefresh();
    this.mutex = null;
    const mutex = this.newMutex({
      lockTimeout: this.ttl,
      acquireTimeout: req.timeout_ms,
      retryInterval: 20,
      // The library's default handler throws from inside its refresh timer.
      onLockLost: (e) => proto.log(`lock lost (${mutex.identifier}): ${e.message}`),
    });
    try {
      await mutex.acquire();
    } catch (e) {
      // For RedlockMutex this also covers nodes that did not answer: it
      // swallows their errors, cleans up, and reports only the timeout.
      if (e instanceof TimeoutError) return { ok: false, error: 'lock-busy' };
      throw e;
    }
    this.mutex = mutex;
    return { ok: true, token: mutex.identifier };
  },

  async check() {
    return { ok: true, valid: this.mutex !== null && this.mutex.isAcquired };
  },

  async release() {
    const mutex = this.mutex;
    if (mutex === null) return { ok: false, error: 'not-held' };
    this.mutex = null;
    // release() never says whether the key was still ours: the
    // delete-if-equal script's result is discarded, and a mutex already
    // marked lost skips Redis entirely. The library reports nothing, so the
    // protocol's answer is unknown (ok:null), never a success it cannot know.
    await mutex.release();
    return { ok: null, error: 'unknown: redis-semaphore does not say whether the key was still ours' };
  },
};

proto.serve(adapter);
