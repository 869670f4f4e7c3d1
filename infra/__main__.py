"""`python -m infra` is the `infra` command."""

from infra.cli import run

run()
