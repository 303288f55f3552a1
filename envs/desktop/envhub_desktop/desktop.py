"""A private X11 desktop inside one sandbox: Xvfb, a window manager, and the apps a task starts.

Everything runs inside the sandbox, as the sandbox's uid, under its limits: the X server listens only on
a unix socket in the sandbox's own /tmp (no TCP; the sandbox has no network), so no other sandbox and no
host program reaches it, and an app (a terminal included) sees the same nothing-of-the-host as any
sandboxed command. Two backends: `local` (bubblewrap; the host's /usr and the DESKTOP_ETC configuration,
bound read-only) and `docker` (a container of the DESKTOP_IMAGE, sandboxes/desktop/build.sh, which holds
the apps and their configuration: nothing of the host is inside).

Why a session process: each sandbox command ends by killing whatever it left running, so the X server
and the apps run under one long-lived program of their own, a background program of the sandbox
(`Sandbox.start_background`, which the commands' clean-up spares): a shell that starts each line the
host writes to its stdin as a background program. Only the host holds that pipe. Input (xdotool) and
window queries are ordinary commands; they reach the display through the socket in the shared /tmp.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import envhub.sandbox as sandbox
from envhub.core import InfrastructureError
from envhub.sandbox import IsolationPolicy, Sandbox, SandboxError
from envhub.sandbox.base import Background
from envhub_desktop.actions import DesktopAction, Wait, commands
from envhub_desktop.stillness import settle
from envhub_desktop.xwd import xwd_to_png

DISPLAY = ":0"
STATE_DIR = "/tmp/.desktop"
"""Where the session keeps Xvfb's framebuffer file and the logs, inside the sandbox's /tmp."""
FRAMEBUFFER = f"{STATE_DIR}/Xvfb_screen0"
REMAP_AFTER_S = 3.0
"""How long an app's window may stay unmapped after its launch before it is asked to map again."""
Backend = Literal["local", "docker"]
BACKENDS: tuple[Backend, ...] = ("local", "docker")
DESKTOP_IMAGE = os.environ.get("ENVHUB_DESKTOP_IMAGE", "envhub/desktop:bookworm")
"""The docker backend's image: Debian's X11 stack and apps, built by sandboxes/desktop/build.sh."""
DESKTOP_ETC = ("/etc/fonts", "/etc/X11", "/etc/xdg/openbox", "/etc/libreoffice")
"""Host configuration the desktop's programs read, bound read-only: fontconfig's (without it no font
is found and text renders as boxes), X's keyboard maps and app defaults (xterm's), openbox's rc.xml, and
LibreOffice's sofficerc and registry (without them soffice aborts at start). /usr, fonts included, is
already bound by every local sandbox."""
FONT_CACHE = "/var/cache/fontconfig"
"""fontconfig's system cache of the fonts in /usr (the fontconfig package builds it), bound read-only
with DESKTOP_ETC: without it each program of a new desktop scans every font before its first window,
so xterm mapped its window after about 5 s (asked to map again at REMAP_AFTER_S) instead of 0.1 s, and
Mousepad after 0.9 s instead of 0.4 s."""
APP_ENV = {
    "DISPLAY": DISPLAY,
    "GSETTINGS_BACKEND": "memory",  # no dconf daemon or D-Bus in the sandbox: keep GTK settings in memory
    "NO_AT_BRIDGE": "1",  # no accessibility bus to connect to (GTK would wait for it)
    "SAL_USE_VCLPLUGIN": "gen",  # LibreOffice's own X11 widgets: its GTK plugin is not installed
    "XDG_CONFIG_HOME": f"{STATE_DIR}/config",  # GTK's settings.ini (no caret blink), out of the workdir
}


class DesktopBroken(Exception):
    """The desktop stopped working from inside: its X server or window manager is gone, or its sandbox
    refuses to start another program because the sandbox's own process limit is used up.

    Only programs in the sandbox reach those processes and that limit (the agent's, through a terminal,
    or the sandbox's OOM killer acting on the agent's memory use), so the env ends the episode as the
    agent's failure rather than as an infrastructure error to retry."""


