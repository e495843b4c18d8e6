"""The agent on its own: argv classification, env rules, code unpacking, the wire format, and
a real agent process (outside any sandbox, as it runs in a Kubernetes pod) driven over its
socket."""

from __future__ import annotations

import asyncio
import io
import os
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stoker.agent import protocol
from stoker.agent.binding import CODE_MARKER, Entry, check_env, classify, topology_env, unpack_code
from stoker.agent.zygote import Zygote


@pytest.mark.parametrize(
    ("argv", "entry"),
    [
        (["python", "-m", "pkg.mod", "a"], Entry("module", "pkg.mod", ("pkg.mod", "a"))),
        (["python3", "run.py", "-x"], Entry("script", "run.py", ("run.py", "-x"))),
        (["python", "-c", "print(1)", "z"], Entry("code", "print(1)", ("-c", "z"))),
        (["pkg.mod:main", "a"], Entry("call", "pkg.mod:main", ("pkg.mod:main", "a"))),
        (["sh", "-c", "true"], Entry("exec", "sh", ("sh", "-c", "true"))),
        (["python", "-X", "dev", "x.py"], Entry("exec", "python", ("python", "-X", "dev", "x.py"))),
        (["python"], Entry("exec", "python", ("python",))),
        (["/usr/bin/env:x"], Entry("exec", "/usr/bin/env:x", ("/usr/bin/env:x",))),
    ],
)
def test_classify(argv: list[str], entry: Entry) -> None:
    assert classify(argv) == entry
    assert entry.in_zygote == (entry.kind != "exec")


@pytest.mark.parametrize("argv", [[], [""], ["ok", 3]])
def test_classify_rejects_bad_argv(argv: list[object]) -> None:
    with pytest.raises(ValueError, match="argv"):
        classify(argv)  # type: ignore[arg-type]


def test_env_rules_and_topology() -> None:
    check_env({"A": "1"})
    for bad in ({"RANK": "0"}, {"CUDA_VISIBLE_DEVICES": ""}, {"A=B": "x"}, {"": "x"}):
        with pytest.raises(ValueError, match="env"):
            check_env(bad)
    assert topology_env(1, 2, "h", 7) == {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "h",
        "MASTER_PORT": "7",
    }


def _archive(path: Path, members: dict[str, bytes], link: str | None = None) -> None:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if link:
            info = tarfile.TarInfo("evil")
            info.type = tarfile.SYMTYPE
            info.linkname = link
            tar.addfile(info)


def test_unpack_code_once_and_safely(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    arc = tmp_path / "a.tar"
    _archive(arc, {"m.py": b"x = 1\n"})
    assert unpack_code(arc, "d1", ws) is True
    assert (ws / "m.py").read_text() == "x = 1\n"
    (ws / "m.py").write_text("changed")
    assert unpack_code(arc, "d1", ws) is False  # same digest already there
    assert (ws / "m.py").read_text() == "changed"
    assert (ws / CODE_MARKER).read_text() == "d1"
    bad = tmp_path / "bad.tar"
    _archive(bad, {"../outside.py": b"no"})
    with pytest.raises(tarfile.TarError):
        unpack_code(bad, "d2", ws)
    assert not (tmp_path / "outside.py").exists()
    evil = tmp_path / "evil.tar"
    _archive(evil, {}, link="/etc/passwd")
    with pytest.raises(tarfile.TarError):
        unpack_code(evil, "d3", ws)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)


@given(st.dictionaries(st.text(), _json, max_size=4), st.binary(max_size=64))
def test_wire_round_trip(body: dict[str, object], data: bytes) -> None:
    msg = {**body, "ev": "output", "data": protocol.pack_bytes(data)}
    line = protocol.encode(msg)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    back = protocol.decode(line)
    assert back == msg
    assert protocol.unpack_bytes(back["data"]) == data


@pytest.mark.parametrize("line", [b"nope\n", b"[1]\n", b'{"x": 1}\n'])
def test_wire_rejects(line: bytes) -> None:
    with pytest.raises(protocol.ProtocolError):
        protocol.decode(line)


