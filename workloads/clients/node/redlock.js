'use strict';
// The adapter for Redlock as npm `redlock` 5.0.0-beta.2 (node-redlock) and
// its maintained fork `@sesamecare-oss/redlock` both shape it: the same
// Redlock, Lock, ExecutionError and ResourceLockedError where the adapter
// touches them. Each library's adapter passes its own classes.
//   topology single  -> Redlock over one ioredis client
//   topology redlock -> Redlock over one ioredis client per node (quorum N/2+1)
//   topology cluster -> Redlock over one ioredis Cluster client (quorum 1):
//                       the libraries' documented way to use a Redis Cluster
//   acquire -> redlock.acquire([key], ttl_ms, retries sized to timeout_ms)
//   check   -> lock.expiration > Date.now(), the library's own validity view
//   token   -> lock.value (random 16 bytes, the value stored under the key)
//   release -> lock.release(); no fencing token exists in either library.
const proto = require('./protocol.js');

// The library's own defaults (200 ms, jitter 100 ms): users rarely change
// them, and less jitter makes contending clients split the votes in step.
const RETRY_DELAY_MS = 200;
const RETRY_JITTER_MS = 100;

// `library`: the package name; `expired(lock)`: logs an acquire that handed
// back a lock already expired by the library's own measure.
function redlockAdapter({ library, Redlock, ExecutionError, ResourceLockedError, expired }) {
  // A failed acquire or release throws the same ExecutionError whether the
  // key was busy or a node failed to answer; each vote against carries its
  // cause. Only when the nodes that might have said yes (no
  // ResourceLockedError) cannot reach a quorum in any attempt did the
  // operation definitely not happen.
  async function definitelyRefused(err) {
    if (!(err instanceof ExecutionError) || err.attempts.length === 0) return false;
    for (const attempt of await Promise.all(err.attempts)) {
      const refused = [...attempt.votesAgainst.values()].filter((e) => e instanceof ResourceLockedError).length;
      if (attempt.membershipSize - refused >= attempt.quorumSize) return false;
    }
    return true;
  }

  // ExecutionError's message never says why the nodes voted against; the
  // node errors (timeouts, refused connections) decide the reply's kind.
  async function withCauses(err) {
    if (!(err instanceof ExecutionError) || err.attempts.length === 0) return err;
    const last = await err.attempts[err.attempts.length - 1];
    const causes = [...new Set([...last.votesAgainst.values()].map((e) => e.message))];
    return new Error(`${causes.join('; ')} (${err.message})`);
  }

  return {
    library,
    topologies: ['single', 'redlock', 'cluster'],
    features: ['check', 'token'],
    lock: null,

    async init(req) {
      const nodes = req.topology === 'single' ? req.nodes.slice(0, 1) : req.nodes;
      const cluster = req.topology === 'cluster';
      const clients = cluster ? [proto.clusterClient(nodes)] : nodes.map(proto.redisClient);
      if (cluster) this.options = proto.CLUSTER_OPTIONS;
      await proto.waitReady(clients, Math.floor(clients.length / 2) + 1);
      // Instance settings only govern release (acquire passes its own): a
      // short retry keeps a release of a lost lock from spinning for seconds.
      // `db`: the fork's scripts SELECT it first (init's database, 0 unless
      // a --target named one); redlock 5.0.0-beta.2 has no such setting.
      this.redlock = new Redlock(clients, { retryCount: 2, retryDelay: RETRY_DELAY_MS, retryJitter: RETRY_JITTER_MS, db: req.db || 0 });
      // Every vote against is emitted; log node failures, once per distinct cause.
      let last = null;
      this.redlock.on('error', (e) => {
        if (!(e instanceof ResourceLockedError) && e.message !== last) proto.log('redlock vote error:', e.message);
        last = e.message;
      });
      this.key = req.key;
      this.ttl = req.ttl_ms;
      this.lock = null;
      const client = `${library} ${proto.packageVersion(library)} (ioredis ${proto.packageVersion('ioredis')})`;
      return { ok: true, client, features: this.features };
    },

    async acquire(req) {
      this.lock = null;
      const retryCount = Math.max(0, Math.floor(req.timeout_ms / RETRY_DELAY_MS));
      try {
        this.lock = await this.redlock.acquire([this.key], this.ttl, { retryCount, retryDelay: RETRY_DELAY_MS, retryJitter: RETRY_JITTER_MS });
      } catch (e) {
        if (await definitelyRefused(e)) return { ok: false, error: 'lock-busy' };
        throw await withCauses(e);
      }
      // Such a lock still counts as acquired, as the library reports it so;
      // `check` will say it is not valid.
      if (this.lock.expiration <= Date.now()) expired(this.lock);
      return { ok: true, token: this.lock.value };
    },

    async check() {
      return { ok: true, valid: this.lock !== null && this.lock.expiration > Date.now() };
    },

    async release() {
      const lock = this.lock;
      if (lock === null) return { ok: false, error: 'not-held' };
      this.lock = null;
      try {
        await lock.release();
        return { ok: true };
      } catch (e) {
        // The release script refuses (ResourceLockedError vote) on every node
        // where the key is gone or holds another value.
        if (await definitelyRefused(e)) return { ok: false, error: 'not-held' };
        throw await withCauses(e);
      }
    },
  };
}

module.exports = { redlockAdapter };