def desktop_policy(
    *,
    memory_mb: int = 2048,
    pids: int = 512,
    cpus: float = 1.0,
    disk_mb: int = 512,
    wall_time_s: float = 60.0,
    backend: Backend = "local",
) -> IsolationPolicy:
    """The desktop's own policy: what the default policy for code lacks, and only that, for desktops only.

    More memory (LibreOffice Calc with a document peaks near 400 MiB, Xvfb's framebuffer lives in the
    scratch tmpfs and counts too), more tasks (LibreOffice alone runs ~40 threads, each counted by
    `pids`), a larger scratch area (a LibreOffice profile is ~10 MiB), and the read-only binds of
    DESKTOP_ETC and FONT_CACHE for the local backend (the docker image has its own). Network stays off;
    seccomp and every other control are the default's.
    """
    binds = (
        {path: path for path in (*DESKTOP_ETC, FONT_CACHE) if os.path.exists(path)}
        if backend == "local"
        else {}
    )
    return IsolationPolicy(
        memory_mb=memory_mb,
        pids=pids,
        cpus=cpus,
        disk_mb=disk_mb,
        wall_time_s=wall_time_s,
        ro_binds=binds,
        env=APP_ENV,
    )


def session_script(width: int, height: int) -> str:
    """The session's shell: X server, window manager, "ready", then one background program per line.

    `-noreset`: by default Xvfb resets itself when its last client leaves, so a client connecting just
    after the readiness probe (xdpyinfo) left could find no display. "ready" waits for the window
    manager to own the screen (its EWMH check window on the root): a window mapped while openbox is
    still starting can be left unmapped, and the app never shows."""
    return f"""
mkdir -p {STATE_DIR}/config/gtk-3.0
printf '[Settings]\ngtk-cursor-blink = false\n' > {STATE_DIR}/config/gtk-3.0/settings.ini
Xvfb {DISPLAY} -screen 0 {width}x{height}x24 -nolisten tcp -noreset -fbdir {STATE_DIR} \
    >{STATE_DIR}/xvfb.log 2>&1 </dev/null &
i=0
until xdpyinfo >/dev/null 2>&1; do
    i=$((i + 1)); [ $i -gt 500 ] && {{ echo "Xvfb did not start"; exit 1; }}; sleep 0.02
done
openbox --sm-disable >{STATE_DIR}/wm.log 2>&1 </dev/null &
i=0
until xprop -root _NET_SUPPORTING_WM_CHECK 2>/dev/null | grep -q "window id"; do
    i=$((i + 1)); [ $i -gt 500 ] && {{ echo "openbox did not start"; exit 1; }}; sleep 0.02
done
echo ready
while IFS= read -r line; do
    /bin/sh -c "$line" >>{STATE_DIR}/apps.log 2>&1 </dev/null &
done
"""


@dataclass
class Timings:
    """Where a desktop's start went, in seconds, for the benchmarks and reset_info."""

    sandbox: float = 0.0
    display: float = 0.0
    apps: dict[str, float] = field(default_factory=dict)


