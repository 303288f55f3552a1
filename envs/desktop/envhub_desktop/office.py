"""A LibreOffice user profile built once per process and copied into each desktop that runs LibreOffice.

LibreOffice's first start in a fresh profile spends over a second creating it (and running its
graphics render tests); with a profile made by an earlier GUI start, Calc's window comes in about
0.7 s instead of about 2 s (docs/desktop-plan.md). A profile made by `soffice --headless` does not
save that time, so the profile is made the way a user makes one: Calc opened on a desktop, left to
finish its set-up (`SETTLE_S`), then quit. It is built in a sandbox of its own that runs nothing
else, kept in a temporary host directory removed at exit, and copied into each new desktop before
LibreOffice starts there.
"""

from __future__ import annotations

import asyncio
import atexit
import shutil
import tempfile
from pathlib import Path

from envhub_desktop.actions import Keys
from envhub_desktop.desktop import STATE_DIR, Backend, Desktop

PROFILE_DIR = f"{STATE_DIR}/libreoffice"
PROFILE_URL = f"file://{PROFILE_DIR}"
OFFICE_OPTIONS = ("--norestore", "--nologo", f"-env:UserInstallation={PROFILE_URL}")
"""soffice cannot find its default profile without a passwd entry for the sandbox's uid (its start
aborts with "User installation could not be completed"), so every start names this one."""

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
    _built[backend] = target
    return target


async def install_profile(desktop: Desktop) -> None:
    """Copy the built profile into `desktop`, once, before LibreOffice first starts there."""
    if desktop.office_profile:
        return
    await desktop.sb.upload_dir(await built_profile(desktop.backend), PROFILE_DIR)
    desktop.office_profile = True
