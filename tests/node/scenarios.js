'use strict';
// Scenarios of the tool servers' client (persistent_session.js) for the Go
// suites. Usage: node scenarios.js OPTIONS.json; prints one JSON result.
//
// Options: conn {host, port, username, privateKeyPath, hostKey,
// keepaliveInterval}, scenario ("features", "close" or "load"), run (the
// run id), root (the capture root, for the harvest), harvest (folder the
// close scenario copies each record into from the close event), outDir
// (where each session's received and sent bytes are written as
// <session>.out and <session>.in), and the scenario's own fields below.

const fs = require('fs');
const path = require('path');
const { connect, PersistentSession } = require('./persistent_session');

const delay = (ms) => new Promise((r) => setTimeout(r, ms));
const logs = [];
const log = (m) => { logs.push(m); process.stderr.write(m + '\n'); };

function session(client, o, id, extra) {
  const env = { APTL_SESSION_ID: id, APTL_RUN_ID: o.run, APTL_TRACE_ID: 'trace-' + id };
  return new PersistentSession(client, Object.assign({ env, log }, extra)).open();
}

function dump(o, id, s) {
  fs.writeFileSync(path.join(o.outDir, id + '.out'), s.receivedBytes());
  fs.writeFileSync(path.join(o.outDir, id + '.in'), s.sentBytes());
}

// waitRaw resolves once the session's received bytes hold marker.
function waitRaw(s, marker) {
  return new Promise((resolve) => {
    const check = () => s.receivedBytes().includes(marker) && resolve();
    s.onRaw(check);
    check();
  });
}

// features: everything the tool servers do on one connection.
async function features(o) {
  const r = {};
  const client = await connect(o.conn);
  const main = await session(client, o, 'nf-main');
  r.ids = (await main.run('echo "$APTL_SESSION_ID/$APTL_RUN_ID/$APTL_TRACE_ID"')).output;

  let t0 = Date.now();
  const codes = [0, 1, 3];
  const cmds = [];
  // No newline in the command's own output: the terminal turns "\n" into
  // "\r\n" in a second step of its output processing, and the kernel's
  // echo of lines typed ahead can land between the two steps ("p-7", the
  // echo, "\r\n"), as under any sshd. Text without special characters is
  // written in one step, which the echo cannot split.
  for (let i = 0; i < 200; i++) cmds.push("printf 'p-%d.' " + i + '; (exit ' + codes[i % 3] + ')');
  const res = await main.burst(cmds);
  r.pipelined = res.length;
  // The exit code comes from the END marker. The output may also hold the
  // kernel's echo of lines typed ahead while a command ran (the shell
  // restores canonical echo for its commands), so only containment is
  // checked.
  r.codeErrors = res.filter((x, i) => x.code !== codes[i % 3]).length;
  r.outputMissing = res.filter((x, i) => !x.output.includes('p-' + i + '.')).length;
  r.phases = { pipeline: Date.now() - t0 };

  // A window change travels as a request, the command as data: the shell
  // may read the command first, so ask again (bounded) until it shows.
  main.setWindow(40, 100);
  for (let i = 0; i < 50 && r.sttySize !== '40 100\n'; i++) r.sttySize = (await main.run('stty size')).output;
  r.phases.window = Date.now() - t0;

  // signal('INT') reaches the shell's process group; without job control
  // the foreground command is in it.
  await main.run('set +m');
  const trapped = main.run("sh -c 'trap \"echo GOT_INT; exit 0\" INT; echo TRAP_READY; while :; do sleep 0.1; done'");
  await waitRaw(main, 'TRAP_READY\r\n');
  main.signal('INT');
  r.signal = (await trapped).output;

  // Keepalive: idle for several intervals; with 3 missed replies ssh2
  // would have dropped the connection.
  await delay(o.idleMs || 0);
  r.afterIdle = (await main.run('echo ALIVE')).output;

  r.phases.main = Date.now() - t0;
  t0 = Date.now();
  r.raw = await rawMode(client, o);
  r.phases.raw = Date.now() - t0;
  t0 = Date.now();
  r.background = await background(client, o);
  r.phases.background = Date.now() - t0;

  r.close = await main.close();
  dump(o, 'nf-main', main);
  client.end();
  return r;
}

