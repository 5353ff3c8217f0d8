"""perfkit launch --hosts without SSH: the host list, the remote command line, ssh's failures in one line,
the agent's watchdog (its clock passed in) and relay, and the flags refused with --hosts."""

from __future__ import annotations

import io
import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from perfkit.cluster import cluster_from_dict, load_cluster
from perfkit.config import Mode
from perfkit.errors import UsageError
from perfkit.trainer.options import ClusterFlags, RecordFlags
from perfkit.trainer.remote import agent
from perfkit.trainer.remote.hosts import parse_hosts, ssh_cluster
from perfkit.trainer.remote.options import over_ssh
from perfkit.trainer.remote.ssh import Target, remote_command, why_not


def test_hosts_give_one_host_each_with_its_slots_and_the_ssh_target() -> None:
    spec = parse_hosts("10.0.0.1,root@10.0.0.2:3", 24000)
    assert [(h.name, h.address, h.workers, h.ssh) for h in spec.hosts] == [
        ("10.0.0.1", "10.0.0.1", 1, "10.0.0.1"), ("10.0.0.2", "10.0.0.2", 3, "root@10.0.0.2")]
    assert [t.endpoint for t in spec.tasks] == ["10.0.0.1:24000", "10.0.0.2:24000", "10.0.0.2:24001",
                                               "10.0.0.2:24002"]
    assert cluster_from_dict(spec.to_dict()).hosts[1].ssh == "root@10.0.0.2"


@pytest.mark.parametrize("text, said", [
    ("a,a", "host 'a' is named twice"), ("a,-oProxyCommand=x", "is not an SSH target"), ("a,b c", "not an SSH target"),
    ("a,b:0", "slot count '0' is not a positive integer"),
    ("a,b:x", "slot count 'x'"), ("a,,b", "has an empty entry"), ("a,b:-1", "slot count '-1'"),
])
def test_a_bad_host_list_is_one_line(text: str, said: str) -> None:
    with pytest.raises(UsageError, match=said):
        parse_hosts(text, 23456)


def test_a_cluster_file_reaches_its_hosts_over_ssh_only_when_every_host_says_how(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text('[[hosts]]\nname = "a"\naddress = "10.0.0.1"\nssh = "me@a"\nworkers = 1\n\n'
                 '[[hosts]]\nname = "b"\naddress = "10.0.0.2"\nssh = "b"\nworkers = 2\ncores = 4\n')
    spec = load_cluster(f)
    assert ssh_cluster(spec) and spec.hosts[0].cores == 0.0 and spec.hosts[1].cores == 4.0  # 0: read over SSH
    f.write_text('[[hosts]]\nname = "a"\naddress = "10.0.0.1"\nssh = "a"\nworkers = 1\n\n'
                 '[[hosts]]\nname = "b"\naddress = "10.0.0.2"\nworkers = 1\ncores = 2\n')
    with pytest.raises(UsageError, match="host 'b' has no ssh target while others have"):
        ssh_cluster(load_cluster(f))
    f.write_text('[[hosts]]\nname = "a"\naddress = "10.0.0.1"\nssh = "-oProxyCommand=x"\nworkers = 1\n')
    with pytest.raises(UsageError, match="is not an SSH target"):
        load_cluster(f)


def test_the_remote_command_arrives_argument_by_argument() -> None:
    argv = ["python", "train.py", "a b", "it's", "x;y", "$HOME", "`id`", ""]
    line = remote_command(argv, "/data/my runs", {"A": "1 2"})
    assert line.startswith("cd -- '/data/my runs' && exec env 'A=1 2' ")
    # what a POSIX shell makes of it: the same arguments, nothing run or expanded
    out = subprocess.run(["sh", "-c", line.split("exec env 'A=1 2' ", 1)[1].replace("python", "printf '%s\\n'", 1)
                          .replace("'train.py'", "train.py")], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:-1] == ["train.py", *argv[2:]]
    assert shlex.split(line)[-len(argv):] == argv


def test_ssh_is_never_interactive_and_gives_up_on_a_silent_host() -> None:
    argv = Target("me@h", "h").argv("true")
    opts = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "-o")
    assert opts["BatchMode"] == "yes" and int(opts["ConnectTimeout"]) > 0
    assert int(opts["ServerAliveInterval"]) * int(opts["ServerAliveCountMax"]) < 10
    assert argv[-3:] == ["me@h", "--", "true"]


