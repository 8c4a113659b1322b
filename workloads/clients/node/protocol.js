'use strict';
// The lockstorm adapter protocol's loop and the pieces both Node adapters
// share. The protocol is docs/protocol.md in the lockstorm repository (its
// examples are tested against this file). An adapter module calls
// `serve(adapter)` with an object whose async methods are named after the ops
// it supports; each method returns the reply without `id`, or throws.

const fs = require('fs');
const path = require('path');
const readline = require('readline');

// stdout belongs to the protocol alone: one stray line from a library (or its
// debug output) would be read by the worker as a reply. Keep a private handle
// for replies and send everything else that aims at stdout to stderr.
const replyOut = process.stdout.write.bind(process.stdout);
process.stdout.write = (chunk, encoding, cb) => process.stderr.write(chunk, encoding, cb);
console.log = console.info = console.debug = console.error;

function log(...args) {
  process.stderr.write(`[${new Date().toISOString()}] ${args.join(' ')}\n`);
}

// A background refresh or extension that rejects with nobody awaiting it must
// not end the process: the worker would lose its client mid-history.
process.on('unhandledRejection', (reason) => {
  log('unhandled rejection (ignored):', (reason && reason.stack) || String(reason));
});
// The worker is gone: nobody reads our replies any more.
process.stdout.on('error', () => process.exit(0));

// "<kind>: <detail>" for a reply that leaves the outcome unknown.
function describeError(err) {
  const detail = String((err && err.message) || err).replace(/\s+/g, ' ').trim();
  const kind = /timed? ?out|ETIMEDOUT/i.test(detail) ? 'timeout'
    : /ECONNREFUSED|ECONNRESET|EPIPE|ENOTCONN|EHOSTUNREACH|Connection is closed|Stream isn't writeable|max retries|LOADING|MASTERDOWN/i.test(detail) ? 'connection'
    : 'error';
  return `${kind}: ${detail}`;
}

function parseHostPort(s) {
  const i = String(s).lastIndexOf(':');
  const port = Number(s.slice(i + 1));
  if (i <= 0 || !Number.isInteger(port) || port <= 0 || port > 65535) throw new Error(`bad node address ${s}`);
  return { host: s.slice(0, i), port };
}

// Installed version of a package. Some packages (redlock) do not export their
// package.json, so walk up from the resolved entry point instead.
function packageVersion(name) {
  let dir = path.dirname(require.resolve(name));
  for (; dir !== path.dirname(dir); dir = path.dirname(dir)) {
    const file = path.join(dir, 'package.json');
    if (!fs.existsSync(file)) continue;
    const pkg = JSON.parse(fs.readFileSync(file, 'utf8'));
    if (pkg.name === name) return String(pkg.version).replace(/^v/, '');
  }
  return 'unknown';
}

// ioredis by default queues commands while disconnected and resends them
// after a reconnect (20 times), so a killed or paused Redis would hang an op
// (and the worker behind it), and a lost reply would be resent into a wrong
// definite answer (the resent acquire finds its own key: "busy"). The harness
// wants ops that fail fast and are reported as unknown instead: no offline
// queue, no resend, and a bound on every command. CONNECTION_OPTIONS says so
// in init's "options" (docs/protocol.md has why).
const CONNECTION_OPTIONS = {
  enableOfflineQueue: 'false (default: true)',
  maxRetriesPerRequest: '0 (default: 20)',
  connectTimeout: '1000 ms (default: 10000)',
  commandTimeout: '1000 ms (default: none)',
  retryStrategy: 'min(50 x n, 500) ms (default: min(50 x n, 2000))',
};
// The database init names (a --target's /db): every data-node connection
// selects it, so no key of the run lands in another database.
let initDb = 0;

function redisClient(node) {
  const Redis = require('ioredis');
  const { host, port } = parseHostPort(node);
  const client = new Redis({
    host, port,
    // A deployment's login, which lockstorm sets for a --target run (empty
    // on its own nodes, which have none).
    username: process.env.LOCKSTORM_REDIS_USER || undefined,
    password: process.env.LOCKSTORM_REDIS_PASSWORD || undefined,
    db: initDb,
    lazyConnect: false,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    connectTimeout: 1000,
    commandTimeout: 1000,
    // Keep trying to come back after a kill, but not in a tight loop.
    retryStrategy: (times) => Math.min(50 * times, 500),
  });
  // Without a listener ioredis reports every reconnect failure as an unhandled
  // error; log each distinct one once per outage.
  let last = null;
  client.on('error', (e) => { if (e.message !== last) log(`redis ${node}:`, e.message); last = e.message; });
  client.on('ready', () => { last = null; });
  return client;
}

