'use strict';
// lockstorm adapter for npm `redlock` 5.0.0-beta.2 (node-redlock) on ioredis;
// what it does is node/redlock.js, which the fork's adapter shares.
// Run as: NODE_PATH=<dir>/node/node_modules node <dir>/node-redlock/adapter.js
const path = require('path');
const proto = require(path.join(__dirname, '..', 'node', 'protocol.js'));
const { redlockAdapter } = require(path.join(__dirname, '..', 'node', 'redlock.js'));
const { default: Redlock, ExecutionError, ResourceLockedError } = require('redlock');

proto.serve(redlockAdapter({
  library: 'redlock',
  Redlock,
  ExecutionError,
  ResourceLockedError,
  // Issue #296: expiration is computed from the start of the whole retry
  // loop, not of the attempt that won, so after long retries beta.2 hands
  // back a lock already expired by its own measure (while the key in Redis
  // is fresh).
  expired: () => proto.log('acquire returned an already-expired lock (#296)'),
}));
