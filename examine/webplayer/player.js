// The session player of an exported page (package webplayer). It reads the
// session's typescript and timing files as they are (base64 in the page),
// parses the timing in script(1)'s advanced form (H, I, O and S lines, as
// internal/scriptfmt writes them) and plays the output through term.js.
(function () {
  "use strict";

  // IDLE_SECONDS: a stretch with no entry at least this long is marked on
  // the seek bar as idle.
  var IDLE_SECONDS = 5;
  // A hostile timing file can claim any window size and hold hundreds of
  // thousands of entries: the terminal is bounded to MAX_SIDE cells a side
  // (term.js allocates rows x cols), and the seek bar to MAX_MARKS idle and
  // resize marks, as the page bounds its gap marks.
  var MAX_SIDE = 1000, MAX_MARKS = 1000;
  function side(v, dflt) {
    var n = parseInt(v, 10);
    return n > 0 ? Math.min(n, MAX_SIDE) : dflt;
  }
  // MAX_TICK_MS: the clock, the seek bar and the input pane are brought up
  // to date at least this often while playing.
  var MAX_TICK_MS = 200;

  var cfg = window.APTL_PLAYER;
  var params = new URLSearchParams(window.location.search);
  var $ = function (id) { return document.getElementById(id); };

  function base64Bytes(s) {
    var bin = atob(s), out = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) { out[i] = bin.charCodeAt(i); }
    return out;
  }

  // parseTiming reads the timing text. The typescript's body starts after
  // its first line, the start line script(1) writes and scriptreplay skips;
  // I and O entries take their bytes from it in turn.
  function parseTiming(text, typescript) {
    var off = typescript.indexOf(10) + 1;
    var headers = {}, events = [], t = 0;
    var lines = text.split("\n");
    for (var i = 0; i < lines.length; i++) {
      var line = lines[i];
      if (line === "") { continue; }
      var f = line.split(" ");
      var delay = Number(f[1]);
      if (!(delay >= 0)) { throw new Error("timing line " + (i + 1) + ": the delay is not a number of seconds"); }
      t += delay;
      switch (f[0]) {
        case "H":
          if (!(f[2] in headers)) { headers[f[2]] = f.slice(3).join(" "); }
          break;
        case "I":
        case "O":
          var n = parseInt(f[2], 10);
          if (!(n >= 0) || off + n > typescript.length) {
            throw new Error("timing line " + (i + 1) + ": its bytes run past the typescript's end");
          }
          events.push({ t: t, kind: f[0], off: off, n: n });
          off += n;
          break;
        case "S":
          var m = /^S \S+ SIGWINCH ROWS=(\d+) COLS=(\d+)$/.exec(line);
          if (m) { events.push({ t: t, kind: "S", rows: +m[1], cols: +m[2] }); }
          break;
        default:
          throw new Error("timing line " + (i + 1) + ": unknown kind " + JSON.stringify(f[0]));
      }
    }
    return { headers: headers, events: events, duration: t };
  }

  // decodeStreams gives each data entry its text. One streaming decoder
  // per stream keeps a character split across two entries whole: its
  // first bytes wait in the decoder and come out with the next entry.
  function decodeStreams(events, typescript, withInput) {
    var dec = { O: new TextDecoder("utf-8"), I: new TextDecoder("utf-8") };
    var last = { O: null, I: null };
    var corpus = [], length = 0;
    for (var i = 0; i < events.length; i++) {
      var ev = events[i];
      if (ev.kind === "S" || (ev.kind === "I" && !withInput)) { continue; }
      ev.text = dec[ev.kind].decode(typescript.subarray(ev.off, ev.off + ev.n), { stream: true });
      last[ev.kind] = ev;
    }
    ["O", "I"].forEach(function (k) {
      var rest = dec[k].decode();
      if (rest && last[k]) { last[k].text += rest; }
    });
    for (var j = 0; j < events.length; j++) {
      if (events[j].kind === "O") {
        corpus.push(events[j].text);
        length += events[j].text.length;
      }
      events[j].outEnd = length; // output characters up to and including this entry
    }
    return corpus.join("");
  }

  var typescript, rec, outText;
  try {
    typescript = base64Bytes(window.APTL_TYPESCRIPT_B64);
    rec = parseTiming(new TextDecoder("utf-8").decode(base64Bytes(window.APTL_TIMING_B64)), typescript);
    outText = decodeStreams(rec.events, typescript, cfg.input);
  } catch (err) {
    $("player-error").textContent = "The record cannot be played: " + err.message;
    document.documentElement.setAttribute("data-player-state", "error");
    return;
  }
  var events = rec.events, duration = rec.duration;
  var initialCols = side(rec.headers.COLUMNS, 80);
  var initialRows = side(rec.headers.LINES, 24);

  var term = null, next = 0, now = 0, inputText = "";
  var playing = false, speed = Number(params.get("speed")) || 1, timer = null, wallStart = 0, timeStart = 0;

  function newTerminal() {
    if (term) { term.destroy(); }
    var box = $("terminal");
    box.textContent = "";
    term = new Terminal({ cols: initialCols, rows: initialRows, useStyle: true, screenKeys: false, cursorBlink: false });
    term.open(box);
    // term.js takes every key of the document while it has the focus; the
    // player's own controls must keep theirs.
    term.blur();
    showSize(initialCols, initialRows);
  }

  function showSize(cols, rows) { $("size").textContent = cols + "\u00d7" + rows; }

  // visibleInput shows typed bytes as text: a carriage return as a
  // return mark and a line break, other controls in caret notation.
  function visibleInput(s) {
    return s.replace(/[\x00-\x1f\x7f]/g, function (c) {
      if (c === "\r") { return "\u23ce\n"; }
      if (c === "\n" || c === "\t") { return c; }
      return c === "\x7f" ? "^?" : "^" + String.fromCharCode(c.charCodeAt(0) + 64);
    });
  }

  // applyUntil plays every entry at or before t that has not been played,
  // writing runs of output to the terminal in one call.
  function applyUntil(t) {
    var batch = "", typed = false;
    while (next < events.length && events[next].t <= t) {
      var ev = events[next++];
      if (ev.kind === "O") {
        batch += ev.text;
      } else if (ev.kind === "S") {
        if (batch) { term.write(batch); batch = ""; }
        term.resize(side(ev.cols, initialCols), side(ev.rows, initialRows));
        showSize(ev.cols, ev.rows);
      } else if (ev.text) {
        inputText += ev.text;
        typed = true;
      }
    }
    if (batch) { term.write(batch); }
    if (typed) { $("input-pane").textContent = visibleInput(inputText); }
    now = t;
    showTime();
  }

  function seek(t) {
    t = Math.max(0, Math.min(t, duration));
    if (t < now || !term) {
      newTerminal();
      next = 0;
      inputText = "";
      if (cfg.input) { $("input-pane").textContent = ""; }
    }
    applyUntil(t);
    timeStart = t;
    wallStart = performance.now();
    if (next >= events.length && t >= duration) { ended(); }
  }

  function fmt(t) { return t.toFixed(duration < 10 ? 3 : 1) + " s"; }
  function showTime() {
    $("clock").textContent = fmt(now) + " / " + fmt(duration);
    $("seek").value = String(now);
  }

  function tick() {
    timer = null;
    if (!playing) { return; }
    var t = Math.min(timeStart + (performance.now() - wallStart) / 1000 * speed, duration);
    applyUntil(t);
    if (next >= events.length && t >= duration) { ended(); return; }
    var due = next < events.length ? events[next].t : duration;
    timer = setTimeout(tick, Math.min(Math.max((due - t) / speed * 1000, 0), MAX_TICK_MS));
  }

  function play() {
    if (next >= events.length && now >= duration) { seek(0); }
    playing = true;
    timeStart = now;
    wallStart = performance.now();
    $("play").textContent = "Pause";
    document.documentElement.setAttribute("data-player-state", "playing");
    tick();
  }

  function pause() {
    playing = false;
    if (timer) { clearTimeout(timer); timer = null; }
    $("play").textContent = "Play";
    document.documentElement.setAttribute("data-player-state", "paused");
  }

  // screenText is the terminal's visible screen as its rows show it in the
  // page, each line without trailing blanks.
  function screenText() {
    var rows = term.element.children, lines = [];
    for (var i = 0; i < rows.length; i++) {
      lines.push((rows[i].textContent || "").replace(/\u00a0/g, " ").replace(/\s+$/, ""));
    }
    return lines.join("\n");
  }

  function ended() {
    pause();
    $("play").textContent = "Replay";
    document.documentElement.setAttribute("data-player-state", "ended");
    dumpScreen();
  }

  // dumpScreen, with ?dumpscreen=1, writes the screen as text and the
  // terminal's size into the DOM, for a test that reads it.
  function dumpScreen() {
    if (params.get("dumpscreen") !== "1") { return; }
    $("screen-dump").textContent = screenText();
    document.documentElement.setAttribute("data-terminal-size", term.cols + "x" + term.rows);
    document.documentElement.setAttribute("data-player-time", now.toFixed(6));
  }

  // Marks on the seek bar: idle stretches, window changes, gap records.
  function mark(cls, t, width, label) {
    var m = document.createElement("div");
    m.className = "mark " + cls;
    m.style.left = (duration > 0 ? t / duration * 100 : 0) + "%";
    if (width !== null) { m.style.width = (duration > 0 ? width / duration * 100 : 0) + "%"; }
    m.title = label;
    m.addEventListener("click", function () { seek(t); });
    $("marks").appendChild(m);
  }

  function markSeekBar() {
    var prev = 0, marks = 0;
    for (var i = 0; i < events.length && marks < MAX_MARKS; i++) {
      var ev = events[i];
      if (ev.t - prev >= IDLE_SECONDS) { mark("idle", prev, ev.t - prev, "idle " + fmt(ev.t - prev)); marks++; }
      if (ev.kind === "S") { mark("resize", ev.t, null, "window changed to " + ev.cols + "\u00d7" + ev.rows + " at " + fmt(ev.t)); marks++; }
      prev = ev.t;
    }
    (cfg.gaps || []).forEach(function (g) { mark("gap", Math.min(g.t, duration), null, g.label + " at " + fmt(g.t)); });
  }

  // find jumps to the moment the next match of the search box's text
  // appeared: the output entry that completes it.
  var lastMatch = -1;
  function find() {
    var q = $("search").value;
    if (!q) { return; }
    var at = outText.indexOf(q, lastMatch + 1);
    if (at < 0) { at = outText.indexOf(q); }
    if (at < 0) {
      $("search-result").textContent = "not in the output";
      return;
    }
    lastMatch = at;
    var end = at + q.length, lo = 0, hi = events.length - 1;
    while (lo < hi) {
      var mid = (lo + hi) >> 1;
      if (events[mid].outEnd >= end) { hi = mid; } else { lo = mid + 1; }
    }
    pause();
    seek(events[lo].t);
    $("search-result").textContent = "appeared at " + fmt(events[lo].t);
  }

  $("seek").max = String(duration);
  $("seek").step = "any";
  $("seek").addEventListener("input", function () { seek(Number($("seek").value)); });
  $("play").addEventListener("click", function () { if (playing) { pause(); } else { play(); } });
  if (!Array.prototype.some.call($("speed").options, function (o) { return Number(o.value) === speed; })) {
    var o = document.createElement("option");
    o.value = o.textContent = String(speed);
    $("speed").appendChild(o);
  }
  $("speed").value = String(speed);
  $("speed").addEventListener("change", function () {
    speed = Number($("speed").value) || 1;
    timeStart = now;
    wallStart = performance.now();
  });
  $("find").addEventListener("click", find);
  $("search").addEventListener("keydown", function (ev) { if (ev.key === "Enter") { find(); } });
  $("search").addEventListener("input", function () { lastMatch = -1; });
  document.addEventListener("focusin", function (ev) {
    if (term && ev.target && /^(INPUT|SELECT|BUTTON)$/.test(ev.target.tagName)) { term.blur(); }
  });

  newTerminal();
  markSeekBar();
  seek(0);
  $("controls").hidden = false;
  document.documentElement.setAttribute("data-player-state", "ready");
  // A link can open the page at a moment: ?t=SECONDS, or ?find=TEXT, the
  // moment that text appeared.
  if (params.has("t")) { seek(Number(params.get("t")) || 0); }
  if (params.get("find")) {
    $("search").value = params.get("find");
    find();
  }
  if (params.get("autoplay") === "1") { play(); } else { dumpScreen(); }
})();
