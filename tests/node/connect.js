'use strict';
// One session of the lab's tool servers' SSH client (node ssh2) against the
// broker: connect, open a PTY shell with the session-id env, run one
// delimiter-wrapped command, exit, and print a JSON result on stdout.
//
// Run by tests/node_ssh2_test.go; reusable by other suites. Options come
// from a JSON file named by argv[2], or from the JSON text in the
// environment variable APTL_SSH2_CONNECT:
//
//   host, port, username    where and as whom to log in
//   privateKeyPath          the client key (OpenSSH format)
//   hostKey                 base64 of the server's public key blob (the
//                           second field of a known_hosts line): required,
//                           the connection is refused on any other key;
//                           "unpinned": no hostVerifier, ssh2's default
//                           (any key accepted: tests of unpinned clients)
//   env                     env requests for the shell, e.g. APTL_SESSION_ID
//   command                 the command to run inside the delimiters
//   algorithms              optional ssh2 `algorithms` (default: ssh2's own)
//   pty                     optional {term, rows, cols}
//   timeoutMs               optional bound on the whole run (default 30000)
//
// The result: {ok, negotiated, output, status, shellExit, error}. `output`
// is what the command printed between the markers; `status` its exit code.
//
// The library is found through NODE_PATH (the Go test sets it).

const fs = require('fs');
const { Client } = require('ssh2');

const MAX_OUTPUT = 1 << 20; // bytes kept from the shell; more is an error

function loadOptions() {
  const text = process.argv[2] ? fs.readFileSync(process.argv[2], 'utf8') : process.env.APTL_SSH2_CONNECT;
  if (!text) throw new Error('usage: connect.js OPTIONS.json (or APTL_SSH2_CONNECT=<json>)');
  const o = JSON.parse(text);
  for (const k of ['host', 'port', 'username', 'privateKeyPath', 'hostKey', 'command']) {
    if (o[k] === undefined) throw new Error('option ' + k + ' is required');
  }
  return o;
}

// The markers are written as "MARK" in quotes, so the terminal's echo of
// the typed line never matches the output patterns below.
function wrap(command) {
  return 'echo "APTL_BEGIN_1"; ' + command + '; echo "APTL_END_1:$?"\n';
}
const RESULT_RE = /APTL_BEGIN_1\r\n([\s\S]*?)APTL_END_1:(\d+)\r\n/;

function run(o, done) {
  const result = { ok: false, negotiated: null, output: null, status: null, shellExit: null, error: null };
  const conn = new Client();
  let received = '';
  const timer = setTimeout(() => fail(new Error('timed out after ' + (o.timeoutMs || 30000) + ' ms')), o.timeoutMs || 30000);
  let finished = false;
  function finish() {
    if (finished) return;
    finished = true;
    clearTimeout(timer);
    conn.end();
    done(result);
  }
  function fail(err) {
    result.error = String(err && err.message ? err.message : err);
    finish();
  }
  conn.on('handshake', (negotiated) => { result.negotiated = negotiated; });
  conn.on('error', fail);
  conn.on('ready', () => {
    const pty = o.pty || { term: 'xterm', rows: 24, cols: 80 };
    conn.shell(pty, { env: o.env || {} }, (err, stream) => {
      if (err) return fail(err);
      stream.on('data', (d) => {
        received += d.toString('latin1');
        if (received.length > MAX_OUTPUT) return fail(new Error('more than ' + MAX_OUTPUT + ' bytes of output'));
        const m = RESULT_RE.exec(received);
        if (m && result.output === null) {
          result.output = m[1];
          result.status = Number(m[2]);
          stream.write('exit\n');
        }
      });
      stream.stderr.on('data', () => {});
      stream.on('exit', (code) => { result.shellExit = code; });
      stream.on('close', () => {
        result.ok = result.output !== null && result.shellExit === 0;
        if (!result.ok && !result.error) result.error = 'shell closed before the command completed';
        finish();
      });
      stream.write(wrap(o.command));
    });
  });
  conn.connect({
    host: o.host,
    port: o.port,
    username: o.username,
    privateKey: fs.readFileSync(o.privateKeyPath),
    hostVerifier: o.hostKey === 'unpinned' ? undefined : (key) => key.toString('base64') === o.hostKey,
    algorithms: o.algorithms,
    readyTimeout: o.timeoutMs || 30000,
  });
}

try {
  run(loadOptions(), (result) => {
    process.stdout.write(JSON.stringify(result) + '\n');
    process.exitCode = result.ok ? 0 : 1;
  });
} catch (err) {
  process.stdout.write(JSON.stringify({ ok: false, error: String(err.message || err) }) + '\n');
  process.exitCode = 1;
}
