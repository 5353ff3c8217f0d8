from __future__ import annotations

import socket
from pathlib import Path

import pytest

from perfkit.cli import main
from perfkit.cluster import check_ports_free, load_cluster, local_cluster
from perfkit.errors import UsageError
from tests import clusters

EXAMPLE = Path(__file__).parents[2] / "examples" / "blog-cluster.toml"


def test_blog_example_is_the_articles_cluster() -> None:
    spec = load_cluster(EXAMPLE)
    assert [(w.index, w.host, w.port) for w in spec.workers] == [
        (0, "tensor101", 20000), (1, "tensor101", 20001), (2, "tensor101", 20002), (3, "tensor102", 20000)]
    assert spec.is_local()
    assert spec.cpu_budgets(2) == pytest.approx({"tensor101": 1.6, "tensor102": 0.4})
    assert spec.cpu_budgets(32) == {"tensor101": 16.0, "tensor102": 4.0}
    assert spec.tf_config(3) == {"cluster": {"worker": ["127.0.0.1:20000", "127.0.0.1:20001", "127.0.0.1:20002",
                                                        "127.0.0.2:20000"]},
                                 "task": {"type": "worker", "index": 3}}


def test_free_ports_keep_hosts_and_declared_ports_recorded() -> None:
    spec = load_cluster(EXAMPLE).with_free_ports()
    ports = [w.port for w in spec.workers]
    assert len(set(ports)) == 4 and [w.host for w in spec.workers][-1] == "tensor102"
    assert spec.to_dict()["hosts"][0]["base_port"] == 20000


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def _host(name: str, address: str, cores: int, workers: int, port: int) -> str:
    return clusters.host(name, address, cores, workers, base_port=port)



@pytest.mark.parametrize("text,match", [
    ("[[hosts]\nname=", "not valid TOML"),
    ("title = 'x'\n", "at least one"),
    (_host("a", "127.0.0.1", 2, 0, 20000), r"workers: 0 must be"),
    (_host("a", "127.0.0.1", 0, 1, 20000), r"cores: 0 must be"),
    (_host("a", "not an address!", 1, 1, 20000), "address"),
    (_host("a", "127.0.0.1", 1, 1, 80), "base_port"),
    (_host("a b", "127.0.0.1", 1, 1, 20000), "name"),
    (_host("a", "127.0.0.1", 1, 1, 20000) + "gpus = 1\n", "unknown key"),
    (_host("a", "127.0.0.1", 1, 2, 20000)
     + _host("b", "127.0.0.1", 1, 1, 20001), "127.0.0.1:20001 is used by"),
    (_host("a", "127.0.0.1", 1, 1, 20000)
     + _host("a", "127.0.0.2", 1, 1, 20000), "more than once"),
])
def test_bad_cluster_files_name_the_file_and_problem(tmp_path: Path, text: str, match: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(UsageError, match=match) as err:
        load_cluster(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_missing_cluster_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read"):
        load_cluster(tmp_path / "nope.toml")


def test_port_in_use_is_refused_before_start() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        spec = local_cluster(2, 2.0)
        taken = spec.workers[0].__class__(0, "localhost", "127.0.0.1", port)
        with pytest.raises(UsageError, match=f"127.0.0.1:{port} for worker 0"):
            check_ports_free((taken,))


@pytest.mark.parametrize("args,match", [
    (["--workers", "3"], "does not divide among 3 workers"),
    (["--workers", "2", "--cluster", str(EXAMPLE)], "either --workers N or --cluster FILE"),
    ([], "either --workers N or --cluster FILE"),
    (["--cluster", str(EXAMPLE), "--host", "tensor999"], "'tensor999' is not in"),
    (["--cluster", str(EXAMPLE), "--task-index", "4"], "not a worker index 0..3"),
    (["--cluster", str(EXAMPLE), "--host", "tensor101", "--task-index", "0"], "not both"),
    (["--workers", "2", "--connect-timeout", "0"], "--connect-timeout"),
    (["--workers", "2", "--host", "x"], "only with --cluster"),
])
def test_multi_usage_errors_exit_2_before_anything_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          args: list[str], match: str) -> None:
    rc = main(["run", "--mode", "multi", "--preset", "tiny", "--results-dir", str(tmp_path), *args])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert pytest.importorskip("re").search(match, err), err
    assert not list(tmp_path.glob("*/run.json"))


def test_single_mode_refuses_multi_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--workers", "2", "--results-dir", str(tmp_path)]) == 2
    assert "--workers: only with --mode multi" in capsys.readouterr().err


def test_a_host_link_is_read_and_recorded(tmp_path: Path) -> None:
    text = (_host("a", "127.0.0.1", 1, 1, 20000)
            + "link = { bandwidth_mbit = 1000, latency_ms = 0.2 }\n")
    spec = load_cluster(_write(tmp_path, text))
    assert spec.hosts[0].link is not None and spec.hosts[0].link.bandwidth_mbit == 1000
    assert spec.hosts[0].link.needs_netem
    from perfkit.cluster import cluster_from_dict

    assert cluster_from_dict(spec.to_dict()) == spec


@pytest.mark.parametrize("link,match", [
    ("link = 5", "must be a table"),
    ("link = { bandwidth = 5 }", "unknown key.*bandwidth_mbit, latency_ms, loss_pct"),
    ("link = { bandwidth_mbit = 0 }", r"link.bandwidth_mbit: 0 must be a number > 0"),
    ("link = { loss_pct = 120 }", r"link.loss_pct: 120 must be a number in 0..100"),
    ("link = { latency_ms = true }", r"link.latency_ms: True must be"),
])
def test_bad_links_name_the_key(tmp_path: Path, link: str, match: str) -> None:
    path = _write(tmp_path, _host("a", "127.0.0.1", 1, 1, 20000) + link + "\n")
    with pytest.raises(UsageError, match=match):
        load_cluster(path)


def test_a_port_with_a_listener_is_taken_but_one_in_time_wait_is_free() -> None:
    import socket

    from perfkit.cluster import WorkerSpec, check_ports_free

    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as TensorFlow's gRPC server binds
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    with pytest.raises(UsageError, match=f"port 127.0.0.1:{port} for worker 0 .h. is not free"):
        check_ports_free((WorkerSpec(0, "h", "127.0.0.1", port),))
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = server.accept()
    conn.close()  # the side that closes first keeps the port in TIME_WAIT
    client.close()
    server.close()
    check_ports_free((WorkerSpec(0, "h", "127.0.0.1", port),))
