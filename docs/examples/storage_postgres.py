#!/usr/bin/env python3
"""A lockstorm storage adapter (docs/protocol.md, "Storage adapters"): the
run's counter is the row `id = 1` of the `counter` table on lockstorm's own
PostgreSQL (`--storage postgres`), and a fenced read or write is one
conditional statement, so the database itself refuses a stale fence.

    lockstorm run --config fenced --storage postgres --nemesis pause \\
        --storage-cmd "python3 docs/examples/storage_postgres.py"

Nothing but Python 3 and `psql`: one `psql` per request, which keeps the
sketch short (a real adapter would hold one connection). JSON lines on
stdin and stdout, one request at a time; logs on stderr.
"""

import glob
import json
import os
import shutil
import subprocess
import sys

RESET = "UPDATE counter SET value = 0, fence = -1 WHERE id = 1"
READ = "SELECT value FROM counter WHERE id = 1"
WRITE = "UPDATE counter SET value = {value} WHERE id = 1"
# A fenced read takes its fence too: it fences off every lower one.
FENCED_READ = "UPDATE counter SET fence = {fence} WHERE id = 1 AND fence <= {fence} RETURNING value"
FENCED_WRITE = "UPDATE counter SET value = {value}, fence = {fence} WHERE id = 1 AND fence <= {fence}"


def find_psql():
    installed = sorted(glob.glob("/usr/lib/postgresql/*/bin/psql"))
    found = shutil.which("psql") or (installed[-1] if installed else None)
    if not found:
        sys.exit("storage_postgres.py: psql not found on PATH nor in /usr/lib/postgresql/*/bin")
    return found


PSQL = find_psql()
ENV = dict(os.environ, PGCONNECT_TIMEOUT="2", PGOPTIONS="-c statement_timeout=2000")


class Unknown(Exception):
    """The statement may or may not have happened: the reply is ok:null."""


class Refused(Exception):
    """The statement definitely did not happen: the reply is ok:false."""


def sql(node, statement):
    """Runs one statement; its output lines (rows, then the command's tag)."""
    host, port = node.rsplit(":", 1)
    argv = [PSQL, "-h", host, "-p", port, "-U", "lockstorm", "-d", "lockstorm", "-AtX", "-c", statement]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=4, env=ENV)
    except subprocess.TimeoutExpired:
        raise Unknown("timeout: psql did not finish within 4 s")
    if done.returncode != 0:
        why = " ".join(done.stderr.split())[:500] or f"psql exited {done.returncode}"
        print(f"{statement}: {why}", file=sys.stderr, flush=True)
        # Not connected: nothing was sent. Anything else may have happened.
        if "could not connect" in why or "Connection refused" in why:
            raise Refused(f"connection: {why}")
        raise Unknown(f"psql: {why}")
    return [line for line in done.stdout.splitlines() if line.strip()]


def updated(lines):
    """How many rows an UPDATE's tag (its last line, `UPDATE 1`) says it changed."""
    if not lines or not lines[-1].startswith("UPDATE "):
        raise Unknown(f"psql: no command tag in {lines!r}")
    return int(lines[-1].split()[1])


def answer(req, state):
    op = req["op"]
    if op == "init":
        state.update(node=req["node"])
        version = subprocess.run([PSQL, "--version"], capture_output=True, text=True).stdout.strip()
        return {"ok": True, "storage": f"storage_postgres.py 1.0 ({version})"}
    node, fence = state["node"], req.get("fence")
    fence = None if fence is None else int(fence)  # a number, or digits past 2^53
    if op == "reset":
        if updated(sql(node, RESET)) != 1:
            raise Refused("missing-row: no counter row")
        return {"ok": True}
    if op == "read" and fence is None:
        return {"ok": True, "value": int(sql(node, READ)[0])}
    if op == "read":
        lines = sql(node, FENCED_READ.format(fence=fence))
        if updated(lines) == 0:
            return {"ok": False, "error": "stale-fence"}
        return {"ok": True, "value": int(lines[0])}
    if op == "write":
        value = int(req["value"])
        if fence is None:
            statement = WRITE.format(value=value)
        else:
            statement = FENCED_WRITE.format(value=value, fence=fence)
        if updated(sql(node, statement)) == 0:
            return {"ok": False, "error": "stale-fence" if fence is not None else "missing-row"}
        return {"ok": True}
    raise Unknown(f"unknown op {op!r}")


def main():
    state = {}
    for line in sys.stdin:  # when stdin closes, the loop ends and so does the adapter
        req = json.loads(line)
        try:
            reply = answer(req, state)
        except Refused as e:
            reply = {"ok": False, "error": str(e)}
        except Exception as e:  # Unknown, or anything unforeseen: never a definite answer
            reply = {"ok": None, "error": str(e) or type(e).__name__}
        print(json.dumps(dict(reply, id=req["id"])), flush=True)


if __name__ == "__main__":
    main()
