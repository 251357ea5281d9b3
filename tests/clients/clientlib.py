"""Shared parts of the Python client scripts, imported by each of them.

Runs inside the client process that tests/python_clients_test.go starts
(/usr/bin/python3 -B -E -s <script> ...). It holds the argument list, the
exact bytes the scripts send, the checks on what they receive, and the JSON
summary, so that paramiko_session.py and asyncssh_session.py differ only in
how they drive their SSH library.
"""

import argparse
import faulthandler
import json
import os
import re
import signal
import sys

# The delimiter protocol of the tool servers (DESIGN §3.1), as
# tests/protocol_test.go delimited() writes it.
COMMANDS = 50
BODIES = ("true", "false", "(exit 3)")
CODES = ("0", "1", "3")

START_RE = re.compile(rb"D_START_(\d+)\r\n")
END_RE = re.compile(rb"D_END_(\d+):(\d+)\r\n")
# The echoed input holds `D_END_49:$?`, so only a digit status is output.
LAST_END_RE = re.compile(rb"D_END_%d:\d+\r\n" % (COMMANDS - 1))

# Sent after the window change, once the batch has run: the shell reports
# the size the PTY has then.
STTY_CMD = b'echo "STTY_BEGIN"; stty size; echo "STTY_END"\n'
STTY_RE = re.compile(rb"STTY_BEGIN\r\n(.*?)\r\nSTTY_END\r\n")

SHELL_EXIT_CMD = b"exit 3\n"
SHELL_EXIT = 3
EXEC_CMD = "printf out; printf err >&2; exit 7"
EXEC_STDOUT, EXEC_STDERR, EXEC_EXIT = b"out", b"err", 7

TERM = "xterm"
COLS, ROWS = 80, 24
NEW_COLS, NEW_ROWS = 120, 40
RUN_ID = "python"

READ_TIMEOUT = 30  # seconds for each wait on the server


def parse_args(description):
    """Parse argv and arrange a traceback dump on SIGQUIT.

    The Go test sends SIGQUIT when its deadline passes, then kills the
    process after a delay; the dump shows where the client was stuck.
    """
    faulthandler.register(signal.SIGQUIT, all_threads=True, chain=False)
    p = argparse.ArgumentParser(description=description)
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("user")
    p.add_argument("key_path", help="client private key file (OpenSSH format)")
    p.add_argument("known_hosts", help="known_hosts file pinning the server's host key")
    p.add_argument("session_id")
    p.add_argument("outdir")
    return p.parse_args()


def shell_env(args):
    return {"APTL_SESSION_ID": args.session_id, "APTL_RUN_ID": RUN_ID}


def exec_env(args):
    return {"APTL_SESSION_ID": args.session_id + "-exec", "APTL_RUN_ID": RUN_ID}


def batch():
    """The delimiter-wrapped commands, to be sent in a single write."""
    out = bytearray()
    for i in range(COMMANDS):
        body = BODIES[i % len(BODIES)]
        out += b'echo "D_START_%d"; %s; echo "D_END_%d:$?"\n' % (i, body.encode(), i)
    return bytes(out)


def check_markers(received):
    """Return an error message, or None if the markers are 0..N-1 in order
    with the expected statuses."""
    starts = [int(m.group(1)) for m in START_RE.finditer(received)]
    ends = [(int(m.group(1)), m.group(2).decode()) for m in END_RE.finditer(received)]
    if starts != list(range(COMMANDS)):
        return "D_START markers are %s, want 0..%d in order" % (starts, COMMANDS - 1)
    want = [(i, CODES[i % len(CODES)]) for i in range(COMMANDS)]
    if ends != want:
        return "D_END markers are %s, want %s" % (ends, want)
    return None


def stty_size(received):
    m = STTY_RE.search(received)
    return m.group(1).decode(errors="replace") if m else None


class Result:
    """Collects the summary and the mismatches of one run."""

    def __init__(self, args):
        self.args = args
        self.summary = {}
        self.errors = []

    def expect(self, what, got, want):
        self.summary[what] = got.decode(errors="replace") if isinstance(got, bytes) else got
        if got != want:
            self.errors.append("%s = %r, want %r" % (what, got, want))

    def shell_done(self, sent, received, exit_status, stderr):
        """Record the PTY session's outcome and write sent.bin and received.bin."""
        with open(os.path.join(self.args.outdir, "sent.bin"), "wb") as f:
            f.write(sent)
        with open(os.path.join(self.args.outdir, "received.bin"), "wb") as f:
            f.write(received)
        self.summary["sent_bytes"] = len(sent)
        self.summary["received_bytes"] = len(received)
        err = check_markers(received)
        self.summary["markers_in_order"] = err is None
        if err:
            self.errors.append(err)
        self.expect("stty_size", stty_size(received), "%d %d" % (NEW_ROWS, NEW_COLS))
        self.expect("shell_exit", exit_status, SHELL_EXIT)
        # On a PTY session all output is on stdout; stderr would carry a
        # broker refusal.
        self.expect("shell_stderr", stderr, b"")

    def exec_done(self, stdout, stderr, exit_status):
        self.expect("exec_stdout", stdout, EXEC_STDOUT)
        self.expect("exec_stderr", stderr, EXEC_STDERR)
        self.expect("exec_exit", exit_status, EXEC_EXIT)

    def fail(self, message):
        self.errors.append(message)

    def finish(self):
        """Print the JSON summary; exit 1 if anything mismatched."""
        self.summary["errors"] = self.errors
        json.dump(self.summary, sys.stdout, sort_keys=True)
        sys.stdout.write("\n")
        sys.stdout.flush()
        for e in self.errors:
            print("mismatch: " + e, file=sys.stderr)
        sys.exit(1 if self.errors else 0)
