"""The documentation's generated parts stay true to the code: the reference pages equal what
`docs/gen/reference.py` writes now (a new flag, field, rule or catalog entry cannot go undocumented), and the
GitOps hook and workflow files are the formats pre-commit and GitHub Actions read."""

from __future__ import annotations

import importlib.util
import re
import shlex

import yaml

from ..conftest import ROOT


def _reference_module():
    spec = importlib.util.spec_from_file_location("docs_reference", ROOT / "docs" / "gen" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_reference_pages_are_up_to_date():
    pages = _reference_module().pages()
    stale = [name for name, text in pages.items()
             if not (ROOT / "docs" / "reference" / name).is_file()
             or (ROOT / "docs" / "reference" / name).read_text(encoding="utf-8") != text]
    assert not stale, f"out of date: {stale} — regenerate with `python docs/gen/reference.py`"


def test_every_command_and_flag_is_in_the_reference():
    import typer

    from infra.cli import app

    text = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    group = typer.main.get_command(app)
    for name, command in group.commands.items():
        assert f"## infra {name}\n" in text
        for param in command.params:
            for flag in list(getattr(param, "opts", [])) + list(getattr(param, "secondary_opts", [])):
                if flag.startswith("-"):
                    assert flag in text, f"infra {name} {flag} is not in docs/reference/cli.md"


def test_every_validator_rule_is_in_the_reference():
    from infra.validators.rules import RULES

    text = (ROOT / "docs" / "reference" / "validator-rules.md").read_text(encoding="utf-8")
    assert all(f"| {rule_id} |" in text for rule_id in RULES)


def test_every_page_in_the_nav_exists_and_every_page_is_in_it():
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.SafeLoader)

    def walk(items):
        for item in items:
            for value in item.values():
                yield from (walk(value) if isinstance(value, list) else [value])

    listed = set(walk(config["nav"]))
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")
             if not p.relative_to(ROOT / "docs").as_posix().startswith(("gen/", "outputs/"))}
    assert listed == pages


def test_included_outputs_exist():
    missing = []
    for page in (ROOT / "docs").rglob("*.md"):
        for path in re.findall(r'--8<-- "([^"]+)"', page.read_text(encoding="utf-8")):
            if not (ROOT / path).is_file():
                missing.append(f"{page.relative_to(ROOT)}: {path}")
    assert not missing, "run `python docs/gen/outputs.py`: " + ", ".join(missing)


def test_pre_commit_hooks():
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert {h["id"] for h in hooks} == {"infra-check", "infra-validate"}
    for hook in hooks:
        assert {"id", "name", "entry", "language"} <= set(hook)
        argv = shlex.split(hook["entry"])
        assert argv[:2] == ["bash", "-c"] and f"infra {hook['id'].split('-')[1]}" in argv[2]


def test_reusable_workflow():
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "infra-check.yml").read_text())
    on = workflow.get("on", workflow.get(True))  # YAML 1.1 reads the key `on` as true
    inputs = on["workflow_call"]["inputs"]
    assert inputs["infra"]["required"] is True
    assert all(i["type"] in ("string", "boolean", "number") for i in inputs.values())
    runs = " ".join(step.get("run", "") for job in workflow["jobs"].values() for step in job["steps"])
    assert "infra check" in runs and "infra validate" in runs
