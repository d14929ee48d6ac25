"""safefs: operations below a trusted directory refuse symlinks and replace planted names."""

from __future__ import annotations

import os

import pytest

from rlstack.common import safefs


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "trial" / "agent").mkdir(parents=True)
    (tmp_path / "secret").write_text("keep")
    return tmp_path


def test_a_planted_link_is_replaced_not_written_through(tree):
    link = tree / "trial" / "agent" / "exit_code.txt"
    os.symlink(tree / "secret", link)
    safefs.write_text(link, "0\n", within=tree / "trial", atomic=False)
    assert not link.is_symlink() and link.read_text() == "0\n" and (tree / "secret").read_text() == "keep"
    os.unlink(link)
    os.symlink(tree / "secret", link)
    safefs.write_text(link, "1\n", within=tree / "trial")
    assert not link.is_symlink() and link.read_text() == "1\n" and (tree / "secret").read_text() == "keep"
    assert sorted(os.listdir(tree / "trial" / "agent")) == ["exit_code.txt"]  # no temp file left


def test_a_linked_directory_on_the_way_is_refused(tree):
    os.symlink(tree, tree / "trial" / "verifier")
    for op in (lambda: safefs.write_text(tree / "trial" / "verifier" / "secret", "x", within=tree / "trial"),
               lambda: safefs.read_text(tree / "trial" / "verifier" / "secret", within=tree / "trial"),
               lambda: safefs.clear_dir(tree / "trial" / "verifier", within=tree / "trial")):
        with pytest.raises(safefs.UnsafePath):
            op()
    assert (tree / "secret").read_text() == "keep"


def test_reads_take_regular_files_only_and_stay_inside(tree):
    agent = tree / "trial" / "agent"
    os.mkfifo(agent / "fifo")  # opening it for reading would block forever
    with pytest.raises(safefs.UnsafePath):
        safefs.read_text(agent / "fifo", within=tree / "trial")
    with pytest.raises(safefs.UnsafePath):
        safefs.read_text(tree / "trial" / ".." / "secret", within=tree / "trial")
    (agent / "big").write_bytes(b"x" * 100)
    assert safefs.read_bytes(agent / "big", within=tree / "trial", limit=10) == b"x" * 10
    assert not safefs.is_file(agent / "fifo", within=tree / "trial")


def test_clear_dir_removes_links_and_trees_but_not_their_targets(tree):
    verifier = tree / "trial" / "verifier"
    verifier.mkdir()
    os.symlink(tree, verifier / "up")
    (verifier / "sub").mkdir()
    os.symlink(tree / "secret", verifier / "sub" / "link")
    safefs.clear_dir(verifier, within=tree / "trial")
    assert os.listdir(verifier) == [] and (tree / "secret").read_text() == "keep"
