"""paramiko client for the broker's end-to-end suite.

Runs as a child process of TestPythonClients (tests/python_clients_test.go)
under Debian's /usr/bin/python3 with python3-paramiko. Over one connection
it drives a PTY shell the way the tool servers do (pty-req, env ids, shell,
a window change, 50 delimiter-wrapped commands in one write, `stty size`,
`exit 3`) and, while that shell is open, an exec session without a PTY. It
writes every byte sent to and received from the shell to <outdir>/sent.bin
and <outdir>/received.bin, prints a JSON summary and exits 1 on a mismatch.

Usage: paramiko_session.py HOST PORT USER KEY_PATH KNOWN_HOSTS SESSION_ID OUTDIR
"""

import sys
import traceback
import warnings

# paramiko 2.12 imports ciphers that newer python3-cryptography deprecates.
warnings.filterwarnings("ignore", message=".*deprecated", module=r"paramiko(\.|$)")

import paramiko  # noqa: E402

import clientlib as cl  # noqa: E402


def read_until(chan, received, pattern):
    """Read the channel's stdout into received until pattern matches."""
    while not pattern.search(received):
        data = chan.recv(32768)
        if not data:
            raise EOFError("channel reached EOF before %r appeared" % pattern.pattern)
        received += data


def read_to_eof(chan, received):
    while True:
        data = chan.recv(32768)
        if not data:
            return
        received += data


def exit_status(chan):
    """Wait for the exit-status, bounded unlike Channel.recv_exit_status."""
    if not chan.status_event.wait(cl.READ_TIMEOUT):
        raise TimeoutError("no exit-status within %ds" % cl.READ_TIMEOUT)
    return chan.exit_status


def run_exec(transport, args, res):
    chan = transport.open_session(timeout=cl.READ_TIMEOUT)
    chan.settimeout(cl.READ_TIMEOUT)
    for name, value in cl.exec_env(args).items():
        chan.set_environment_variable(name, value)
    chan.exec_command(cl.EXEC_CMD)
    chan.shutdown_write()
    stdout = chan.makefile("rb").read()
    stderr = chan.makefile_stderr("rb").read()
    res.exec_done(stdout, stderr, exit_status(chan))
    chan.close()


def main():
    args = cl.parse_args(__doc__.splitlines()[0])
    res = cl.Result(args)
    res.summary["client"] = "paramiko " + paramiko.__version__

    client = paramiko.SSHClient()
    # Only the pinned host key is trusted; an unknown key is refused.
    client.load_host_keys(args.known_hosts)
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(args.host, port=args.port, username=args.user, key_filename=args.key_path,
                   look_for_keys=False, allow_agent=False, timeout=cl.READ_TIMEOUT,
                   auth_timeout=cl.READ_TIMEOUT, banner_timeout=cl.READ_TIMEOUT)
    try:
        transport = client.get_transport()
        chan = transport.open_session(timeout=cl.READ_TIMEOUT)
        chan.settimeout(cl.READ_TIMEOUT)
        chan.get_pty(term=cl.TERM, width=cl.COLS, height=cl.ROWS)
        # Channel.set_environment_variable sends env without want-reply, as
        # OpenSSH does; a refusal would be silent here but show in the record.
        for name, value in cl.shell_env(args).items():
            chan.set_environment_variable(name, value)
        chan.invoke_shell()
        chan.resize_pty(width=cl.NEW_COLS, height=cl.NEW_ROWS)

        sent, received = bytearray(), bytearray()
        b = cl.batch()
        sent += b
        chan.sendall(b)
        read_until(chan, received, cl.LAST_END_RE)

        sent += cl.STTY_CMD
        chan.sendall(cl.STTY_CMD)
        read_until(chan, received, cl.STTY_RE)

        # A second session channel on the same connection, while the shell
        # is still open.
        run_exec(transport, args, res)

        sent += cl.SHELL_EXIT_CMD
        chan.sendall(cl.SHELL_EXIT_CMD)
        read_to_eof(chan, received)
        status = exit_status(chan)
        stderr = bytearray()
        while chan.recv_stderr_ready():
            stderr += chan.recv_stderr(32768)
        res.shell_done(bytes(sent), bytes(received), status, bytes(stderr))
    finally:
        client.close()
    res.finish()


if __name__ == "__main__":
    try:
        main()
    except Exception:
        traceback.print_exc()
        sys.exit(2)
