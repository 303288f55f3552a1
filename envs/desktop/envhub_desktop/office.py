"""A LibreOffice user profile built once per process and copied into each desktop that runs LibreOffice.

LibreOffice's first start in a fresh profile spends over a second creating it (and running its
graphics render tests); with a profile made by an earlier GUI start, Calc's window comes in about
0.7 s instead of about 2 s (docs/desktop.md). A profile made by `soffice --headless` does not
save that time, so the profile is made the way a user makes one: Calc opened on a desktop, left to
finish its set-up (`SETTLE_S`), then quit. It is built in a sandbox of its own that runs nothing
else, kept in a temporary host directory removed at exit, and copied into each new desktop before
LibreOffice starts there.

Macros are off: LibreOffice runs code through Basic (Tools > Macros, the Basic IDE, Alt+F11), a way
around "no terminal on this desktop". A configuration layer of its own (`LOCKDOWN_DIR`, put just below
the user's layer by `OFFICE_OPTIONS`) disables document macros (`SCRIPTING`) and the commands that
write, run or bind the user's own macros (`MACRO_COMMANDS`: LibreOffice 7.4's DisableMacrosExecution
does not stop those); its values are finalized, so neither Tools > Options nor the Expert
Configuration can undo them (both edit only the user layer). The Scripting values are written into
the profile's registrymodifications.xcu too. tests/test_tasks_calc.py proves it: a Basic macro planted
in "My Macros" and run through the real Basic Macros dialog writes its file on a profile without the
layer and nothing with it.
"""

from __future__ import annotations

import asyncio
import atexit
import shutil
import tempfile
from pathlib import Path
from xml.sax.saxutils import escape

from envhub_desktop.actions import Keys
from envhub_desktop.desktop import STATE_DIR, Backend, Desktop

PROFILE_DIR = f"{STATE_DIR}/libreoffice"
PROFILE_URL = f"file://{PROFILE_DIR}"
LOCKDOWN_DIR = f"{PROFILE_DIR}/lockdown"
"""The finalized configuration layer (an `xcsxcu` layer: its .xcu files in `data/`), inside the profile."""
SCRIPTING = {"DisableMacrosExecution": "true", "MacroSecurityLevel": "3", "SecureURL": ""}
"""org.openoffice.Office.Common/Security/Scripting: no document macro runs (LibreOffice 7.4 applies
DisableMacrosExecution to document macros only), security "very high", no trusted location."""
MACRO_COMMANDS = (
    *("BasicIDEAppear", "MacroDialog", "MacroOrganizer", "RunMacro", "ScriptOrganizer"),
    *("MacroRecorder", "MacroSecurity", "MacroSignature", "ConfigureDialog"),
)
"""The dispatch commands that write, run or bind the user's own macros ("My Macros", which 7.4 runs
whatever DisableMacrosExecution says): the Basic IDE, the Basic Macros dialog (Alt+F11), Run Macro,
the organizers, the recorder, the security dialogs, and Tools > Customize (binds a macro to a key, a
menu or an event). Disabled through org.openoffice.Office.Commands/Execute/Disabled, so their menu
entries and shortcuts do nothing."""
DEBIAN_LAYERS = (
    "xcsxcu:file:///etc/libreoffice/registry res:file:///etc/libreoffice/registry dconf:* "
    "bundledext:${${BRAND_BASE_DIR}/program/lounorc:BUNDLED_EXTENSIONS_USER}/registry/"
    "com.sun.star.comp.deployment.configuration.PackageRegistryBackend/configmgr.ini "
    "sharedext:${${BRAND_BASE_DIR}/program/lounorc:SHARED_EXTENSIONS_USER}/registry/"
    "com.sun.star.comp.deployment.configuration.PackageRegistryBackend/configmgr.ini "
    "userext:${${BRAND_BASE_DIR}/program/lounorc:UNO_USER_PACKAGES_CACHE}/registry/"
    "com.sun.star.comp.deployment.configuration.PackageRegistryBackend/configmgr.ini "
    "user:!${$BRAND_BASE_DIR/program/bootstraprc:UserInstallation}/user/registrymodifications.xcu"
)
"""CONFIGURATION_LAYERS of Debian bookworm's LibreOffice 7.4 (program/fundamentalrc), used when the
installed one cannot be read."""


