"""The bubblewrap command line: host read-only, Harbor's paths bound, private paths covered."""

from __future__ import annotations

from pathlib import Path

from rlstack.episodes.sandboxes.bwrap import Bind, bwrap_argv


def pairs(argv: list[str], flag: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, arg in enumerate(argv) if arg == flag]


def test_workspace_and_logs_are_the_only_writable_binds(tmp_path):
    argv = bwrap_argv("bwrap", binds=[Bind(tmp_path / "ws", "/app", writable=True), Bind(tmp_path / "tests", "/tests")],
                      hide=[tmp_path], command=["bash", "/tests/test.sh"], chdir="/app", status_fd=7)
    assert pairs(argv, "--bind") == [(str(tmp_path / "ws"), "/app")]
    assert (str(tmp_path / "tests"), "/tests") in pairs(argv, "--ro-bind")
    assert ("/usr", "/usr") in pairs(argv, "--ro-bind")
    ro_targets = [target for _, target in pairs(argv, "--ro-bind")]
    assert "/proc" not in ro_targets and "/tmp" not in ro_targets and "/app" not in ro_targets
    assert argv[argv.index("--tmpfs", argv.index("/tmp")) + 1] == str(tmp_path)  # hidden after /tmp
    assert {"--unshare-pid", "--die-with-parent", "--cap-drop"} <= set(argv)
    assert argv[argv.index("--json-status-fd") + 1] == "7"
    assert argv[-3:] == ["--", "bash", "/tests/test.sh"]


def test_paths_that_do_not_exist_or_are_root_are_not_hidden(tmp_path):
    argv = bwrap_argv("bwrap", binds=[], hide=[Path("/"), tmp_path / "missing", Path("relative")], command=["true"],
                      chdir="/")
    assert [argv[i + 1] for i, arg in enumerate(argv) if arg == "--tmpfs"] == ["/tmp"]


def test_exposed_paths_are_bound_read_only_before_private_ones_are_hidden(tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / "tasks").mkdir(parents=True)
    argv = bwrap_argv("bwrap", binds=[], hide=[checkout / "tasks"], command=["true"], chdir="/", expose=[checkout])
    bind = argv.index("--ro-bind", argv.index("--tmpfs"))
    assert argv[bind:bind + 3] == ["--ro-bind", str(checkout), str(checkout)]
    assert argv.index(str(checkout / "tasks")) > bind  # the tmpfs over the tasks comes after, so it wins