// For `topology: cluster`: ioredis' Cluster over the nodes init names (every
// node of one Redis Cluster), which finds each slot's master and follows
// MOVED/ASK itself. Each node connection fails fast as redisClient's do; the
// cluster's own retries after a redirection or a failover stay as ioredis
// ships them (they are the library's behaviour under test). A cluster has
// database 0 only: init never names another.
// What init's "options" say of it, over CONNECTION_OPTIONS.
const CLUSTER_OPTIONS = {
  retryStrategy: 'none per node: the cluster client reconnects',
  clusterRetryStrategy: 'min(50 x n, 500) ms (default: min(100 + 2 x n, 2000))',
};
function clusterClient(seeds) {
  const Redis = require('ioredis');
  const cluster = new Redis.Cluster(seeds.map(parseHostPort), {
    enableOfflineQueue: false,
    clusterRetryStrategy: (times) => Math.min(50 * times, 500),
    redisOptions: {
      username: process.env.LOCKSTORM_REDIS_USER || undefined,
      password: process.env.LOCKSTORM_REDIS_PASSWORD || undefined,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      connectTimeout: 1000,
      commandTimeout: 1000,
    },
  });
  let last = null;
  cluster.on('error', (e) => { if (e.message !== last) log('redis cluster:', e.message); last = e.message; });
  cluster.on('ready', () => { last = null; });
  return cluster;
}

// With the offline queue off, a command sent before the connection is ready
// fails at once, so init waits until enough nodes are ready to work with.
async function waitReady(clients, needed, ms = 2000) {
  const ready = await Promise.all(clients.map((c) => c.status === 'ready' || new Promise((resolve) => {
    const t = setTimeout(() => resolve(false), ms);
    c.once('ready', () => { clearTimeout(t); resolve(true); });
  })));
  const n = ready.filter((r) => r === true).length;
  if (n < needed) {
    // Nothing will use these clients: stop their reconnect loops.
    clients.forEach((c) => c.disconnect());
    throw new Error(`only ${n} of ${clients.length} redis nodes reachable, need ${needed}`);
  }
}

async function handle(adapter, line) {
  let req;
  try {
    req = JSON.parse(line);
  } catch (e) {
    return { id: null, ok: false, error: `unsupported: request is not JSON: ${e.message}` };
  }
  const id = req && req.id !== undefined ? req.id : null;
  const op = req && req.op;
  const ops = ['init', 'acquire', 'release', ...(adapter.features || []).filter((f) => f === 'check')];
  if (!ops.includes(op) || typeof adapter[op] !== 'function') return { id, ok: false, error: `unsupported: ${op}` };
  if (op === 'init' && !adapter.topologies.includes(req.topology)) {
    return { id, ok: false, error: `init: topology ${req.topology} is not supported by ${adapter.library}` };
  }
  if (op !== 'init' && !adapter.initialised) return { id, ok: false, error: `unsupported: ${op} before init` };
  if (op === 'init') initDb = Number(req.db || 0);
  try {
    const reply = { id, ...(await adapter[op](req)) };
    if (op === 'init' && reply.ok) reply.options = { ...CONNECTION_OPTIONS, ...(adapter.options || {}) };
    if (op === 'init' && reply.ok) adapter.initialised = true;
    return reply;
  } catch (e) {
    log(`${op} failed:`, (e && e.stack) || String(e));
    // A failed init leaves nothing behind, so it is a definite failure; any
    // other op may or may not have taken effect in Redis.
    if (op === 'init') return { id, ok: false, error: `init: ${(e && e.message) || e}` };
    return { id, ok: null, error: describeError(e) };
  }
}

// A fence past 2^53 is a BigInt, which JSON.stringify refuses (the reply
// would never be written): it goes as a string of decimal digits, which the
// protocol takes as a fence too.
function encode(reply) {
  return JSON.stringify(reply, (_, v) => (typeof v === 'bigint' ? v.toString() : v));
}

// Requests are answered strictly in order, one at a time: the next line is
// taken from the queue only after the previous reply has been written.
function serve(adapter) {
  const queue = [];
  let busy = false;
  let closed = false;
  const pump = async () => {
    if (busy) return;
    busy = true;
    while (queue.length > 0) replyOut(encode(await handle(adapter, queue.shift())) + '\n');
    busy = false;
    if (closed) process.exit(0);
  };
  const rl = readline.createInterface({ input: process.stdin, terminal: false });
  rl.on('line', (line) => { if (line.trim()) { queue.push(line); pump(); } });
  // The worker closing stdin means it is done with us: exit at once, even with
  // refresh timers or reconnects pending. Lines already written before the
  // close (a piped script) still get answered, but only briefly.
  rl.on('close', () => {
    closed = true;
    if (!busy) process.exit(0);
    setTimeout(() => process.exit(0), 500).unref();
  });
}

module.exports = { CONNECTION_OPTIONS, CLUSTER_OPTIONS, serve, log, describeError, parseHostPort, packageVersion, redisClient, clusterClient, waitReady };
