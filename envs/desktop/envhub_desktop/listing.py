"""This package's entry in the hub's index (registry.yaml, written from it by
`python -m envhub.registry_yaml --write`): what each of its ids is, and which sandbox it runs its code in."""

from envhub.index import Catalog, EnvCard

CATALOG = Catalog(
    envs={
        "desktop": EnvCard(
            description=(
                "Computer use on a private X11 desktop (Xvfb, openbox; Mousepad, LibreOffice Calc, Writer, "
                "xterm, PCManFM) in a local or docker sandbox: screenshots in, pointer/key/pyautogui actions "
                "out, graded by the files and folders the apps leave."
            ),
            default_sandbox="local",
            data_source="procedural (seeded) files",
            tags=["computer-use", "desktop", "multimodal", "tool-use", "multi-turn"],
        ),
        "desktop-osworld": EnvCard(
            description=(
                "The user's own tasks in OSWorld's JSON format (tasks=<file or folder>) on the same desktop: "
                "local set-up files, open/launch of the desktop's apps, a subset of OSWorld's file "
                "evaluators (exact_match, check_include_exclude, check_list, compare_text_file, compare_csv, "
                "check_csv, compare_table)."
            ),
            default_sandbox="local",
            data_source="the user's OSWorld-style task files",
            tags=["computer-use", "desktop", "multimodal", "tool-use", "multi-turn", "osworld"],
        ),
        **{
            f"desktop-{family}": EnvCard(
                description=f"The desktop's {app} tasks alone (see `desktop`).",
                default_sandbox="local",
                data_source="procedural (seeded) files",
                tags=["computer-use", "desktop", "multimodal", "tool-use", "multi-turn"],
            )
            for family, app in (
                ("editor", "text-editor (Mousepad)"),
                ("calc", "spreadsheet (LibreOffice Calc)"),
                ("terminal", "terminal (xterm)"),
                ("files", "file-manager (PCManFM)"),
                ("writer", "word-processor (LibreOffice Writer)"),
            )
        },
    },
)
