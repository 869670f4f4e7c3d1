"""The jinja environment: packaged templates, overridden file by file from a user's directory.

Templates are rendered with StrictUndefined and their output is parsed back as YAML and checked to be one Kubernetes
object; any failure names the template file and line (a syntax error, an undefined variable, or rendered text that
is not YAML) instead of producing a broken manifest.
"""

from __future__ import annotations

import functools
import json
import traceback
from pathlib import Path
from typing import Any

import jinja2
from yaml import YAMLError

from infra.errors import InfraError, IntentError, Location, Problem
from infra.render.yamlout import load_yaml_text

PACKAGED = Path(__file__).resolve().parent.parent / "templates"


class TemplateError(InfraError):
    """A template (packaged or a user's override) cannot be rendered into a valid object."""


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _nindent(text: str, width: int) -> str:
    pad = " " * width
    return "\n" + "\n".join(pad + line if line else line for line in text.splitlines())


@functools.lru_cache(maxsize=16)
def _environment(override_dir: str | None) -> jinja2.Environment:
    """One environment per override directory: compiled templates are reused across renders, and jinja reloads a
    template whose file changed since."""
    loaders: list[jinja2.BaseLoader] = []
    if override_dir is not None:
        loaders.append(jinja2.FileSystemLoader(override_dir))
    loaders.append(jinja2.FileSystemLoader(str(PACKAGED)))
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader(loaders), undefined=jinja2.StrictUndefined, autoescape=False,
        keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
    )
    env.filters["json"] = _json
    env.filters["nindent"] = _nindent
    return env


class Templates:
    """Loads, renders and checks templates."""

    def __init__(self, override_dir: Path | None = None) -> None:
        if override_dir is not None and not Path(override_dir).is_dir():
            raise IntentError(Problem("templates directory not found", Location(str(override_dir)),
                                      "give --templates a directory holding *.yaml.j2 files named like the "
                                      "packaged ones (see infra/templates/)"))
        self.override_dir = Path(override_dir) if override_dir is not None else None
        self.env = _environment(str(self.override_dir) if self.override_dir is not None else None)

    def origin(self, name: str) -> str:
        """The file a template comes from, as the user should see it."""
        if self.override_dir is not None and (self.override_dir / name).is_file():
            return str(self.override_dir / name)
        return f"infra/templates/{name}"

    def render(self, name: str, context: dict[str, Any]) -> dict[str, Any]:
        """Render `name` and parse the result: one Kubernetes object as plain data."""
        origin = self.origin(name)
        data = self.render_data(name, context)
        if not isinstance(data, dict) or not all(k in data for k in ("apiVersion", "kind", "metadata")) \
                or not isinstance(data.get("metadata"), dict) or not data["metadata"].get("name"):
            raise TemplateError(Problem("rendered output is not one Kubernetes object (apiVersion, kind and "
                                        "metadata.name are required)", Location(origin, 1),
                                        "make the template render a single object with those fields"))
        return data

    def render_data(self, name: str, context: dict[str, Any]) -> Any:
        """Render `name` and parse the result as one YAML document (a values file, or an object)."""
        origin = self.origin(name)
        try:
            template = self.env.get_template(name)
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(Problem(f"template syntax error: {exc.message}", Location(origin, exc.lineno),
                                        "fix the template's jinja syntax")) from None
        except jinja2.TemplateNotFound as exc:
            raise TemplateError(Problem(f"template {exc.name} not found", Location(origin),
                                        "restore the packaged template, or add it to --templates DIR")) from None
        try:
            text = template.render(**context)
        except jinja2.TemplateSyntaxError as exc:  # an include with broken syntax
            raise TemplateError(Problem(f"template syntax error: {exc.message}",
                                        Location(self.origin(Path(exc.filename or name).name), exc.lineno),
                                        "fix the template's jinja syntax")) from None
        except jinja2.UndefinedError as exc:
            file, line = self._frame(exc, name)
            raise TemplateError(Problem(f"undefined variable: {exc.message}", Location(file, line),
                                        "use only the variables rendering provides (see the packaged templates)"))\
                from None
        except Exception as exc:  # noqa: BLE001 - any error raised while evaluating a user's template
            file, line = self._frame(exc, name)
            raise TemplateError(Problem(f"template error: {exc}", Location(file, line),
                                        "fix the expression on that line")) from None
        try:
            data = load_yaml_text(text)
        except YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            out_line = mark.line + 1 if mark else None
            raise TemplateError(Problem(
                f"rendered output is not valid YAML ({getattr(exc, 'problem', exc)}) at rendered line {out_line}",
                Location(origin, self._source_line(name, text, out_line)),
                "check the indentation and quoting of that template line (values go through `| json`)")) from None
        return data

    def _frame(self, exc: BaseException, name: str) -> tuple[str, int | None]:
        """The innermost template file and line of a rendering error (jinja maps its frames to template lines)."""
        for frame in reversed(traceback.extract_tb(exc.__traceback__)):
            if frame.filename.endswith(".j2"):
                return self.origin(Path(frame.filename).name), frame.lineno
        return self.origin(name), None

    def _source_line(self, name: str, text: str, out_line: int | None) -> int | None:
        """Best match of a rendered line in the template source: the line whose literal text it starts with."""
        if out_line is None:
            return None
        try:
            source = self.env.loader.get_source(self.env, name)[0]  # type: ignore[union-attr]
        except jinja2.TemplateNotFound:
            return None
        rendered = text.splitlines()
        if not 0 < out_line <= len(rendered):
            return None
        target = rendered[out_line - 1].strip()
        for n, line in enumerate(source.splitlines(), 1):
            literal = line.split("{{", 1)[0].split("{%", 1)[0].strip()
            if literal and target.startswith(literal):
                return n
        return None
