"""The one write path (`infra.files.write_files`): inside the directory named, all or nothing, and never replacing
or deleting a file infra did not write unless forced."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from infra.errors import InfraError
from infra.files import LEGACY_MARKER, RECORD, check_relative, plan_writes, write_file, write_files

TREE = {"chat/base/kustomization.yaml": "resources: [a.yaml]\n", "chat/base/a.yaml": "kind: A\n",
        "chat/overlays/prod/kustomization.yaml": "resources: [../../base]\n"}


def listing(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_new_directory_is_written_whole_with_its_record(tmp_path):
    out = tmp_path / "m"
    written = write_files(out, TREE)
    assert written == [out / rel for rel in TREE]
    files = listing(out)
    assert {k: v for k, v in files.items() if k != RECORD} == TREE
    record = json.loads(files[RECORD])
    assert sorted(record["files"]) == sorted(TREE)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # no staging left behind


def test_the_record_is_the_same_bytes_for_the_same_files(tmp_path):
    write_files(tmp_path / "a", TREE)
    write_files(tmp_path / "b", dict(reversed(TREE.items())))
    assert (tmp_path / "a" / RECORD).read_bytes() == (tmp_path / "b" / RECORD).read_bytes()


def test_a_rewrite_replaces_and_prunes_its_own_files_and_keeps_the_users(tmp_path):
    out = tmp_path / "m"
    write_files(out, TREE)
    (out / "notes.txt").write_text("mine")
    (out / "chat/base/user-patch.yaml").write_text("patch: mine\n")
    new = {"chat/base/kustomization.yaml": "resources: [b.yaml]\n", "chat/base/b.yaml": "kind: B\n"}
    write_files(out, new, prune=("",))
    files = listing(out)
    assert files["notes.txt"] == "mine" and files["chat/base/user-patch.yaml"] == "patch: mine\n"
    assert "chat/base/a.yaml" not in files and files["chat/base/b.yaml"] == "kind: B\n"
    assert not (out / "chat/overlays").exists()  # emptied by the prune, so gone with it


def test_a_foreign_directory_is_refused_and_force_writes_beside_the_users_files(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(InfraError, match="infra never wrote into it") as err:
        write_files(tmp_path, TREE)
    assert "--force" in str(err.value)
    assert listing(tmp_path) == {"keep.txt": "mine"}
    write_files(tmp_path, TREE, force=True, prune=("",))
    assert listing(tmp_path)["keep.txt"] == "mine"


def test_a_changed_or_foreign_file_at_a_target_is_refused_all_at_once(tmp_path):
    out = tmp_path / "m"
    write_files(out, TREE)
    (out / "chat/base/a.yaml").write_text("kind: A\n# tuned by hand\n")
    (out / "chat/base/extra.yaml").write_text("kind: Mine\n")
    with pytest.raises(InfraError) as err:
        write_files(out, {**TREE, "chat/base/a.yaml": "kind: A2\n", "chat/base/extra.yaml": "kind: X\n"})
    assert len(err.value.problems) == 2
    assert all("infra did not write it" in p.message for p in err.value.problems)
    assert (out / "chat/base/a.yaml").read_text() == "kind: A\n# tuned by hand\n"
    # an identical file is no conflict, whoever wrote it
    write_files(out, {**TREE, "chat/base/a.yaml": "kind: A\n# tuned by hand\n"})


def test_a_changed_file_the_new_output_drops_is_not_deleted(tmp_path):
    out = tmp_path / "m"
    write_files(out, TREE)
    (out / "chat/base/a.yaml").write_text("kind: A\n# tuned by hand\n")
    with pytest.raises(InfraError, match="changed since; the new output no longer has it"):
        write_files(out, {"chat/base/kustomization.yaml": "resources: []\n"}, prune=("",))
    assert (out / "chat/base/a.yaml").is_file()
    write_files(out, {"chat/base/kustomization.yaml": "resources: []\n"}, prune=("",), force=True)
    assert (out / "chat/base/a.yaml").is_file()  # forced past, still never deleted


def test_a_symlink_at_a_target_is_the_users_and_force_replaces_the_link_not_its_target(tmp_path):
    out = tmp_path / "o"
    write_files(out, {"report.md": "old\n"})
    elsewhere = tmp_path / "elsewhere.md"
    elsewhere.write_text("precious")
    (out / "report.md").unlink()
    (out / "report.md").symlink_to(elsewhere)
    with pytest.raises(InfraError, match="symbolic link"):
        write_files(out, {"report.md": "new\n"})
    write_files(out, {"report.md": "new\n"}, force=True)
    assert not (out / "report.md").is_symlink() and (out / "report.md").read_text() == "new\n"
    assert elsewhere.read_text() == "precious"


def test_a_directory_link_out_of_the_root_is_refused_even_forced(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (tmp_path / "outside").mkdir()
    (out / "chat").symlink_to(tmp_path / "outside")
    with pytest.raises(InfraError, match="outside"):
        write_files(out, TREE, force=True)
    assert not any((tmp_path / "outside").iterdir())


@pytest.mark.parametrize("rel", ["../x.yaml", "a/../../x.yaml", "/etc/x.yaml", "a//b.yaml", "./a.yaml", "",
                                 "a\\b.yaml", "c:x.yaml", "a/\0.yaml"])
def test_names_that_would_leave_the_directory_are_refused(tmp_path, rel):
    with pytest.raises(InfraError, match="outside"):
        write_files(tmp_path / "o", {rel: "x"})
    assert not (tmp_path / "o").exists()
    with pytest.raises(InfraError):
        check_relative(rel, tmp_path)


def test_a_failed_move_puts_every_file_back(tmp_path, monkeypatch):
    out = tmp_path / "m"
    write_files(out, TREE)
    before = listing(out)
    real = os.replace
    calls = []

    def failing(src, dst):
        calls.append(dst)
        if Path(dst) == out / "chat/overlays/prod/kustomization.yaml" and "new" in Path(src).parts:
            raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(InfraError, match="cannot write: No space left on device"):
        write_files(out, {rel: text + "# v2\n" for rel, text in TREE.items()}, prune=("",))
    monkeypatch.undo()
    assert len(calls) > 3 and listing(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
    assert sorted(p.name for p in out.iterdir()) == [RECORD, "chat"]


def test_a_tree_inside_an_earlier_output_is_infras_either_way(tmp_path):
    out = tmp_path / "out"
    write_files(out, {"plan.yaml": "a\n", **{f"manifests/{k}": v for k, v in TREE.items()}}, prune=("manifests/",))
    write_files(out / "manifests", {**TREE, "chat/base/a.yaml": "kind: A2\n"}, prune=("",))  # render -o out/manifests
    write_files(out, {"plan.yaml": "b\n", **{f"manifests/{k}": v for k, v in TREE.items()}}, prune=("manifests/",))
    assert (out / "manifests/chat/base/a.yaml").read_text() == "kind: A\n"


def test_a_tree_of_an_earlier_version_is_replaced_and_the_users_files_kept(tmp_path):
    out = tmp_path / "m"
    out.mkdir()
    (out / LEGACY_MARKER).write_text("Written by `infra render`; the next render replaces this directory.\n")
    (out / "chat/base").mkdir(parents=True)
    (out / "chat/base/a.yaml").write_text("kind: Old\n")
    (out / "notes.txt").write_text("mine")
    write_files(out, TREE, prune=("",))
    files = listing(out)
    assert files["chat/base/a.yaml"] == "kind: A\n" and files["notes.txt"] == "mine"
    assert LEGACY_MARKER not in files and RECORD in files


def test_a_named_file_is_replaced_only_when_identical_or_forced(tmp_path):
    path = tmp_path / "run.jsonl"
    write_file(path, "one\n")
    write_file(path, "one\n")
    with pytest.raises(InfraError, match="already exists") as err:
        write_file(path, "two\n")
    assert "choose another file, or pass --force" in str(err.value)
    with pytest.raises(InfraError, match="already exists"):
        write_file(path, None)  # the check before the work
    write_file(path, "two\n", force=True)
    assert path.read_text() == "two\n" and sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl"]


def test_an_output_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(InfraError, match="not a directory"):
        plan_writes(tmp_path / "f", {"a": "b"})