// rawMode sends all 256 byte values through `stty raw` and cat.
async function rawMode(client, o) {
  const s = await session(client, o, 'nf-raw');
  s.writeRaw('stty raw -echo; echo RAW_READY; cat\n');
  await waitRaw(s, 'RAW_READY\n');
  const before = s.receivedBytes().length;
  const payload = Buffer.concat([Buffer.from([...Array(256).keys()]), Buffer.from('\nlone\n\r\r\nend')]);
  s.writeRaw(payload);
  await new Promise((resolve) => {
    const check = () => s.receivedLen >= before + payload.length && resolve();
    s.onRaw(check);
    check();
  });
  const exact = s.receivedBytes().subarray(before).equals(payload);
  const close = await s.close();
  dump(o, 'nf-raw', s);
  return { exact, close };
}

// background: one session runs a 5 s command while another runs 50.
async function background(client, o) {
  const bg = await session(client, o, 'nf-bg');
  const work = await session(client, o, 'nf-work');
  let bgDone = 0;
  const bgRun = bg.run('sleep 5; echo BG_DONE').then((x) => { bgDone = Date.now(); return x; });
  let ok = 0;
  for (let i = 0; i < 50; i++) if ((await work.run('echo w' + i)).output === 'w' + i + '\n') ok++;
  const workDone = Date.now();
  const b = await bgRun;
  const closes = [await bg.close(), await work.close()];
  dump(o, 'nf-bg', bg);
  dump(o, 'nf-work', work);
  return { workOK: ok, bgOutput: b.output, workFirst: workDone < bgDone, closes };
}

// close: sessions one after another, each closed with shell.end() once
// its command's output arrived; the close event handler harvests the
// record at once, as docker cp would. With outDir, each session's bytes
// are written there after its close (dump).
async function close(o) {
  const client = await connect(o.conn);
  const closes = [];
  for (let i = 0; i < o.sessions; i++) {
    const id = 'nc-' + i;
    const s = await session(client, o, id);
    await s.run('echo ready');
    const src = path.join(o.root, o.run, id);
    closes.push(await s.close(() => fs.cpSync(src, path.join(o.harvest, o.run, id), { recursive: true })));
    if (o.outDir) dump(o, id, s);
  }
  client.end();
  return { closes };
}

// load: o.sessions sessions over o.conns connections, each running
// o.commands commands drawn from o.palette (a seeded choice).
async function load(o) {
  const clients = [];
  for (let i = 0; i < o.conns; i++) clients.push(await connect(o.conn));
  let seed = o.seed || 1;
  const rand = (n) => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed % n; };
  // Shells start one at a time, untimed (a login shell's rc files may
  // take a lock that hundreds starting at once contend on); the commands
  // then run concurrently.
  const sessions = [];
  for (let i = 0; i < o.sessions; i++) {
    const s = await session(clients[i % o.conns], o, o.prefix + i);
    await s.run('true');
    sessions.push(s);
  }
  const latencies = [];
  let errors = 0;
  await Promise.all(sessions.map(async (s) => {
    for (let k = 0; k < o.commands; k++) {
      const code = rand(4);
      const t0 = process.hrtime.bigint();
      const x = await s.run(o.palette[rand(o.palette.length)] + '; (exit ' + code + ')');
      latencies.push(Number(process.hrtime.bigint() - t0) / 1e6);
      if (x.code !== code) errors++;
    }
  }));
  if (o.holdFile) {
    // Sessions stay open, idle, until the Go side has measured them.
    fs.writeFileSync(o.holdFile + '.ready', '');
    while (!fs.existsSync(o.holdFile)) await delay(20);
  }
  const closes = await Promise.all(sessions.map((s) => s.close()));
  sessions.forEach((s, i) => dump(o, o.prefix + i, s));
  clients.forEach((c) => c.end());
  return { latencies, errors, closes };
}

const scenarios = { features, close, load };

(async () => {
  let result;
  try {
    const o = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
    if (!scenarios[o.scenario]) throw new Error('unknown scenario ' + o.scenario);
    result = Object.assign({ ok: true }, await scenarios[o.scenario](o));
  } catch (err) {
    result = { ok: false, error: String((err && err.stack) || err) };
  }
  result.logs = logs;
  process.stdout.write(JSON.stringify(result) + '\n');
  process.exit(result.ok ? 0 : 1);
})();
