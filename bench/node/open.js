'use strict';
// Session opens of the lab's tool servers' SSH client (node ssh2), timed,
// for the benchmark (bench/ssh2.go). Options: JSON in argv[2]:
//
//   host, port, username, privateKeyPath   where and as whom to log in
//   hostKey        base64 of the server's public key blob (pinned)
//   count          opens to time, one after the other
//   sessionPrefix  APTL_SESSION_ID of open i is <sessionPrefix>-<i>
//
// Each open is what a tool server does: connect (public key, keepalive
// 30 s x 3), client.shell({env: {APTL_SESSION_ID}}, cb) with no window
// options (ssh2's default pty-req), then one delimiter-wrapped `true`.
// Then `exit`, the channel's close and the connection's end, untimed.
//
// Prints {opens: [{ready, phase, open}]}, in milliseconds from the start
// of the connect: ready is authentication done, phase the channel open,
// env, pty-req and shell requests (ready to the shell callback), open the
// end marker of the first command.
//
// The library is found through NODE_PATH (the Go driver sets it).

const fs = require('fs');
const { Client } = require('ssh2');

const TIMEOUT_MS = 20000;
const MARKER = 'B_END_1:0';

function ms(since) {
  return Number(process.hrtime.bigint() - since) / 1e6;
}

function openOnce(o, i) {
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    const r = {};
    const conn = new Client();
    const timer = setTimeout(() => { conn.end(); reject(new Error('open ' + i + ' timed out')); }, TIMEOUT_MS);
    conn.on('error', (err) => { clearTimeout(timer); reject(err); });
    conn.on('ready', () => {
      r.ready = ms(t0);
      conn.shell({ env: { APTL_SESSION_ID: o.sessionPrefix + '-' + i } }, (err, stream) => {
        if (err) { clearTimeout(timer); conn.end(); return reject(err); }
        r.phase = ms(t0) - r.ready;
        let received = '';
        stream.on('data', (d) => {
          if (r.open !== undefined) return;
          received += d.toString('latin1');
          if (received.includes(MARKER)) {
            r.open = ms(t0);
            stream.write('exit\n');
          }
          if (received.length > 1 << 16) received = received.slice(-64);
        });
        stream.stderr.on('data', () => {});
        stream.on('close', () => {
          clearTimeout(timer);
          conn.end();
          if (r.open === undefined) return reject(new Error('shell closed before the marker'));
          resolve(r);
        });
        stream.write('echo "B_START_1"; true; echo "B_END_1:$?"\n');
      });
    });
    conn.connect({
      host: o.host,
      port: o.port,
      username: o.username,
      privateKey: fs.readFileSync(o.privateKeyPath),
      hostVerifier: (key) => key.toString('base64') === o.hostKey,
      keepaliveInterval: 30000,
      keepaliveCountMax: 3,
      readyTimeout: TIMEOUT_MS,
    });
  });
}

async function main() {
  const o = JSON.parse(process.argv[2]);
  const opens = [];
  for (let i = 0; i < o.count; i++) opens.push(await openOnce(o, i));
  process.stdout.write(JSON.stringify({ opens }) + '\n');
}

main().catch((err) => {
  process.stdout.write(JSON.stringify({ error: String(err && err.message ? err.message : err) }) + '\n');
  process.exitCode = 1;
});
