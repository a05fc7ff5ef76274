"""The parts of tenant isolation that need no root: uid assignment, the egress allow-list,
cgroup setup (on a stand-in for cgroupfs), the start log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopwire.harness import tenant_uids
from loopwire.harness.config import HarnessConfig
from loopwire.harness.egress import Egress
from loopwire.harness.server import make_sandbox
from loopwire.harness.tenant_limits import Cgroups, TmpfsBudget, TmpfsExhausted
from loopwire.harness.tenant_uids import TenantUids, UidRangeExhausted


def test_each_tenant_gets_a_uid_of_its_own_and_keeps_it(tmp_path):
    state = tmp_path / "uids.json"
    names = [f"tenant-t{i}" for i in range(3)]
    first = TenantUids(61000, 3, state)
    uids = [first.uid_for(n) for n in names]  # 3 names in 3 slots: some hash to the same one
    assert sorted(uids) == [61000, 61001, 61002]
    with pytest.raises(UidRangeExhausted):
        first.uid_for("tenant-t3")
    again = TenantUids(61000, 3, state)  # a restart, asking in another order
    assert [again.uid_for(n) for n in reversed(names)] == list(reversed(uids))
    assert json.loads(state.read_text()) == dict(zip(names, uids, strict=True))


def test_only_a_directory_under_the_root_named_like_a_tenants_is_a_tenant_tree(tmp_path):
    root = str(tmp_path)
    assert tenant_uids.tenant_tree(f"{root}/tenant-a/ws", root) == f"{root}/tenant-a"
    assert tenant_uids.tenant_tree(f"{root}/tenant~{'0' * 32}/x/y", root) == f"{root}/tenant~{'0' * 32}"
    assert tenant_uids.tenant_tree(f"{root}/tenant-a", root) is None  # the tree itself is no workspace
    assert tenant_uids.tenant_tree(f"{root}/other/tenant-a/ws", root) is None
    assert tenant_uids.tenant_tree(f"{root}/tenant-a/ws", None) is None


async def test_the_allow_list_never_lets_a_name_or_wildcard_reach_a_private_address():
    egress = Egress(["localhost:*", "*:443", "10.1.2.3:8080"])
    assert (await egress.destination("localhost", 80))[0] is None  # resolves to loopback
    assert (await egress.destination("169.254.169.254", 443))[0] is None  # cloud metadata, via a wildcard
    assert (await egress.destination("127.0.0.1", 443))[0] is None
    assert (await egress.destination("0.0.0.0", 443))[0] is None
    assert (await egress.destination("::ffff:127.0.0.1", 443))[0] is None
    assert await egress.destination("10.1.2.3", 8080) == ("10.1.2.3", "")  # named exactly
    assert await egress.destination("8.8.8.8", 443) == ("8.8.8.8", "")
    assert "allow-list" in (await egress.destination("8.8.8.8", 80))[1]
    with pytest.raises(ValueError, match="host:port"):
        Egress(["example.com"])


def fake_cgroup(path: Path, controllers: str) -> Path:
    path.mkdir(parents=True)
    (path / "cgroup.controllers").write_text(controllers)
    (path / "cgroup.subtree_control").write_text("")
    return path


def test_a_delegated_cgroup_gets_a_group_per_tenant_with_its_limits(tmp_path):
    base = fake_cgroup(tmp_path / "delegated", "cpuset cpu io memory pids\n")
    groups, why = Cgroups.find(str(base))
    assert groups is not None and why == ""
    assert set((base / "cgroup.subtree_control").read_text().split()) == {"+pids", "+memory", "+cpu"}
    procs = groups.procs_file("61005", processes=50, memory=1 << 30, cpus=1.5)
    group = base / "tenant-61005"
    assert procs == str(group / "cgroup.procs")
    assert (group / "pids.max").read_text() == "50" and (group / "memory.max").read_text() == str(1 << 30)
    assert (group / "cpu.max").read_text() == "150000 100000"


def test_without_cgroup_controllers_the_sandbox_says_it_uses_rlimits(tmp_path):
    base = fake_cgroup(tmp_path / "hybrid", "hugetlb\n")
    groups, why = Cgroups.find(str(base))
    assert groups is None and "does not offer the pids, memory, cpu controller(s)" in why
    assert Cgroups.find("none") == (None, "cgroups disabled by --sandbox-cgroup none")
    assert Cgroups.find(mount=str(tmp_path / "v1"))[1].endswith("is not a cgroup v2 hierarchy")


def test_the_start_log_says_what_is_enforced_and_what_is_checked(tmp_path):
    config = HarnessConfig(workspace_root=tmp_path / "ws", sandbox_workspace_quota_mb=64, sandbox_processes=77,
                           sandbox_cgroup="none", sandbox_egress_allow=["*.example.org:443"], sandbox_volumes=False,
                           sandbox_tmp_mb=16, sandbox_tmpfs_budget_mb=96)
    box = make_sandbox(config)
    box.probe(tmp_path / "ws" / ".probe")
    text = "\n".join(box.describe())
    assert "RLIMIT_NPROC=77" in text and "cgroups disabled" in text
    assert "RLIMIT_FSIZE=64.00 MiB per file (kernel)" in text and "a check, not a kernel quota" in text
    assert "egress only through the harness's proxy to *.example.org:443" in text
    assert "/tmp and /dev/shm 16.00 MiB each per command, 96.00 MiB per tenant's running commands" in text


def test_the_tmpfs_budget_charges_per_tenant_and_gives_back_once():
    budget = TmpfsBudget(100)
    first = budget.take("a", 60)
    with pytest.raises(TmpfsExhausted, match=r"RESOURCE_EXHAUSTED: .* tmpfs budget of 0.00 MiB \(--sandbox-tmpfs-budget-mb\)"):
        budget.take("a", 60)
    second = budget.take("b", 60)  # another tenant's budget is its own
    first()
    first()  # given back once, however often a process releases
    assert budget.held == {"b": 60}
    budget.take("a", 100)
    second()
    assert budget.held == {"a": 100}


def test_the_flags_size_each_commands_tmpfs_and_the_tenants_budget(tmp_path):
    config = HarnessConfig(workspace_root=tmp_path / "ws", sandbox_tmp_mb=16, sandbox_tmpfs_budget_mb=96,
                           sandbox_volumes=False)
    box = make_sandbox(config)
    assert (box.limits.tmp_size, box.limits.tmpfs_budget, box.volumes) == (16 << 20, 96 << 20, None)
    assert make_sandbox(HarnessConfig(workspace_root=tmp_path / "ws")).volumes is not None
