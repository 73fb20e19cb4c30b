// tollgate/redis: the Redis clients it talks through (ioredis, node-redis, any
// `{ sendCommand }`) and what their replies look like (see ../redis.js).

import { RedisLimiterError, optionError } from "./errors.js";

/** The most commands written to ioredis' socket in one piece (see `ioredis`). */
const WRITE_EVERY = 16;

/** node-redis' RESP type codes for bulk and simple strings: answered as Buffers. */
const NODE_REDIS_BUFFERS = { 36: Buffer, 43: Buffer };

/**
 * `sendCommand(args) => Promise<reply>` for the caller's client: ioredis (`callBuffer`; a
 * `Cluster` too), node-redis 5 or 6 (`sendCommand` with Buffers for strings; its cluster
 * client too, told each command's first key), or an object that already has a
 * `sendCommand(args)` of that form (any other client, a cluster router).
 */
export function adapter(client) {
  if (client !== null && typeof client === "object") {
    if (typeof client.callBuffer === "function") return connected(client, "ioredis", ioredis(client));
    if (typeof client.sendCommand === "function" && typeof client.withTypeMapping === "function" && "masters" in client) {
      // node-redis' cluster client routes by the command's first key, which it is told.
      return connected(client, "node-redis", (args) => client.sendCommand(firstKey(args), false, args, { typeMapping: NODE_REDIS_BUFFERS }));
    }
    if (typeof client.sendCommand === "function" && typeof client.withTypeMapping === "function") {
      return connected(client, "node-redis", (args) => client.sendCommand(args, { typeMapping: NODE_REDIS_BUFFERS }));
    }
    if (typeof client.sendCommand === "function") {
      return (args) => client.sendCommand(args);
    }
  }
  throw optionError(
    TypeError,
    "client",
    client,
    "not-a-client",
    "must be an ioredis client or cluster, a node-redis 5 or 6 client or cluster, or { sendCommand(args) => Promise }",
  );
}

/**
 * `send`, refusing while `client` is not open: a node-redis client before `connect()` (or
 * after `quit()`/`destroy()`: `isOpen` is false; it stays true while the client reconnects),
 * an ioredis client after `quit()`/`disconnect()` or once its retry strategy gave up
 * (`status` "end"; one made with `lazyConnect` connects on its first command). Such a client
 * never sends anything, so every check would fall back, silently, forever: the check rejects
 * with a `RedisLimiterError` of code `not-connected` instead. tollgate never connects a client
 * it is given (the application owns its connection and its options).
 */
function connected(client, kind, send) {
  const closed = kind === "ioredis" ? () => client.status === "end" : () => client.isOpen === false;
  const fix = kind === "ioredis" ? "it was closed (quit/disconnect) or gave up reconnecting" : "call `await client.connect()` before the first check";
  return (args) => {
    if (closed()) {
      throw new RedisLimiterError("not-connected", `redis: the ${kind} client is not connected: ${fix} (tollgate never connects a client it is given)`);
    }
    return send(args);
  };
}

/**
 * Whether `client` talks to one Redis server (not a cluster), so that one script call may
 * touch keys of any slot: ioredis' and node-redis' plain clients. Unknown clients (a
 * `{ sendCommand }`, which may route to a cluster) are not assumed to.
 */
export function oneServer(client) {
  if (typeof client.callBuffer === "function") return client.isCluster !== true;
  return typeof client.withTypeMapping === "function" && !("masters" in client);
}

/** The first key of a command this file sends (EVALSHA and EVAL: after the script and the key count; COMMAND INFO: none). */
function firstKey(args) {
  if (args[0] === "EVALSHA" || args[0] === "EVAL") return args[3];
  return args[0] === "COMMAND" ? undefined : args[1];
}

/**
 * ioredis writes each command to its socket as it is sent: one system call per command in
 * this process and one read in Redis. Like node-redis (which does this by itself), the
 * commands sent in one turn of the event loop are written together instead: the socket is
 * corked until the microtasks of this turn have run (`process.nextTick`). Measured with
 * ioredis alone sending this file's two scripts per check, 64 in flight: the socket writes
 * were 29% of the client's CPU, and each check cost 30% less client CPU and 30% less Redis
 * CPU written together. (A cluster client has no one socket: its commands go as they are.)
 *
 * But not all of them at once: written in one piece, a turn's commands reach Redis together
 * and their replies come back together, so from then on this process and Redis take turns,
 * each idle while the other works (measured with the module, 64 in flight on 2 cores: the
 * process idle 29% of its time, 31k checks/s). Written {@link WRITE_EVERY} commands at a
 * time, Redis starts on the first while the rest are prepared: 55-65k checks/s.
 */
function ioredis(client) {
  let corked;
  let written = 0;
  const uncork = () => {
    corked.uncork();
    corked = undefined;
  };
  return (args) => {
    if (corked === undefined) {
      const socket = client.stream;
      if (client.status === "ready" && typeof socket?.cork === "function") {
        socket.cork();
        corked = socket;
        written = 0;
        process.nextTick(uncork);
      }
    }
    const reply = client.callBuffer(args[0], args.slice(1));
    if (corked !== undefined && ++written === WRITE_EVERY) {
      corked.uncork();
      corked.cork();
      written = 0;
    }
    return reply;
  };
}

/** The error classes of an error reply: ioredis' ReplyError, node-redis' ErrorReply and its subclasses. */
const REPLY_ERRORS = ["ReplyError", "ErrorReply", "SimpleError", "BlobError"];

/**
 * A reply error from Redis itself (as opposed to a connection that failed). node-redis 6's
 * are named `Error`: their class tells.
 */
export function isReply(e) {
  return e?.reply === true || REPLY_ERRORS.includes(e?.name) || REPLY_ERRORS.includes(e?.constructor?.name);
}

/** A reply value as a Buffer (an absent one as an empty Buffer). */
export const toBuffer = (v) => (Buffer.isBuffer(v) ? v : v == null ? Buffer.alloc(0) : Buffer.from(String(v)));
/** A reply value as text. */
export const text = (v) => (Buffer.isBuffer(v) ? v.toString("latin1") : String(v));
/**
 * A number from a reply: a Buffer of decimal digits (bulk strings, parsed here), a string or a
 * number. A number (an integer reply) is returned before `Buffer.isBuffer`: counted with
 * bench/redis-counts.sh (PERF.md, "The module reply read in place"), reading a module reply
 * (twelve integer fields) cost ~4.8k instructions a check with `Buffer.isBuffer` asked first,
 * ~2.8k with this.
 */
export function number(v) {
  if (typeof v === "number") return v;
  if (!Buffer.isBuffer(v)) return Number(v);
  let x = 0;
  for (let i = 0; i < v.length; i++) {
    const digit = v[i] - 48;
    if (digit < 0 || digit > 9) return Number(v.toString("latin1")); // a sign, or not a number
    x = 10 * x + digit;
  }
  return v.length === 0 ? NaN : x;
}
