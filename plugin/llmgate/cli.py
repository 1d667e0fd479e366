"""The ``llmgate`` command: one subcommand per tool (``llmgate --help`` lists them,
``llmgate COMMAND --help`` tells each one's arguments).  ``python -m llmgate`` is the same.

Each tool's code stays in the module of its layer, which gives ``add_arguments(parser)`` and
``run(args) -> int`` (the exit status); this module only builds the subcommands, and imports a
tool's module only when that subcommand runs, so ``llmgate --help`` stays fast.  A usage error
exits 2 with one line on stderr; a tool that finds one after parsing raises
``argparse.ArgumentError(None, message)`` and gets the same line.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

# subcommand: (module of its layer, one line of help)
COMMANDS: dict[str, tuple[str, str]] = {
    "tinymodel": ("llmgate.models.tinymodel", "make the embedded default model locally (no download) and print its folder"),
    "install": ("llmgate.tools.install", "build llama.cpp's llama-server and llama-quantize (cached)"),
    "strays": ("llmgate.process.strays", "stop engine servers that an earlier run left behind"),
    "history": ("llmgate.report.trends", "each metric over gate runs, and the run where it stepped beyond its noise"),
    "reference": ("llmgate.report.reference", "published reference figures beside a run's own"),
    "merge": ("llmgate.report.merge", "one report from the reports of a sharded gate (--llmgate-shard K/N)"),
    "sensitivity": ("llmgate.report.sensitivity", "what a stored baseline can see: noise, MDE and the boots a side for a target"),
    "bisect": ("llmgate.levers.bisection", "the first engine environment whose metric regressed against its predecessor"),
    "migrate": ("llmgate.store.keys", "give stored baselines today's keys and portable fingerprints"),
    "venvs": ("llmgate.tools.venvs", "install (or find) cached engine virtualenvs and print their interpreters"),
}


class Parser(argparse.ArgumentParser):
    """argparse's parser whose usage error is one line: what is wrong, and where the help is."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def parser(command: str | None = None) -> Parser:
    """The ``llmgate`` parser, with the arguments of ``command`` (its module imported) when given."""
    top = Parser(prog="llmgate", description="llmgate's tools (the gate itself runs under pytest: `pytest -m engine`)")
    sub = top.add_subparsers(dest="command", metavar="COMMAND", required=True, title="commands")
    for name, (module_name, line) in COMMANDS.items():
        p = sub.add_parser(name, help=line, description=line)
        if name == command:
            module = importlib.import_module(module_name)
            module.add_arguments(p)
            p.set_defaults(_run=module.run, _parser=p)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    # the subcommand is the first word that is not an option (the top level has no option with a value)
    command = next((a for a in args_in if not a.startswith("-")), None)
    args = parser(command if command in COMMANDS else None).parse_args(args_in)
    try:
        return int(args._run(args))
    except argparse.ArgumentError as e:
        args._parser.error(str(e))
