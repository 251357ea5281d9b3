'use strict';
// PersistentSession: the tool servers' session layer over node ssh2 1.17,
// reproduced for the suites (tests/ssh2_node_test.go, tests/load_test.go).
//
// - connect(): one connection per target, public-key auth, keepalive
//   (30 s interval, 3 missed, unless the options say otherwise).
// - PersistentSession.open(): client.shell({term, rows, cols},
//   {env: {APTL_SESSION_ID, APTL_RUN_ID, APTL_TRACE_ID}}).
// - run(cmd): normal mode. Each command is written as
//   echo "<D>_START_<id>"; <cmd>; echo "<D>_END_<id>:$?"\n
//   and queued: one at a time. burst(cmds) writes them all at once. The
//   output is parsed, after stripping \r, for the END marker and exit code.
// - writeRaw(buf): raw mode, bytes written bare; the stream is kept as is.
// - close(): shell.end() (channel EOF only: ssh2's default allowHalfOpen),
//   then up to 3 s for the channel's 'close'; without it, logs
//   "remote close timeout ... kali-side capture may be partial".
//   The caller ends the client after all its sessions.
//
// Every byte received and sent is kept (received, sent) so that the suites
// can compare them with the record byte for byte.

const fs = require('fs');
const { Client } = require('ssh2');

const CLOSE_TIMEOUT_MS = 3000;
const MAX_KEPT = 64 << 20; // bytes kept per direction; more is an error

function connect(o) {
  return new Promise((resolve, reject) => {
    const client = new Client();
    client.once('ready', () => resolve(client));
    client.once('error', reject);
    client.connect({
      host: o.host,
      port: o.port,
      username: o.username,
      privateKey: fs.readFileSync(o.privateKeyPath),
      hostVerifier: (key) => key.toString('base64') === o.hostKey,
      keepaliveInterval: o.keepaliveInterval || 30000,
      keepaliveCountMax: 3,
      readyTimeout: 30000,
    });
  });
}

class PersistentSession {
  constructor(client, { env, pty, delimiter, log }) {
    this.client = client;
    this.env = env || {};
    this.pty = pty || { term: 'xterm', rows: 24, cols: 80 };
    this.delimiter = delimiter || 'APTLD';
    this.log = log || ((m) => process.stderr.write(m + '\n'));
    this.received = [];
    this.receivedLen = 0;
    this.sent = [];
    this.text = ''; // received, latin1, \r stripped, not yet parsed
    this.nextId = 1;
    this.pending = new Map(); // id -> {resolve, reject}
    this.queue = Promise.resolve();
    this.closed = false;
    this.closeWaiters = [];
    this.rawListeners = [];
  }

  open() {
    return new Promise((resolve, reject) => {
      this.client.shell(this.pty, { env: this.env }, (err, stream) => {
        if (err) return reject(err);
        this.stream = stream;
        stream.on('data', (d) => this.onData(d));
        stream.stderr.on('data', (d) => this.onData(d));
        stream.on('exit', (code, signal) => { this.exit = { code, signal }; });
        stream.on('close', () => {
          this.closed = true;
          for (const w of this.closeWaiters) w();
          for (const p of this.pending.values()) p.reject(new Error('channel closed'));
          this.pending.clear();
        });
        resolve(this);
      });
    });
  }

  onData(d) {
    this.received.push(d);
    this.receivedLen += d.length;
    if (this.receivedLen > MAX_KEPT) {
      this.stream.destroy();
      return;
    }
    for (const l of this.rawListeners) l(d);
    if (this.pending.size === 0) return;
    this.text += d.toString('latin1').replace(/\r/g, '');
    this.parse();
  }

  // parse resolves every command whose END marker arrived. The markers are
  // typed as "<D>_START_<id>" in quotes, so the terminal's echo of the
  // typed line never matches: only echo's output is followed by \n.
  parse() {
    const D = this.delimiter;
    const re = new RegExp(D + '_START_(\\d+)\\n([\\s\\S]*?)' + D + '_END_\\1:(\\d+)\\n');
    for (;;) {
      const m = re.exec(this.text);
      if (!m) break;
      this.text = this.text.slice(m.index + m[0].length);
      const p = this.pending.get(Number(m[1]));
      if (p) {
        this.pending.delete(Number(m[1]));
        p.resolve({ output: m[2], code: Number(m[3]) });
      }
    }
    if (this.text.length > MAX_KEPT) this.text = this.text.slice(-(1 << 20));
  }

  write(buf) {
    const b = Buffer.isBuffer(buf) ? buf : Buffer.from(buf, 'latin1');
    this.sent.push(b);
    this.stream.write(b);
  }

  wrap(cmd) {
    const id = this.nextId++;
    const D = this.delimiter;
    const done = new Promise((resolve, reject) => this.pending.set(id, { resolve, reject }));
    return { id, line: 'echo "' + D + '_START_' + id + '"; ' + cmd + '; echo "' + D + '_END_' + id + ':$?"\n', done };
  }

  // run queues cmd behind the session's earlier commands.
  run(cmd) {
    const next = this.queue.then(() => {
      const c = this.wrap(cmd);
      this.write(c.line);
      return c.done;
    });
    this.queue = next.catch(() => {});
    return next;
  }

  // burst writes every command at once (pipelined) and resolves them all.
  burst(cmds) {
    const wrapped = cmds.map((c) => this.wrap(c));
    this.write(wrapped.map((w) => w.line).join(''));
    return Promise.all(wrapped.map((w) => w.done));
  }

  writeRaw(buf) { this.write(buf); }

  onRaw(listener) { this.rawListeners.push(listener); }

  setWindow(rows, cols) { this.stream.setWindow(rows, cols, 0, 0); }

  signal(name) { this.stream.signal(name); }

  receivedBytes() { return Buffer.concat(this.received); }

  sentBytes() { return Buffer.concat(this.sent); }

  // close ends the session as the tool servers do. It resolves with how it
  // ended: 'close' (the channel's close event) or 'timeout', and the time
  // from shell.end() in ms. onClose runs synchronously in the close event
  // handler, before anything else can happen (the harvest).
  close(onClose) {
    return new Promise((resolve) => {
      const started = process.hrtime.bigint();
      const ms = () => Number(process.hrtime.bigint() - started) / 1e6;
      let settled = false;
      const settle = (how) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve({ how, ms: ms() });
      };
      const timer = setTimeout(() => {
        this.log('remote close timeout after ' + CLOSE_TIMEOUT_MS + ' ms; kali-side capture may be partial');
        settle('timeout');
      }, CLOSE_TIMEOUT_MS);
      this.closeWaiters.push(() => {
        if (!settled && onClose) onClose();
        settle('close');
      });
      if (this.closed) return settle('close');
      this.stream.end();
    });
  }
}

module.exports = { connect, PersistentSession, CLOSE_TIMEOUT_MS };
