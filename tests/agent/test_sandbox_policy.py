"""The sandbox's pure parts (daemon/sandbox/policy.py, network.py, launch.py's plan codec):
which paths are granted, which carved out, which network rules apply. Fast: no process."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from daemon.sandbox import namespaces, policy
from daemon.sandbox.launch import REFUSED, decode, encode
from daemon.sandbox.namespaces import Isolation
from daemon.sandbox.network import NetworkMode, check_ports, parse_ports, stricter
from daemon.sandbox.policy import Available, SandboxConfig

pytestmark = pytest.mark.unit

FULL = Available(namespaced=True, landlock_abi=6, netns=True)


def test_a_denied_path_is_carved_out_of_a_granted_tree(tmp_path: Path) -> None:
    for name in ("a/x", "a/secret/inner", "b", "c"):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "a" / "secret")
    carved = policy.beneath(tmp_path, [tmp_path / "a" / "secret"])
    assert sorted(carved) == [tmp_path / "a" / "x", tmp_path / "b", tmp_path / "c"]  # no symlink either
    assert policy.beneath(tmp_path, [tmp_path.parent / "elsewhere"]) == [tmp_path]
    assert policy.beneath(tmp_path, [tmp_path]) == []


def test_the_plan_grants_the_workspace_and_tmpdir_and_keeps_the_data_dir_and_home_out(tmp_path: Path) -> None:
    home, data, workspace, tmpdir = (
        tmp_path / "home",
        tmp_path / "home" / ".worktrain",
        tmp_path / "ws",
        tmp_path / "t",
    )
    for folder in (data, workspace, tmpdir):
        folder.mkdir(parents=True)
    config = SandboxConfig(denied=policy.default_denied(data, (), home=home))
    plan = policy.plan_for(workspace, tmpdir, FULL, config)
    assert set(plan.write) == {str(workspace), str(tmpdir)}
    assert not any(p == str(home) or p.startswith(f"{home}/") for p in plan.read)
    assert "/usr" in plan.read and "/etc/shadow" not in plan.read and "/etc/passwd" in plan.read
    assert plan.loopback_up and plan.connect_ports is None and plan.drop_caps
    read_only = policy.plan_for(workspace, tmpdir, FULL, config, read_only=True)
    assert read_only.write == (str(tmpdir),) and str(workspace) in read_only.read
    # a workspace holding the data dir (the worker refuses the session; the rules still carve it)
    holding = policy.plan_for(home, tmpdir, FULL, config)
    assert str(home) not in holding.write and str(data) not in holding.write


def test_the_home_is_hidden_unless_listed_whatever_home_the_config_was_made_under(tmp_path: Path) -> None:
    """A configuration made while HOME was another folder (a test that patched it; the full
    suite's in-process CLI met one) denied that folder, not today's home: home_hidden() said
    False, so git in the box got HOME=<the real home>, which Landlock grants no read of
    ("unable to access '/root/.gitconfig'": `worktrain worktrees --prune` failed). The home is
    hidden unless WORKTRAIN_SANDBOX_READ lists it, as `default_denied` decides."""
    real = Path(os.path.realpath(Path.home()))
    made_elsewhere = SandboxConfig(denied=policy.default_denied(tmp_path / "data", (), home=tmp_path / "h"))
    assert real not in made_elsewhere.denied
    assert policy.home_hidden(made_elsewhere)
    listed = SandboxConfig(extra_read=(real,), denied=policy.default_denied(tmp_path / "data", (real,)))
    assert not policy.home_hidden(listed)
    assert policy.home_hidden(SandboxConfig(denied=policy.default_denied(tmp_path / "data", ())))


def test_listed_folders_and_version_manager_shims_are_readable(tmp_path: Path) -> None:
    shims = tmp_path / "pyenv" / "shims"
    shims.mkdir(parents=True)
    assert policy.tool_dirs(f"{shims}:/usr/bin:relative") == [str(tmp_path / "pyenv"), "/usr/bin"]
    config = SandboxConfig(extra_read=(tmp_path / "toolchain",))
    (tmp_path / "toolchain").mkdir()
    assert tmp_path / "toolchain" in policy.system_read(config, search_path="")


def test_egress_confines_tcp_and_none_brings_up_its_loopback(tmp_path: Path) -> None:
    egress = policy.plan_for(
        tmp_path, tmp_path, FULL, SandboxConfig(network=NetworkMode.EGRESS, ports=(443,))
    )
    assert egress.connect_ports == (443,) and not egress.loopback_up
    old_kernel = Available(namespaced=True, landlock_abi=3, netns=True)
    assert (
        policy.plan_for(
            tmp_path, tmp_path, old_kernel, SandboxConfig(network=NetworkMode.EGRESS)
        ).connect_ports
        is None
    )
    host = policy.plan_for(tmp_path, tmp_path, FULL, SandboxConfig(network=NetworkMode.HOST))
    assert host.connect_ports is None and not host.loopback_up


def test_network_modes_ports_and_the_workers_own_ports() -> None:
    assert parse_ports("22, 80,443,,80") == (22, 80, 443)
    with pytest.raises(ValueError):
        parse_ports("70000")
    assert check_ports((22, 443), {"Redis": 6379, "web": 3456}) is None
    assert "Redis port 6379" in (check_ports((443, 6379), {"Redis": 6379, "web": 3456}) or "")
    assert stricter(NetworkMode.EGRESS, NetworkMode.NONE) is NetworkMode.NONE  # a dispatch may tighten
    assert stricter(NetworkMode.NONE, NetworkMode.HOST) is NetworkMode.NONE  # never loosen
    assert stricter(NetworkMode.HOST, None) is NetworkMode.HOST


def test_the_plan_crosses_the_exec_intact_and_refuses_what_it_cannot_carry() -> None:
    fields = {"read": ["/usr", "/with space"], "landlock_abi": ["6"]}
    assert decode(encode(fields)) == fields
    with pytest.raises(ValueError):
        encode({"write": ["/a\nb"]})


@pytest.mark.processes
def test_the_launcher_fails_closed_when_a_layer_does_not_apply(tmp_path: Path) -> None:
    """A write grant it cannot open (here: a path under a regular file, ENOTDIR) stops the
    command before it runs, exit 125, saying which layer. (A grant whose path is gone grants
    nothing and stops nothing: tests/agent/test_git_box.py.)"""
    (tmp_path / "file").write_text("")
    plan = policy.Plan(landlock_abi=1, write=(str(tmp_path / "file" / "sub"),))
    done = subprocess.run(
        namespaces.argv_for(Isolation.GROUP, "echo RAN", (), plan=plan),
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": os.defpath},
    )
    assert done.returncode == REFUSED and "RAN" not in done.stdout
    assert "could not apply landlock" in done.stderr and "did not run" in done.stderr