class Desktop:
    """One started desktop: `start()` it, `launch()` apps, `act()` and `screenshot()`, then `close()`."""

    def __init__(
        self,
        *,
        width: int = 1280,
        height: int = 800,
        policy: IsolationPolicy | None = None,
        start_timeout: float = 30.0,
        backend: Backend = "local",
        image: str | None = None,
    ) -> None:
        if not (320 <= width <= 3840 and 240 <= height <= 2160):
            raise ValueError(f"the screen must be 320x240 to 3840x2160 pixels, got {width}x{height}")
        if backend not in BACKENDS:
            raise ValueError(f"the desktop runs on the local or docker backend, not {backend!r}")
        self.width, self.height = width, height
        self.backend: Backend = backend
        self.image = image or DESKTOP_IMAGE
        """The docker backend's image (unused by local)."""
        self.policy = policy or desktop_policy(backend=backend)
        self.start_timeout = start_timeout
        self.sandbox: Sandbox | None = None
        self._session: Background | None = None
        self.timings = Timings()
        self.remaps = 0
        self.settled_frame: bytes | None = None
        """The frame the last `wait_still` settled on."""
        self.office_profile = False
        """Whether LibreOffice's prepared profile is in this desktop (`envhub_desktop.office`)."""
        """Launches whose window had to be mapped again (see `wait_for_window`)."""

    async def start(self) -> Desktop:
        """Open the sandbox and bring up the display and the window manager (no app yet)."""
        begun = time.monotonic()
        if self.backend == "docker":
            try:
                self.sandbox = await sandbox.open("docker", policy=self.policy, image=self.image)
            except sandbox.SandboxUnavailable as exc:
                raise sandbox.SandboxUnavailable(
                    f"the desktop's docker backend needs the image {self.image}: build it with "
                    f"`sudo sandboxes/desktop/build.sh {self.image}` (sandboxes/ci-setup.sh does it); {exc}"
                ) from exc
        else:
            self.sandbox = await sandbox.open("local", policy=self.policy, spare=False)
        self.timings.sandbox = time.monotonic() - begun
        try:
            self._session = await self.sandbox.start_background(
                ["/bin/sh", "-c", session_script(self.width, self.height)], env=APP_ENV
            )
            try:
                line = await asyncio.wait_for(self._session.stdout.readline(), self.start_timeout)
            except TimeoutError:
                line = b""
            if line.strip() != b"ready":
                log = await self._log("xvfb.log") + await self._log("wm.log")
                with contextlib.suppress(TimeoutError):
                    log += (await asyncio.wait_for(self._session.stderr.read(2000), 2)).decode(
                        errors="replace"
                    )
                raise InfrastructureError(
                    f"the desktop's display did not come up in {self.start_timeout:g} s "
                    f"(session said {line.decode(errors='replace').strip()!r}; Xvfb's log: {log!r}); "
                    + (
                        f"is {self.image} built from sandboxes/desktop/build.sh?"
                        if self.backend == "docker"
                        else "is the xvfb package installed (sandboxes/ci-setup.sh)?"
                    )
                )
        except BaseException:
            await self.close()
            raise
        self.timings.display = time.monotonic() - begun - self.timings.sandbox
        return self

    @property
    def sb(self) -> Sandbox:
        if self.sandbox is None or self.sandbox.closed:
            raise InfrastructureError("the desktop is not started (or was closed): start() it first")
        return self.sandbox

    async def launch(self, argv: Sequence[str], *, window: str, within: float | None = None) -> float:
        """Start an app on the desktop and wait until a visible window whose title matches the regex
        `window` is mapped (`within` seconds at most); returns the seconds it took."""
        begun = time.monotonic()
        await self.run(argv)
        await self.wait_for_window(window, within=within or self.start_timeout)
        took = time.monotonic() - begun
        self.timings.apps[argv[0]] = took
        return took

    async def run(self, argv: Sequence[str]) -> None:
        """Start a program on the desktop without waiting for anything (a resident LibreOffice, say)."""
        if self._session is None or self._session.returncode is not None:
            raise InfrastructureError("the desktop's session has ended; start a new desktop")
        self._session.stdin.write(shlex.join(argv).encode() + b"\n")
        await self._session.stdin.drain()

    async def wait_for_window(self, window: str, *, within: float) -> None:
        """Wait until a visible window's title matches `window`.

        About 1 launch in 40 under load, the app's window exists but openbox never manages it: it stays
        unmapped, with no WM_STATE (seen with Mousepad; the cause is not found). A window that is still
        unmapped `REMAP_AFTER_S` after the launch is asked to map again (`xdotool windowmap`), which
        openbox then handles; `remaps` counts it, so the figures can say how often it happens.
        """
        begun = time.monotonic()
        deadline = begun + within
        remap_at = begun + REMAP_AFTER_S
        while True:
            r = await self.sb.exec(["xdotool", "search", "--onlyvisible", "--name", window], timeout=10)
            if r.exit_code == 0 and r.stdout.strip():
                return
            if time.monotonic() > remap_at:
                remap_at = time.monotonic() + REMAP_AFTER_S
                found = await self.sb.exec(
                    ["xdotool", "search", "--name", window, "windowmap", "%@"], timeout=10
                )
                if found.exit_code == 0:
                    self.remaps += 1
            if time.monotonic() > deadline:
                log = await self._log("apps.log")
                every = await self.sb.exec(
                    "for w in $(xdotool search --name .); do xdotool getwindowname $w; done", timeout=10
                )
                log += f"; windows, mapped or not: {every.stdout.strip()!r}"
                raise InfrastructureError(
                    f"no window titled like {window!r} appeared in {within:g} s; the apps' log ends: {log!r}"
                )
            await asyncio.sleep(0.05)

    async def act(self, action: DesktopAction) -> None:
        """Do one action; xdotool's complaints (a key name it does not know) come back as ValueError."""
        if isinstance(action, Wait):
            await asyncio.sleep(action.seconds)
            return
        for argv in commands(action):
            r = await self._exec(argv, limit=30)
            if r.exit_code != 0:
                raise ValueError(f"{action.describe()} failed: {r.stderr.strip() or f'exit {r.exit_code}'}")

    async def wait_still(self, *, quiet: float = 0.5, within: float = 10.0) -> bool:
        """Wait until nothing but a blinking caret has changed on the screen for `quiet` seconds
        (`within` at most); False if it kept changing. An app's window is mapped before it is painted
        (LibreOffice's menus and cells come a moment later), so the first observation waits for this
        rather than a fixed pause. The frame it settled on (the caret drawn, when one blinks: see
        `envhub_desktop.stillness`) is kept for `screenshot(settled=True)`."""

        async def read() -> bytes:
            try:
                return await self.sb.read_file(FRAMEBUFFER)
            except FileNotFoundError:
                raise DesktopBroken("the X server (Xvfb) is gone: its framebuffer file was removed") from None

        settled = await settle(read, quiet=quiet, within=within)
        self.settled_frame = settled.frame
        return settled.still

    async def screenshot(self, *, settled: bool = False) -> bytes:
        """The screen as PNG bytes, read from Xvfb's framebuffer file on the host side; with `settled`,
        the frame the last `wait_still` settled on (what a reset shows first)."""
        if settled and self.settled_frame is not None:
            return await asyncio.to_thread(xwd_to_png, self.settled_frame)
        try:
            data = await self.sb.read_file(FRAMEBUFFER)
        except FileNotFoundError:
            raise DesktopBroken("the X server (Xvfb) is gone: its framebuffer file was removed") from None
        return await asyncio.to_thread(xwd_to_png, data)

    async def windows(self) -> str:
        """The visible windows' titles, the focused one marked: the text half of an observation.

        The same command first checks that the X server answers and the window manager's check window
        (`_NET_SUPPORTING_WM_CHECK`) still exists, so a step pays no extra command for it; DesktopBroken
        when either is gone or the command cannot run."""
        script = (
            "xdpyinfo >/dev/null 2>&1 || { echo '!the X server (Xvfb) is gone'; exit 0; }; "
            "wm=$(xprop -root _NET_SUPPORTING_WM_CHECK 2>/dev/null); "
            'xwininfo -id "${wm##* }" >/dev/null 2>&1 || '
            '{ echo "!the window manager (openbox) is gone"; exit 0; }; '
            "echo ok; "
            "active=$(xdotool getactivewindow 2>/dev/null); "
            "for w in $(xdotool search --onlyvisible --name . 2>/dev/null); do "
            'name=$(xdotool getwindowname "$w"); [ -n "$name" ] || continue; '
            'eval "$(xdotool getwindowgeometry --shell "$w")"; '
            'mark=" "; [ "$w" = "$active" ] && mark="*"; '
            'echo "$mark $name @ ${X},${Y} ${WIDTH}x${HEIGHT}"; done'
        )
        r = await self._exec(script, limit=10)
        first, _, listing = r.stdout.partition("\n")
        if first.startswith("!"):
            raise DesktopBroken(first[1:])
        if first != "ok":
            raise DesktopBroken(
                "the desktop's window list could not be made "
                f"({'timed out' if r.timed_out else r.exit_code}: {r.stderr.strip()[-300:]!r}); its "
                f"programs may have used up the sandbox's process limit (pids={self.policy.pids})"
            )
        return listing.strip()

    async def _exec(self, argv: str | list[str], *, limit: float) -> sandbox.ExecResult:
        """A command on the desktop's sandbox. A refusal to start it for EAGAIN while the sandbox is open
        is the sandbox's own process limit used up (each sandbox has a uid and a pids cgroup of its
        own): DesktopBroken, not the infrastructure error a sandbox failure is."""
        try:
            return await self.sb.exec(argv, timeout=limit)
        except SandboxError as exc:
            if os.strerror(errno.EAGAIN) not in str(exc):
                raise
            raise DesktopBroken(
                f"no program can start in the desktop's sandbox: its process limit (pids={self.policy.pids}) "
                f"is used up by the programs running in it ({exc})"
            ) from exc

    async def _log(self, name: str) -> str:
        with contextlib.suppress(Exception):
            return (await self.sb.read_file(f"{STATE_DIR}/{name}")).decode(errors="replace")[-800:]
        return ""

    async def close(self) -> None:
        """Close the sandbox: the session, the display and every app go with its namespaces."""
        session, self._session = self._session, None
        if session is not None:
            session.stdin.close()
        if self.sandbox is not None:
            await self.sandbox.close()

    async def __aenter__(self) -> Desktop:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