@pytest.mark.parametrize("code, err, said", [
    (255, "root@h: Permission denied (publickey).", "SSH refused the key"),
    (255, "ssh: connect to host h port 22: Connection refused", "unreachable over SSH"),
    (255, "Host key verification failed.", "its host key is not known"),
    (127, "bash: line 1: perfkit: command not found", "'perfkit' was not found there"),
    (126, "bash: line 1: exec: perfkit: cannot execute: Is a directory", "'perfkit' was not found there"),
    (1, "something else\nTraceback: the last line", "host h (me@h): Traceback: the last line"),
])
def test_each_ssh_failure_is_one_line_naming_the_host(code: int, err: str, said: str) -> None:
    text = why_not(Target("me@h", "h"), code, err, "perfkit")
    assert said in text and "\n" not in text and text.startswith("host h (me@h)")


def _ssh(hosts: str | None, env: list[str] | None, perfkit: str = "perfkit", results: str | None = None,
         **changes: object) -> object:
    """over_ssh of ``python t.py`` with the commands' default flags, but for ``changes`` (``mode`` among them)."""
    mode = changes.pop("mode", Mode.multi)
    record = RecordFlags(profile_steps="off")
    return over_ssh(["python", "t.py"], mode, ClusterFlags(**changes), record, hosts, env, perfkit, results)


def test_hosts_pass_only_the_named_variables_and_the_flags_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_TOKEN", "abc")
    spec, args, remote = _ssh("10.0.0.1,10.0.0.2", ["MY_TOKEN", "B=2"], "/opt/venv/bin/perfkit", "/scratch/{host}",
                              hang_timeout="45")
    assert dict(remote.env) == {"MY_TOKEN": "abc", "B": "2"} and remote.perfkit == "/opt/venv/bin/perfkit"
    assert remote.results_for("10.0.0.2", Path("r")) == "/scratch/10.0.0.2" and remote.cwd == os.getcwd()
    assert args.multi and args.argv == ("python", "t.py")
    assert args.flags[args.flags.index("--hang-timeout") + 1] == "45" and "--pin" in args.flags


@pytest.mark.parametrize("changes, hosts, env, said", [
    ({"max_restarts": 1}, "a,b", None, "--max-restarts: not with --hosts"),
    ({"emulate": True}, "a,b", None, "--emulate: not with --hosts"),
    ({"workers": 2}, "a,b", None, "--hosts: not with --workers"),
    ({"mode": Mode.single}, "a,b", None, "--mode single runs the command once"),
    ({"mode": Mode.single}, "a:2", None, "--mode single runs the command once"),
    ({}, "a,b", ["NOT_SET_HERE_XYZ"], "--env: NOT_SET_HERE_XYZ is not set"),
    ({}, "a,b", ["1BAD"], "is not NAME or NAME=VALUE"),
    ({"hang_timeout": "soon"}, "a,b", None, "--hang-timeout"),
    ({}, None, ["A=1"], "--env: only with --hosts"),
    ({}, "a,b", ["TF_CONFIG={}"], "--env TF_CONFIG: perfkit sets each task's TF_CONFIG"),
])
def test_flags_that_cannot_apply_to_hosts_are_refused(changes: dict[str, object], hosts: str | None,
                                                      env: list[str] | None, said: str) -> None:
    with pytest.raises(UsageError, match=said):
        _ssh(hosts, env, **changes)


def test_no_hosts_is_not_a_remote_run() -> None:
    assert _ssh(None, None, workers=2) is None


def test_the_watchdog_calls_the_launcher_lost_on_silence_or_end_of_file() -> None:
    now = [100.0]
    r, w = os.pipe()
    dog = agent.Watchdog(agent.Lines(r), clock=lambda: now[0])
    assert dog.verdict(now[0] + agent.SILENT_S - 0.1) is None
    assert "nothing from the launching host" in dog.verdict(now[0] + agent.SILENT_S + 0.1)
    os.close(w)
    dog._read()  # end of file: the launcher or its ssh is gone
    assert "closed the connection" in dog.verdict(now[0])
    os.close(r)
    assert agent.SILENT_S + agent.LOST_KILL_S < 10  # every worker gone within 10 s of the loss


