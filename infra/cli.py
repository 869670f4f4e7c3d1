"""The `infra` command line: parse arguments, call `infra.api`, print. No logic lives here.

Exit codes: 0 ok, 1 bad input (a file, a flag, a name), 2 infeasible intent, 3 verification failed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from infra.errors import EXIT_BAD_INPUT, InfraError

app = typer.Typer(
    name="infra",
    help="Intent compiler for LLM serving: declare model, load, SLOs, budget and inventory; get a deployment.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

_state = {"debug": False}

CatalogOpt = Annotated[
    Optional[list[Path]],
    typer.Option("--catalog", help="Directory of catalog overlays (models/, devices/, frameworks/); repeatable.",
                 show_default=False),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


def _console():
    from rich.console import Console

    import shutil

    # Piped output keeps full table cells rather than folding them to 80 columns.
    width = None if sys.stdout.isatty() else max(shutil.get_terminal_size((200, 24)).columns, 200)
    return Console(highlight=False, width=width)


@app.callback()
def _main(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
) -> None:
    _state["debug"] = debug


@app.command()
def check(
    path: Annotated[Path, typer.Argument(help="Intent (or cluster profile) YAML file.", show_default=False)],
    catalog: CatalogOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Validate an intent and its cluster profile (or a profile alone) against the language and the catalog."""
    from infra import api
    from infra.report.check import check_json, print_check

    result = api.check(path, tuple(catalog or ()))
    if as_json:
        print(json.dumps(check_json(result), indent=2, sort_keys=True))
    else:
        print_check(_console(), path, result)


@app.command()
def schema(
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Write to this file instead of stdout.",
                                                   show_default=False)] = None,
) -> None:
    """Print the JSON Schema of intent and cluster-profile files (for editors: yaml-language-server)."""
    from infra import api

    text = json.dumps(api.schema(), indent=2, sort_keys=True) + "\n"
    if output is None:
        sys.stdout.write(text)
        return
    from infra.files import write_atomic

    write_atomic(output, text)
    _console().print(f"wrote {output}")


@app.command(name="catalog")
def catalog_cmd(
    kind: Annotated[Optional[str], typer.Argument(help="models, devices, frameworks or conventions.",
                                                  show_default=False)] = None,
    name: Annotated[Optional[str], typer.Argument(help="Show one entry with its sources.",
                                                  show_default=False)] = None,
    catalog: CatalogOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List what the catalog knows (models, devices, frameworks, conventions), or show one entry with sources."""
    from infra import api
    from infra.report.catalog import catalog_json, print_catalog

    cat = api.load_catalog(tuple(catalog or ()))
    if as_json:
        print(json.dumps(catalog_json(cat, kind, name), indent=2, sort_keys=True))
    else:
        print_catalog(_console(), cat, kind, name)


def _fail(message: str, code: int) -> None:
    sys.stderr.write(message.rstrip("\n") + "\n")
    sys.exit(code)


def main(argv: list[str] | None = None) -> Any:
    """Console-script entry: run the app, turn every expected error into a message and an exit code."""
    try:
        return app(args=argv, standalone_mode=False)
    except InfraError as exc:
        if _state["debug"]:
            raise
        _fail("\n".join(f"error: {p}" for p in exc.problems), exc.exit_code)
    except typer.Abort:
        _fail("aborted", EXIT_BAD_INPUT)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.TyperException as exc:
        ctx = getattr(exc, "ctx", None)
        hint = f" — To fix: see `{ctx.command_path} --help`" if ctx is not None else ""
        _fail(f"error: {exc.format_message()}{hint}", EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except BrokenPipeError:
        sys.exit(0)


if __name__ == "__main__":
    main()