@pytest.mark.timeout(30)
def test_agent_process_over_its_socket(tmp_path: Path) -> None:
    """A bare agent: hello, bind (zygote and exec), output, exit codes, kill, reconnect."""
    sock = tmp_path / "a.sock"
    ws = tmp_path / "ws"
    ws.mkdir()
    src = str(Path(protocol.__file__).resolve().parents[2])
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "stoker.agent", "--socket", str(sock), "--pod", "bare"),
            *("--workspace", str(ws), "--preload", "json"),
        ],
        env={**os.environ, "PYTHONPATH": src, "CUDA_VISIBLE_DEVICES": ""},
    )

    async def talk() -> None:
        for _ in range(1000):  # the socket file appears a moment before it listens
            try:
                reader, writer = await protocol.open_connection(str(sock))
                break
            except (FileNotFoundError, ConnectionRefusedError):
                await asyncio.sleep(0.01)
        hello = await protocol.read_message(reader)
        assert hello is not None and hello["ev"] == "hello" and hello["pod"] == "bare"
        assert hello["preloaded"].keys() == {"json"}

        async def job(jid: str, argv: list[str], **kw: object) -> tuple[bytes, dict[str, object]]:
            writer.write(protocol.encode({"op": "bind", "job": jid, "argv": argv, **kw}))
            out = b""
            while True:
                msg = await asyncio.wait_for(protocol.read_message(reader), 10)
                assert msg is not None
                if msg["ev"] == "output":
                    out += protocol.unpack_bytes(msg["data"])
                elif msg["ev"] == "exited":
                    return out, msg

        out, ex = await job(
            "j1", ["python", "-c", "import os; print(os.getcwd(), os.environ['RANK'])"]
        )
        assert out == f"{ws} 0\n".encode() and ex["exit_code"] == 0 and ex["failure"] is None
        out, ex = await job("j2", ["sh", "-c", "exit 4"])
        assert ex["exit_code"] == 4 and ex["failure"] == "user_error"
        out, ex = await job("j3", ["sleep", "5"], timeout_s=0.2)
        assert ex["failure"] == "timeout"
        out, ex = await job("j4", ["no-such-program-xyz"])
        assert ex["exit_code"] == 127 and b"cannot run" in out + b""
        writer.write(protocol.encode({"op": "bind", "job": "j5", "argv": []}))
        err = await protocol.read_message(reader)
        assert err is not None and err["ev"] == "error" and "argv" in err["message"]
        # a job that finishes while nobody is connected is reported on reconnection
        writer.write(
            protocol.encode({"op": "bind", "job": "j6", "argv": ["sh", "-c", "sleep 0.3"]})
        )
        running = await protocol.read_message(reader)
        assert running is not None and running["ev"] == "running"
        writer.close()
        await asyncio.sleep(0.6)
        reader, writer = await protocol.open_connection(str(sock))
        hello = await protocol.read_message(reader)
        assert hello is not None and hello["ev"] == "hello" and hello["job"] is None
        # the hello says what it ran, and which exits follow (held while nobody listened)
        assert hello["ran"]["j2"] == {"exit_code": 4, "failure": "user_error"}
        assert hello["held"] == ["j6"] and hello["ran"]["j6"]["exit_code"] == 0
        held = await protocol.read_message(reader)
        assert held is not None and held["ev"] == "exited" and held["job"] == "j6"
        # a bind is idempotent by job id: the recorded outcome again, never a second run
        for jid in ("j1", "j2"):
            out, again = await job(jid, ["sh", "-c", "echo ran twice; exit 9"])
            assert out == b"" and again["exit_code"] == (0 if jid == "j1" else 4), again
        writer.write(protocol.encode({"op": "shutdown"}))
        await writer.drain()
        writer.close()

    try:
        asyncio.run(talk())
        assert proc.wait(10) == 0
    finally:
        proc.kill()
        proc.wait()