def test_lines_come_whole_whatever_the_reads() -> None:
    r, w = os.pipe()
    os.write(w, b'{"cluster": null, "run_id": "x"}\nbe')
    lines = agent.Lines(r)
    assert agent.read_header(lines) == {"cluster": None, "run_id": "x"}
    os.write(w, b"at\nstop\n")
    os.close(w)
    assert [lines.next(), lines.next(), lines.next()] == [b"beat", b"stop", None]
    os.close(r)


def test_a_header_that_is_not_json_is_one_line() -> None:
    r, w = os.pipe()
    os.write(w, b"hello\n")
    os.close(w)
    with pytest.raises(UsageError, match="--agent: the first line on stdin"):
        agent.read_header(agent.Lines(r))
    os.close(r)


def test_the_relay_sends_whole_log_lines_once(tmp_path: Path) -> None:
    out = io.StringIO()
    relay = agent.Relay(out)
    log = tmp_path / "workers" / "1" / "worker.log"
    log.parent.mkdir(parents=True)
    log.write_bytes(b"first\nsecond\npart")
    offsets: dict[int, int] = {}
    relay._more(log, 1, offsets)
    with open(log, "ab") as f:
        f.write(b"ial\n")
    relay._more(log, 1, offsets)
    relay.warning("w")
    relay.close()
    assert [json.loads(x) for x in out.getvalue().splitlines()] == [
        {"log": "first", "worker": 1}, {"log": "second", "worker": 1}, {"log": "partial", "worker": 1},
        {"warning": "w"}]


def test_host_info_says_what_the_launching_host_checks(tmp_path: Path) -> None:
    (tmp_path / ".perfkit-shared-abc").write_text("")
    info = agent.host_info(str(tmp_path), ".perfkit-shared-abc", "sh", [])
    assert info["shared"] and info["program"] and info["cores"] >= 1 and info["results_error"] is None
    assert not agent.host_info(str(tmp_path / "x"), ".perfkit-shared-abc", "no-such-program-xyz", [])["program"]


def test_a_host_with_another_perfkit_version_is_named() -> None:
    from perfkit.trainer.remote.hosts import Host, same_versions

    hosts = [Host(Target("a", "a"), 2.0, "/r", False, {"perfkit": "0.1.0"}),
             Host(Target("me@b", "b"), 2.0, "/r", False, {"perfkit": "0.0.9"})]
    same_versions(hosts[:1], "0.1.0")
    with pytest.raises(UsageError, match=r"host b \(me@b\) runs perfkit 0.0.9, this host 0.1.0"):
        same_versions(hosts, "0.1.0")


class _Stalled(io.StringIO):
    """A stdout whose writes block, as an SSH channel nobody reads any more."""

    def __init__(self) -> None:
        super().__init__()
        import threading

        self.gate = threading.Event()

    def write(self, text: str) -> int:
        self.gate.wait()
        return super().write(text)


def test_a_stalled_channel_never_blocks_the_run_only_drops_what_does_not_fit() -> None:
    out = _Stalled()
    relay = agent.Relay(out, limit=3)
    for i in range(10):  # returns at once although nothing can be written
        relay.phase(f"p{i}")
    assert relay.dropped >= 6
    out.gate.set()
    relay.close()
    assert [json.loads(x)["phase"] for x in out.getvalue().splitlines()][0] == "p0"


@pytest.mark.parametrize("end, elsewhere", [
    ({"status": "failed", "hung": []}, True),  # its workers only wait in a collective
    ({"status": "failed", "hung": None, "peer_lost": True}, True),  # died of a peer's silence
    ({"status": "failed", "hung": [1]}, False),  # its own worker is stuck
    ({"status": "failed", "signal": "SIGKILL", "peer_lost": False}, False),
    ({"status": "interrupted", "hung": []}, False), ({}, False),
])
def test_a_host_that_only_waited_for_another_leaves_it_to_name_the_cause(end: dict[str, object],
                                                                         elsewhere: bool) -> None:
    from perfkit.trainer.remote.session import Session

    s = Session(Target("h", "h"), "/r", "run--h", proc=None)  # type: ignore[arg-type]
    s.end = dict(end)
    assert s.waits_elsewhere() is elsewhere
