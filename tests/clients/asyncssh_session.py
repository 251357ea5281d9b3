"""asyncssh client for the broker's end-to-end suite.

Runs as a child process of TestPythonClients (tests/python_clients_test.go)
under Debian's /usr/bin/python3 with python3-asyncssh. Over one connection
it drives a PTY shell the way the tool servers do (pty-req, env ids, shell,
a window change, 50 delimiter-wrapped commands in one write, `stty size`,
`exit 3`) and, while that shell is open, an exec session without a PTY. It
writes every byte sent to and received from the shell to <outdir>/sent.bin
and <outdir>/received.bin, prints a JSON summary and exits 1 on a mismatch.

Usage: asyncssh_session.py HOST PORT USER KEY_PATH KNOWN_HOSTS SESSION_ID OUTDIR
"""

import asyncio
import sys
import traceback
import warnings

# asyncssh 2.10 imports ciphers that newer python3-cryptography deprecates.
warnings.filterwarnings("ignore", message=".*deprecated", module=r"asyncssh(\.|$)")

import asyncssh  # noqa: E402

import clientlib as cl  # noqa: E402


async def read_until(stream, received, pattern):
    """Read stream into received until pattern matches."""
    while not pattern.search(received):
        data = await asyncio.wait_for(stream.read(32768), cl.READ_TIMEOUT)
        if not data:
            raise EOFError("stream reached EOF before %r appeared" % pattern.pattern)
        received += data


async def read_to_eof(stream, received):
    while True:
        data = await asyncio.wait_for(stream.read(32768), cl.READ_TIMEOUT)
        if not data:
            return
        received += data


async def run_exec(conn, args, res):
    r = await asyncio.wait_for(
        conn.run(cl.EXEC_CMD, env=cl.exec_env(args), request_pty=False, encoding=None, check=False),
        cl.READ_TIMEOUT)
    res.exec_done(r.stdout, r.stderr, r.exit_status)


async def session(args, res):
    # config=[]: no ~/.ssh/config, so no SendEnv/SetEnv from the user's
    # setup; known_hosts pins the server's host key.
    conn = await asyncio.wait_for(
        asyncssh.connect(args.host, port=args.port, username=args.user, client_keys=[args.key_path],
                         known_hosts=args.known_hosts, agent_path=None, config=[],
                         preferred_auth="publickey"),
        cl.READ_TIMEOUT)
    async with conn:
        # asyncssh sends the env requests, then pty-req, then shell.
        proc = await asyncio.wait_for(
            conn.create_process(env=cl.shell_env(args), term_type=cl.TERM, term_size=(cl.COLS, cl.ROWS),
                                encoding=None),
            cl.READ_TIMEOUT)
        proc.change_terminal_size(cl.NEW_COLS, cl.NEW_ROWS)

        sent, received = bytearray(), bytearray()
        b = cl.batch()
        sent += b
        proc.stdin.write(b)
        await read_until(proc.stdout, received, cl.LAST_END_RE)

        sent += cl.STTY_CMD
        proc.stdin.write(cl.STTY_CMD)
        await read_until(proc.stdout, received, cl.STTY_RE)

        # A second session channel on the same connection, while the shell
        # is still open.
        await run_exec(conn, args, res)

        sent += cl.SHELL_EXIT_CMD
        proc.stdin.write(cl.SHELL_EXIT_CMD)
        await read_to_eof(proc.stdout, received)
        stderr = bytearray()
        await read_to_eof(proc.stderr, stderr)
        await asyncio.wait_for(proc.wait_closed(), cl.READ_TIMEOUT)
        res.shell_done(bytes(sent), bytes(received), proc.exit_status, bytes(stderr))


def main():
    args = cl.parse_args(__doc__.splitlines()[0])
    res = cl.Result(args)
    res.summary["client"] = "asyncssh " + asyncssh.__version__
    asyncio.run(session(args, res))
    res.finish()


if __name__ == "__main__":
    try:
        main()
    except Exception:
        traceback.print_exc()
        sys.exit(2)
