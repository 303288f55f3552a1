"""Commands from other distributions: the entry-point group `envhub.commands`.

A plugin names a `typer.Typer` under the command it adds (one command, or a group of them):

    [project.entry-points."envhub.commands"]
    swe = "envhub_swe.cli:app"

The rules are the registry's (`envhub.registration`): entry points are read on first use, and a
plugin's module is imported only when its command is run or listed by `--help`, so a broken plugin
breaks only its own command and says why; two distributions claiming one name are refused by name;
a first-party command whose package is not installed says what to install. The core's own commands
always win over a plugin's of the same name, so no plugin can change what `envhub list` does.
"""

from __future__ import annotations

import difflib
import importlib
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import typer
from typer import _click as click  # typer ships its own click: its commands are these classes
from typer._click.exceptions import UsageError
from typer.core import TyperGroup

from envhub.cli.output import fail
from envhub.registration import PluginImportError

ENTRY_POINT_GROUP = "envhub.commands"


@dataclass(frozen=True)
class Provider:
    """Where a first-party command comes from: its distribution and its folder in a checkout."""

    package: str
    checkout: str

    def hint(self, name: str) -> str:
        return (
            f"`envhub {name}` comes from the package {self.package!r}, which is not installed: "
            f"pip install {self.package}  (from a checkout: pip install -e {self.checkout})"
        )


KNOWN_COMMANDS = {
    "swe": Provider("envhub-swe", "envs/swe"),
    "train": Provider("envhub-trainer", "trainer"),
    "report": Provider("envhub-trainer", "trainer"),
}
"""First-party commands that live in their own distributions, for the install hint when one is absent."""


@dataclass(frozen=True)
class CommandPlugin:
    """One `envhub.commands` entry point: the command's name, what it points at, who declared it."""

    name: str
    target: str
    package: str

    @property
    def origin(self) -> str:
        return f"plugin {self.package}"


class CommandPlugins:
    """The plugin commands one `envhub` process knows: discovered once, each imported once when asked."""

    def __init__(self, entry_points: Iterable[metadata.EntryPoint] | None = None) -> None:
        self._entry_points = entry_points
        self._plugins: dict[str, list[CommandPlugin]] | None = None
        self._loaded: dict[str, click.Command] = {}

    def claims(self) -> dict[str, list[CommandPlugin]]:
        """Every command name an installed distribution declares, with each distribution claiming it."""
        if self._plugins is None:
            found = self._entry_points
            if found is None:
                found = metadata.entry_points(group=ENTRY_POINT_GROUP)
            self._plugins = {}
            for ep in found:
                package = ep.dist.name if ep.dist else "unknown distribution"
                claims = self._plugins.setdefault(ep.name, [])
                if all(c.package != package for c in claims):  # one dist seen twice on sys.path
                    claims.append(CommandPlugin(ep.name, ep.value, package))
        return self._plugins

    def names(self) -> list[str]:
        """Installed plugin commands and the known first-party ones that are not installed, by name."""
        return sorted({*self.claims(), *KNOWN_COMMANDS})

    def command(self, name: str) -> click.Command | None:
        """The command `name` runs: the plugin's own, or one that explains why it cannot run."""
        if name not in self._loaded:
            made = self._make(name)
            if made is None:
                return None
            self._loaded[name] = made
        return self._loaded[name]

    def _make(self, name: str) -> click.Command | None:
        claims = self.claims().get(name, [])
        if not claims:
            provider = KNOWN_COMMANDS.get(name)
            if provider is None:
                return None
            return _stand_in(name, "not installed: " + provider.hint(name), provider.hint(name))
        if len(claims) > 1:
            listed = "\n".join(f"  - {c.origin}: {c.name} = {c.target}" for c in claims)
            message = (
                f"the command {name!r} is provided by more than one plugin:\n{listed}\n"
                "uninstall one of them, or ask its author to rename the command"
            )
            return _stand_in(name, "claimed by more than one plugin (run it to see which)", message)
        try:
            return load(claims[0])
        except PluginImportError as exc:
            return _stand_in(name, f"broken plugin {claims[0].package} (run `envhub {name}` for why)", exc)


def load(plugin: CommandPlugin) -> click.Command:
    """Import the plugin's command; any failure becomes one error naming the plugin, with its traceback."""
    module_name, _, attr = plugin.target.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in filter(None, attr.split(".")):
            target = getattr(target, part)
        command = typer.main.get_command(target) if isinstance(target, typer.Typer) else None
    except Exception as exc:
        raise PluginImportError(
            f"command {plugin.name!r} from {plugin.origin} could not be loaded from {plugin.target!r}: "
            f"{type(exc).__name__}: {exc}\nThe plugin's traceback:\n{traceback.format_exc()}"
            "Fix or reinstall that plugin; other commands are unaffected."
        ) from exc
    if command is None:
        raise PluginImportError(
            f"command {plugin.name!r} from {plugin.origin}: {plugin.target!r} is a {type(target).__name__}; "
            "an `envhub.commands` entry point must name a typer.Typer"
        )
    command.name = plugin.name
    return command


def _stand_in(name: str, help_line: str, error: str | BaseException) -> click.Command:
    """A command that takes any arguments and only prints `error`: the help line says it cannot run."""
    app = typer.Typer(add_completion=False)

    @app.command(
        name=name,
        help=help_line,
        add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )
    def explain() -> None:
        raise fail(error if isinstance(error, BaseException) else RuntimeError(error))

    command = typer.main.get_command(app)
    command.name = name
    return command


class PluginGroup(TyperGroup):
    """The root `envhub` group: the core's commands, then each plugin's, imported only when asked for."""

    def __init__(self, *args: Any, plugins: CommandPlugins | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.plugins = plugins or shared

    def list_commands(self, ctx: click.Context) -> list[str]:
        core = super().list_commands(ctx)
        return [*core, *(name for name in self.plugins.names() if name not in core)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, cmd_name) or self.plugins.command(cmd_name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """As click's, with the did-you-mean drawn from plugin commands too."""
        try:
            return super().resolve_command(ctx, args)
        except UsageError as exc:
            close = difflib.get_close_matches(args[0], self.list_commands(ctx)) if args else []
            if close and "Did you mean" not in exc.message:
                exc.message = f"{exc.message.rstrip('.')}. Did you mean {', '.join(map(repr, close))}?"
            raise


shared = CommandPlugins()
"""The plugins of this process's installed distributions, used by `envhub.cli.app`."""