def configuration_layers(fundamentalrc: Path | None = None) -> str:
    """The installed LibreOffice's configuration layers with the lockdown layer put just below the
    user's: values it finalizes cannot be changed by any layer above it."""
    if fundamentalrc is None:
        soffice = shutil.which("soffice")
        fundamentalrc = Path(soffice).resolve().parent / "fundamentalrc" if soffice else Path("/nonexistent")
    layers = DEBIAN_LAYERS
    try:
        for line in fundamentalrc.read_text().splitlines():
            if line.startswith("CONFIGURATION_LAYERS="):
                layers = line.removeprefix("CONFIGURATION_LAYERS=").strip()
    except OSError:
        pass
    words = layers.split()
    user = next((i for i, w in enumerate(words) if w.startswith("user:")), len(words))
    return " ".join([*words[:user], f"xcsxcu:file://{LOCKDOWN_DIR}", *words[user:]])


OFFICE_OPTIONS = (
    "--norestore",
    "--nologo",
    f"-env:UserInstallation={PROFILE_URL}",
    f"-env:CONFIGURATION_LAYERS={configuration_layers()}",
)
"""soffice cannot find its default profile without a passwd entry for the sandbox's uid (its start
aborts with "User installation could not be completed"), so every start names this one; and every
start reads the macro lockdown layer."""

REGISTRY = "http://openoffice.org/2001/registry"

SETTLE_S = 4.0
"""How long Calc runs before it is quit. LibreOffice finishes setting the profile up seconds after its
window shows: a profile quit at once saved 0.1-0.3 s of the next start, one quit 3 s later 1.1-1.4 s
(Calc's window in 0.58-0.88 s instead of about 1.8 s, three starts each)."""

_built: dict[Backend, Path] = {}


async def built_profile(backend: Backend = "local") -> Path:
    """The host directory holding the profile, built at the first call of this process for each
    backend (on that backend: the docker image's LibreOffice makes the docker desktops' profile)."""
    if backend in _built:
        return _built[backend]
    target = Path(tempfile.mkdtemp(prefix="envhub-desktop-libreoffice-"))
    atexit.register(shutil.rmtree, target, True)
    async with Desktop(backend=backend) as desktop:
        await desktop.launch(["soffice", "--calc", *OFFICE_OPTIONS], window="Untitled", within=120)
        await asyncio.sleep(SETTLE_S)
        await desktop.act(Keys(("ctrl", "q")))
        for _ in range(200):  # LibreOffice writes the profile's last files as it exits
            gone = await desktop.sb.exec("ls -a /tmp | grep -q OSL_PIPE", timeout=10)
            if gone.exit_code != 0:
                break
            await asyncio.sleep(0.05)
        await desktop.sb.download(PROFILE_DIR, target)
    lock_macros(target)
    _built[backend] = target
    return target


def lock_macros(profile: Path) -> None:
    """Write the finalized lockdown layer into the profile, and the same values into its user layer."""
    props = "".join(
        f'<prop oor:name="{name}" oor:finalized="true"><value>{escape(value)}</value></prop>'
        for name, value in SCRIPTING.items()
    )
    data = profile / "lockdown" / "data"
    data.mkdir(parents=True, exist_ok=True)
    (data / "macros.xcu").write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<oor:component-data xmlns:oor="{REGISTRY}" xmlns:xs="http://www.w3.org/2001/XMLSchema" '
        'oor:name="Common" oor:package="org.openoffice.Office"><node oor:name="Security">'
        f'<node oor:name="Scripting" oor:finalized="true">{props}</node></node></oor:component-data>\n'
    )
    commands = "".join(
        f'<node oor:name="{name}" oor:op="replace">'
        f'<prop oor:name="Command"><value>{name}</value></prop></node>'
        for name in MACRO_COMMANDS
    )
    (data / "commands.xcu").write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<oor:component-data xmlns:oor="{REGISTRY}" xmlns:xs="http://www.w3.org/2001/XMLSchema" '
        'oor:name="Commands" oor:package="org.openoffice.Office"><node oor:name="Execute">'
        f'<node oor:name="Disabled" oor:finalized="true">{commands}</node></node></oor:component-data>\n'
    )
    user = profile / "user" / "registrymodifications.xcu"
    text = user.read_text() if user.exists() else f'<oor:items xmlns:oor="{REGISTRY}">\n</oor:items>\n'
    items = "".join(
        '<item oor:path="/org.openoffice.Office.Common/Security/Scripting">'
        f'<prop oor:name="{name}" oor:op="fuse"><value>{escape(value)}</value></prop></item>\n'
        for name, value in SCRIPTING.items()
    )
    user.write_text(text.replace("</oor:items>", items + "</oor:items>", 1))


async def install_profile(desktop: Desktop) -> None:
    """Copy the built profile into `desktop`, once, before LibreOffice first starts there."""
    if desktop.office_profile:
        return
    await desktop.sb.upload_dir(await built_profile(desktop.backend), PROFILE_DIR)
    desktop.office_profile = True
