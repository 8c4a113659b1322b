'use strict';
// lockstorm adapter for npm `@sesamecare-oss/redlock` 1.4.0, the maintained
// fork of node-redlock, on ioredis; what it does is node/redlock.js, which
// node-redlock's adapter shares. Where the fork differs from redlock
// 5.0.0-beta.2: `Redlock` is a named export (no default); its scripts are
// ioredis custom commands that first SELECT its `db` setting (0, as ioredis
// uses); and acquire dates the lock's expiration from the start of the
// attempt that won, not of the whole retry loop (beta.2's issue #296).
// Run as: NODE_PATH=<dir>/node/node_modules node <dir>/sesamecare-redlock/adapter.js
const path = require('path');
const proto = require(path.join(__dirname, '..', 'node', 'protocol.js'));
const { redlockAdapter } = require(path.join(__dirname, '..', 'node', 'redlock.js'));
const { Redlock, ExecutionError, ResourceLockedError } = require('@sesamecare-oss/redlock');

proto.serve(redlockAdapter({
  library: '@sesamecare-oss/redlock',
  Redlock,
  ExecutionError,
  ResourceLockedError,
  // Retries no longer age the lock, but an attempt that itself outlasts the
  // TTL (a process frozen mid-attempt) still hands back a lock already
  // expired by the library's own measure, while the key in Redis may be fresh.
  expired: (lock) => proto.log(`acquire returned an already-expired lock (expired ${Date.now() - lock.expiration} ms before it was returned)`),
}));