def test_agent_refuses_to_sweep_outside_its_own_pid_namespace(tmp_path: Path) -> None:
    """The after-job sweep kills every process it sees: only ever inside a pod."""
    src = str(Path(protocol.__file__).resolve().parents[2])
    proc = subprocess.run(
        [sys.executable, "-m", "stoker.agent", "--socket", str(tmp_path / "s"), "--sandboxed"],
        env={**os.environ, "PYTHONPATH": src},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2 and "refusing" in proc.stderr


_COLLAPSE = """
import os, sys
from stoker.agent.zygote import collapse_huge_pages
data = bytearray(os.urandom(1 << 20)) * 48  # 48 MiB of anonymous memory, all touched
made = collapse_huge_pages()
huge = next(int(line.split()[1]) for line in open("/proc/self/smaps_rollup")
            if line.startswith("AnonHugePages:"))
before = data[7]
pid = os.fork()
if pid == 0:  # a fork still sees (and may write) its own copy
    data[7] ^= 1
    os._exit(0 if len(data) == 48 << 20 else 1)
_, status = os.waitpid(pid, 0)
print(made, huge, os.waitstatus_to_exitcode(status), data[7] == before)
"""


def test_the_agents_memory_goes_into_huge_pages_before_it_forks() -> None:
    # a fork copies a page-table entry per page mapped: the agent backs its heap with 2 MiB
    # pages first, so a big interpreter (torch) forks its jobs several times cheaper
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    release = tuple(int(x) for x in os.uname().release.split("-")[0].split(".")[:2])
    if not thp.exists() or "[never]" in thp.read_text() or release < (6, 1):  # MADV_COLLAPSE
        pytest.skip("no transparent huge pages to collapse into on this kernel")
    out = subprocess.run(
        [sys.executable, "-c", _COLLAPSE], capture_output=True, text=True, check=True
    ).stdout.split()
    made, huge_kb, child_exit, intact = int(out[0]), int(out[1]), int(out[2]), out[3]
    assert made >= 16 and huge_kb >= 16 * 2048, out  # most of the 48 MiB collapsed
    assert child_exit == 0 and intact == "True"  # the child's write stayed its own


def test_the_zygote_leaves_quietly_when_its_agent_hangs_up() -> None:
    """A zygote whose reports find nobody (its agent's end shut) returns from its loop and
    exits 0: no traceback, no signal, even though its forks get SIGPIPE's default."""
    zygote = Zygote(None)
    zygote.sock.shutdown(socket.SHUT_RD)  # every report the zygote sends now fails: EPIPE
    ctl_r, ctl_w = os.pipe()
    out_r, out_w = os.pipe()
    try:
        socket.send_fds(zygote.sock, [b"fork"], [ctl_r, out_w, out_w])
        _, status = os.waitpid(zygote.pid, 0)
    finally:
        for fd in (ctl_r, ctl_w, out_r, out_w):  # the spare it forked sees EOF and exits
            os.close(fd)
        zygote.sock.close()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


_FLOOD = "import sys\nfor i in range(64):\n    sys.stdout.buffer.write(bytes([i]) * 65536)\n"


@pytest.mark.timeout(60)
def test_output_past_the_backlog_pauses_and_arrives_whole(tmp_path: Path) -> None:
    """A job writing faster than its runtime reads: the agent stops reading its pipe while
    more than OUTPUT_BACKLOG waits to go (the job then waits on its full pipe), and goes on
    when the runtime catches up: every byte arrives, in order, and the job ends normally."""
    path = tmp_path / "a.sock"
    src = str(Path(protocol.__file__).resolve().parents[2])
    proc = subprocess.Popen(
        [sys.executable, "-m", "stoker.agent", "--socket", str(path), "--workspace", str(tmp_path)],
        env={**os.environ, "PYTHONPATH": src},
    )
    out, exited = b"", None
    try:
        conn = socket.socket(socket.AF_UNIX)
        for _ in range(1000):  # the socket file appears a moment before it listens
            try:
                conn.connect(str(path))
                break
            except (FileNotFoundError, ConnectionRefusedError):
                time.sleep(0.01)
        lines = conn.makefile("rb")
        assert protocol.decode(lines.readline())["ev"] == "hello"
        conn.sendall(protocol.encode({"op": "bind", "job": "f", "argv": ["python", "-c", _FLOOD]}))
        time.sleep(1.0)  # a runtime that reads nothing meanwhile (a blocking socket: not even
        # its transport reads), while the job writes 4 MiB, 5.6 MiB as messages
        while exited is None:
            msg = protocol.decode(lines.readline())
            if msg["ev"] == "output":
                out += protocol.unpack_bytes(msg["data"])
            elif msg["ev"] == "exited":
                exited = msg
        conn.sendall(protocol.encode({"op": "shutdown"}))
        assert proc.wait(10) == 0
    finally:
        proc.kill()
        proc.wait()
    assert exited["exit_code"] == 0 and exited["failure"] is None
    assert out == b"".join(bytes([i]) * 65536 for i in range(64))


def test_a_checkpoint_drop_follows_no_link(tmp_path: Path) -> None:
    """What a drop pod does on a checkpoint volume: the ended job's directory goes, with
    every link a hostile job left in it removed as a link (to another job's directory, to
    a file of another job's, to a path outside the volume), never followed; a link in the
    job's own place goes alone; a name that is not one plain name is refused."""
    from stoker.agent.checkpoint import drop, main

    root = tmp_path / "volume" / "stoker"
    other = root / "j-other" / "0"
    other.mkdir(parents=True)
    (other / "state").write_text("theirs")
    outside = tmp_path / "host-secret"
    outside.write_text("host only")
    mine = root / "j-mine" / "0"
    (mine / "deep").mkdir(parents=True)
    (mine / "state").write_text("mine")
    (mine / "deep" / "more").write_text("mine too")
    os.symlink("../../j-other", mine / "to-dir")  # a directory link: rmtree must not descend
    os.symlink(other / "state", mine / "deep" / "to-file")
    os.symlink(outside, mine / "to-host")
    os.symlink(root / "j-other", root / "j-link")  # a link in a job's own place

    assert drop(str(root), "j-mine") is True
    assert not (root / "j-mine").exists()
    assert (other / "state").read_text() == "theirs" and outside.read_text() == "host only"
    assert drop(str(root), "j-link") is True
    assert not os.path.lexists(root / "j-link") and (other / "state").read_text() == "theirs"
    assert drop(str(root), "j-never") is False  # nothing kept: no error
    for bad in ("..", ".", "j-other/0", "../stoker", ""):
        with pytest.raises(ValueError, match="plain name"):
            drop(str(root), bad)
    assert sorted(os.listdir(root)) == ["j-other"]
    # the command line the drop pod runs
    assert main(["drop", str(root), "j-other"]) == 0 and os.listdir(root) == []
    assert main(["drop", str(root), "../x"]) == 1
    assert main(["rm", str(root)]) == 2
