"""envhub's test-process guard: loaded as `sitecustomize` into every graded test process, before any
repository code runs, from a read-only folder the graded code cannot write.

Why: code imported by the tests runs inside the test runner and can rewrite how results are reported.
The guard judges by what such code does, never by what it looks like:

- a PEP 578 audit hook (it cannot be removed) records the events a tamperer needs, whenever the
  code responsible is a file the submission changed or added: frame introspection, tracing and
  profiling hooks, `gc` referrer walks, `ctypes`, code and function objects built or swapped, reads
  of the test files and of /proc, import hooks installed by the submission;
- snapshots of the runner's reporting entry points (pytest, pluggy, unittest, django's and sympy's
  runners, builtins) and of the tests' own functions are compared at exit, so a replaced reporter or a
  swapped test function is seen whoever replaced it.

Every line goes to a report file opened at start-up, signed with a key read from a file the guard
deletes at once; the grader trusts the log only when the report holds a signed start, no event and a
signed end whose count matches. Code that hides events (closing, truncating or redirecting the report,
exiting before the end) breaks that chain and voids the grade by itself.

This file runs in the test environment's own interpreter (Python 3.6 and newer), so it uses nothing
newer than 3.6 and only the standard library. It never raises: a broken guard must not break a run.
"""

import contextlib
import os
import sys

# The guard is built by the factories below, one job each: each returns closures over what it is given,
# and `_install` wires them together; all of them are deleted after. So what the guard runs looks up no
# name in this module's namespace at run time (the graded code could rebind one there) but `os` and
# `sys`: each factory imports the modules its closures use, and a closure reaches the others through its
# own cells, as when the guard was one function.


def _settings():
    """The guard's settings from the file `ENVHUB_GUARD` names (read once, then deleted) and the report
    opened for appending; None, and no guard, without them."""
    import json
    import threading

    config_path = os.environ.pop("ENVHUB_GUARD", None)
    if not config_path:
        return None
    try:
        with open(config_path) as handle:
            config = json.load(handle)
        os.unlink(config_path)
    except (OSError, ValueError):
        return None
    key = bytes.fromhex(config["key"])
    root = config["root"]
    submission = frozenset(os.path.join(root, path) for path in config["submission"])
    changed = {  # the lines each submitted file had added or changed; None: all of them (a new file)
        os.path.join(root, path): None if lines is None else frozenset(lines)
        for path, lines in (config.get("lines") or {}).items()
    }
    tests = frozenset(os.path.join(root, path) for path in config["tests"])
    runner_in_repo = bool(config.get("runner_in_repo"))
    try:
        fd = os.open(config["report"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    except OSError:
        return None
    return {
        "config": config,
        "key": key,
        "root": root,
        "submission": submission,
        "changed": changed,
        "tests": tests,
        "runner_in_repo": runner_in_repo,
        "fd": fd,
        "report_stat": os.fstat(fd),
        "pid": os.getpid(),
        "state": {"seq": {}, "events": 0, "busy": set(), "seen": set(), "snapshots": {}, "armed": False},
        "codes": set(),  # code objects the submission ran through exec: theirs, whatever file name they claim
        "stdlib": tuple(
            p for p in {os.path.dirname(os.__file__), os.path.dirname(threading.__file__)} if p
        ),  # the standard library's folder (site-packages below it are not stdlib)
        "site_dirs": tuple(p for p in sys.path if p.endswith(("site-packages", "dist-packages"))),
    }


def _reporter(guard):
    """`write` appends a signed line to the report; `record` counts and writes one event."""
    import hashlib
    import hmac
    import json

    key, fd, report_stat, state = guard["key"], guard["fd"], guard["report_stat"], guard["state"]

    def write(kind, text):
        me = os.getpid()
        seq = state["seq"].get(me, 0)
        state["seq"][me] = seq + 1
        body = json.dumps({"pid": me, "seq": seq, "kind": kind, "text": text[:2000]}, sort_keys=True)
        mac = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
        try:
            same = os.fstat(fd)
            if (same.st_dev, same.st_ino) != (report_stat.st_dev, report_stat.st_ino):
                state["events"] += 1  # the report was swapped: the end line will say so
                return
            os.write(fd, (mac + " " + body + "\n").encode())
        except OSError:
            state["events"] += 1

    def record(event, detail, frame):
        where = f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "?"
        state["events"] += 1
        write("event", f"{event} {detail} (from {where})")

    return write, record


def _judge(guard):
    """Who is responsible for what a frame does: the standard library, the repository, or the submission
    (the lines it wrote, and the code it ran through exec)."""
    root, submission, changed, tests = guard["root"], guard["submission"], guard["changed"], guard["tests"]
    codes, stdlib, site_dirs = guard["codes"], guard["stdlib"], guard["site_dirs"]

    def is_stdlib(filename):
        return filename.startswith(stdlib) and not filename.startswith(site_dirs)

    def absolute(filename):
        return filename if os.path.isabs(filename) else os.path.join(root, filename)

    def frames(start):
        frame = start
        while frame is not None:
            yield frame
            frame = frame.f_back

    def owner(start):
        """The nearest frame on the stack that is not the standard library's: who asked for this."""
        for frame in frames(start):
            name = frame.f_code.co_filename
            if frame.f_code in codes or (not is_stdlib(name) and not name.startswith("<frozen")):
                return frame
        return None

    def submitted(frame):
        """Whether the submission wrote the line this frame is at: a submitted file's untouched lines
        are the repository's own code."""
        if frame is None:
            return False
        if frame.f_code in codes:
            return True
        path = absolute(frame.f_code.co_filename)
        if path not in submission:
            return False
        lines = changed.get(path)
        return lines is None or frame.f_lineno in lines

    def any_submitted(start):
        for frame in frames(start):
            if submitted(frame):
                return frame
        return None

    def adopt(code):
        """Code the submission runs through exec is the submission's, and so is every function in it."""
        todo = [code]
        while todo:
            item = todo.pop()
            if item not in codes:
                codes.add(item)
                todo.extend(c for c in item.co_consts if isinstance(c, type(item)))

    def disguised(filename):
        """A file name that would make code pass for the standard library's, an installed package's,
        the runner's or a test file's."""
        if not isinstance(filename, str) or filename.startswith("<"):
            return False
        path = os.path.abspath(absolute(filename))
        return path in tests or path.startswith(stdlib + site_dirs)

    return {
        "absolute": absolute,
        "owner": owner,
        "submitted": submitted,
        "any_submitted": any_submitted,
        "adopt": adopt,
        "disguised": disguised,
        "frames": frames,
        "is_stdlib": is_stdlib,
    }


def _metadata(frames, is_stdlib):
    """`metadata_only`: whether a frame was asked for only to name a module or a log record's origin."""
    # Standard-library callers that look at a frame only to name a module (namedtuple, enum, typing)
    # or a log record's origin: they hand no frame back to their caller.
    metadata_callers = {"namedtuple", "_caller", "findCaller", "currentframe", "_make_nmtuple"}
    metadata_files = ("collections", "enum.py", "typing.py", "logging")

    def metadata_only(caller):
        """The frame was asked for by one of those standard-library callers, on behalf of its caller."""
        for frame in frames(caller):
            name = frame.f_code.co_filename
            if not is_stdlib(name):
                return False
            if any(part in name for part in metadata_files) and (
                frame.f_code.co_name in metadata_callers or name.endswith("enum.py")
            ):
                return True
        return False

    return metadata_only


def _runner():
    """`is_runner`: whether a module is the test runner's (or builtins), whose entry points report the
    results."""
    runner_prefixes = (
        "_pytest", "pytest", "pluggy", "unittest", "django.test",
        "sympy.testing.runtests", "sympy.utilities.runtests",
    )  # fmt: skip

    def is_runner(name):
        return name in ("builtins",) or any(
            name == prefix or name.startswith(prefix + ".") for prefix in runner_prefixes
        )

    return is_runner


def _snapshots(guard, absolute, is_runner):
    """`take_snapshots` snapshots the runner's entry points and the tests' functions as their modules
    finish importing; `callables_of` lists what a snapshot holds of a module."""
    tests, state = guard["tests"], guard["state"]

    def callables_of(module):
        found = {}
        for attr, value in list(vars(module).items()):
            if callable(value) or isinstance(value, (property, staticmethod, classmethod)):
                found[attr] = value  # the objects themselves, compared with `is` (id() is audited)
                if isinstance(value, type) and getattr(value, "__module__", None) == module.__name__:
                    for name, member in list(vars(value).items()):  # code, not data the runner counts
                        if callable(member) or isinstance(member, (property, staticmethod, classmethod)):
                            found[f"{attr}.{name}"] = member
        return found

    def initialized(module):
        spec = getattr(module, "__spec__", None)
        return spec is None or not getattr(spec, "_initializing", False)

    def test_module(module):
        name = getattr(module, "__file__", None)
        return isinstance(name, str) and absolute(name) in tests

    examined = set()  # modules not watched, or watched and snapshotted: never looked at again

    def take_snapshots():
        if len(sys.modules) == state.get("modules") and not state.get("pending"):
            return  # nothing imported since the last look
        state["modules"], state["pending"] = len(sys.modules), False
        for name, module in list(sys.modules.items()):
            if name in examined:
                continue
            if module is None or not (is_runner(name) or test_module(module)):
                examined.add(name)
            elif not initialized(module):
                state["pending"] = True
            else:
                examined.add(name)
                try:
                    state["snapshots"][name] = (module, callables_of(module))
                except Exception:  # a module whose attributes cannot be listed is not watched
                    state["snapshots"][name] = (module, {})

    return take_snapshots, callables_of


def _changes(guard, absolute, callables_of):
    """`check_snapshots`: what changed since its snapshot, but for an installed plugin's patch."""
    root, submission, state, site_dirs = (
        guard["root"],
        guard["submission"],
        guard["state"],
        guard["site_dirs"],
    )

    def check_snapshots():
        changed = []
        for name, (module, before) in sorted(state["snapshots"].items()):
            if sys.modules.get(name) is not module and name in sys.modules:
                changed.append(f"{name} (the module was replaced in sys.modules)")
                continue
            try:
                after = callables_of(module)
            except Exception:
                continue
            for attr, value in before.items():
                if after.get(attr, value) is not value and not plugin_patch(module, attr):
                    changed.append(f"{name}.{attr}")
        return changed

    def code_of(value):
        for attr in ("__func__", "fget", "func"):
            value = getattr(value, attr, value)
        return getattr(value, "__code__", None)

    def plugin_patch(module, attr):
        """A runner entry point replaced by an installed plugin (hypothesis bans `@given` fixtures this
        way): allowed when the new code lives in an installed package that is not the runner itself."""
        value = module
        for part in attr.split("."):
            value = vars(value).get(part) if hasattr(value, "__dict__") else None
        code = code_of(value)
        if code is None:
            return False
        name = absolute(code.co_filename)
        if name in submission or name.startswith(root + os.sep) or not name.startswith(site_dirs):
            return False
        runners = tuple(
            os.path.dirname(sys.modules[n].__file__) + os.sep
            for n in ("_pytest", "pluggy", "unittest", "django", "sympy")
            if isinstance(getattr(sys.modules.get(n), "__file__", None), str)
        )
        return not name.startswith(runners)

    return check_snapshots


def _import_hooks(guard, absolute, is_runner, record):
    """`import_hooks` records each import hook the submission installed (or builtins.__import__ it
    replaced), once."""
    submission, runner_in_repo, state = guard["submission"], guard["runner_in_repo"], guard["state"]

    def import_hooks(caller):
        for hook in list(sys.meta_path) + list(sys.path_hooks):
            if id(hook) in state["seen"]:
                continue
            state["seen"].add(id(hook))
            code = getattr(hook, "__code__", None)
            name = getattr(type(hook), "__module__", "") or ""
            if runner_in_repo and is_runner(name):
                continue  # the repository is the runner: pytest's own assertion rewriter, say
            module = sys.modules.get(name)
            files = [getattr(code, "co_filename", ""), getattr(module, "__file__", "") or ""]
            if any(absolute(f) in submission for f in files if f):
                record("import-hook", f"an import hook defined by the submission: {hook!r}", caller)
        builtin_import = sys.modules["builtins"].__import__
        if id(builtin_import) not in state["seen"]:
            state["seen"].add(id(builtin_import))
            code = getattr(builtin_import, "__code__", None)
            if code is not None and absolute(code.co_filename) in submission:
                record("import-hook", "builtins.__import__ replaced by the submission", caller)

    return import_hooks


def _event_judge(guard, judge, record):
    """`judge_event`: what an event the guard watches means, and whom it is recorded against."""
    tests, state = guard["tests"], guard["state"]
    absolute, owner, submitted = judge["absolute"], judge["owner"], judge["submitted"]
    any_submitted, adopt, disguised = judge["any_submitted"], judge["adopt"], judge["disguised"]
    metadata_only = judge["metadata_only"]

    introspection = {
        "sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile", "gc.get_referrers",
        "gc.get_referents", "gc.get_objects", "sys.addaudithook", "code.__new__", "function.__new__",
        "sys.monitoring.register_callback", "sys._getframemodulename",
    }  # fmt: skip
    frame_attrs = {"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"}
    spawns = {
        "subprocess.Popen", "os.system", "os.posix_spawn", "os.exec", "os.fork", "os.forkpty", "os.spawn",
        "pty.spawn", "_posixsubprocess.fork_exec",
    }  # fmt: skip

    def judge_event(event, args, caller):
        if event in introspection:
            if event == "sys._getframe" and metadata_only(caller):
                return
            responsible = owner(caller)
            if submitted(responsible):
                record(event, "", responsible)
            elif responsible is None and state["armed"]:
                record(event, "from a thread or callback with only the standard library on its stack", caller)
        elif event == "exec" and args and hasattr(args[0], "co_consts"):
            responsible = owner(caller)
            if submitted(responsible) or (responsible is None and state["armed"]):
                adopt(args[0])
        elif event in spawns:
            responsible = owner(caller)
            if submitted(responsible):
                record(
                    event, "a process started by the submission, where the guard cannot follow", responsible
                )
        elif event == "object.__getattr__" and len(args) == 2 and args[1] == "__code__":
            globals_ = getattr(args[0], "__globals__", None)
            path = globals_.get("__file__") if isinstance(globals_, dict) else None
            if isinstance(path, str) and os.path.abspath(absolute(path)) in tests:
                responsible = owner(caller)
                if submitted(responsible):
                    record(event, "the compiled code of a test function read", responsible)
        elif event.startswith("ctypes."):
            responsible = owner(caller)
            if submitted(responsible):
                record(event, "", responsible)
        elif event == "object.__getattr__" and len(args) == 2 and args[1] in frame_attrs:
            responsible = owner(caller)
            got = getattr(args[0], args[1], None)
            if submitted(responsible) and got is responsible:
                record(event, f"its own frame through {args[1]}, to climb to its callers", responsible)
        elif event == "object.__setattr__" and len(args) >= 2 and args[1] == "__code__":
            responsible = owner(caller)
            if submitted(responsible):
                record(event, "a function's code replaced", responsible)
        elif event == "open" and args and isinstance(args[0], (str, bytes)):
            path = args[0] if isinstance(args[0], str) else args[0].decode(errors="replace")
            path = os.path.abspath(absolute(path))
            if path in tests or path.startswith("/proc/"):
                responsible = any_submitted(caller)
                if responsible is not None:
                    record(event, path, responsible)
        elif event == "compile" and len(args) >= 2 and disguised(args[1]):
            responsible = any_submitted(caller)
            if responsible is not None:
                record(event, "code compiled under the name of " + args[1], responsible)

    return judge_event


def _auditor(guard, judge, record, take_snapshots, import_hooks, judge_event):
    """The audit hook: snapshots and import hooks at each import, the report kept whole, the first
    import of a submitted file noted; the rest of the events go to `judge_event`."""
    import threading

    config, fd = guard["config"], guard["fd"]
    runner_in_repo, state, submission = guard["runner_in_repo"], guard["state"], guard["submission"]
    absolute, owner = judge["absolute"], judge["owner"]

    def hook(event, args):
        me = threading.get_ident()
        if me in state["busy"]:
            return
        state["busy"].add(me)
        try:
            audit(event, args)
        except Exception:
            pass
        finally:
            state["busy"].discard(me)

    def audit(event, args):
        if event == "import":
            caller = sys._getframe(2)
            take_snapshots()
            import_hooks(caller)
            return
        if event == "os.truncate" and args and (args[0] == fd or args[0] == config["report"]):
            record(event, "of the guard's report", owner(sys._getframe(2)))
            raise PermissionError("envhub: the guard's report cannot be truncated")
        if event == "open" and not state["armed"] and args and isinstance(args[0], str):
            state["armed"] = os.path.abspath(absolute(args[0])) in submission  # its first import
        if runner_in_repo and event not in ("ctypes.dlopen", "gc.get_referrers", "gc.get_objects"):
            return  # the repository is the runner: its own code does all of the below legitimately
        caller = sys._getframe(2)  # the frame that raised the event
        judge_event(event, args, caller)

    return hook


def _ender(guard, write, take_snapshots, check_snapshots):
    """The exit handler: anything changed since its snapshot is an event, then the signed end line with
    the count of events (run early, or from another thread, it is itself an event and waits)."""
    import atexit
    import json
    import threading

    pid, state = guard["pid"], guard["state"]

    def check_hooks():
        found = []
        for name in ("_trace_hook", "_profile_hook"):
            value = getattr(threading, name, None)
            if value is not None:
                found.append(f"threading.{name} is set")
        if sys.gettrace() is not None or sys.getprofile() is not None:
            found.append("a trace or profile function is set at exit")
        return found

    def end():
        if os.getpid() != pid:
            return
        state["busy"].add(threading.get_ident())
        try:  # at the interpreter's exit no Python frame is left below, and it is the main thread's
            early = sys._getframe(1)
        except ValueError:
            early = None
        if early is not None or threading.current_thread() is not threading.main_thread():
            state["events"] += 1
            write(
                "event",
                "the exit handlers were run before the exit (from {})".format(
                    getattr(getattr(early, "f_code", None), "co_filename", "another thread")
                ),
            )
            atexit.register(end)
            state["busy"].discard(threading.get_ident())
            return
        take_snapshots()
        problems = check_snapshots() + check_hooks()
        for problem in problems:
            state["events"] += 1
            write("event", "changed at exit: " + problem)
        write("end", json.dumps({"events": state["events"]}))

    return end


def _install(
    settings,
    reporter,
    judge_of,
    metadata,
    runner,
    snapshots_of,
    changes,
    import_hooks_of,
    event_judge,
    auditor,
    ender,
):
    """Wire the factories' closures into the guard and start it (the factories are passed in, as they
    are deleted from the module right after)."""
    import atexit
    import hashlib  # noqa: F401  (imported up front, guard or not, as before the factories)
    import hmac  # noqa: F401
    import json
    import threading  # noqa: F401

    guard = settings()
    if guard is None:
        return
    write, record = reporter(guard)
    judge = judge_of(guard)
    judge["metadata_only"] = metadata(judge["frames"], judge["is_stdlib"])
    is_runner = runner()
    take_snapshots, callables_of = snapshots_of(guard, judge["absolute"], is_runner)
    check_snapshots = changes(guard, judge["absolute"], callables_of)
    import_hooks = import_hooks_of(guard, judge["absolute"], is_runner, record)
    judge_event = event_judge(guard, judge, record)
    hook = auditor(guard, judge, record, take_snapshots, import_hooks, judge_event)
    end = ender(guard, write, take_snapshots, check_snapshots)

    class Snapshots:
        """Before Python 3.8 there is no audit hook: a finder that answers nothing, first on the
        meta path, takes the snapshots as modules are imported (removable, unlike a hook)."""

        def find_spec(self, *args, **kwargs):
            take_snapshots()

        def find_module(self, *args, **kwargs):
            take_snapshots()

    write("start", json.dumps({"python": sys.version.split()[0], "audit": hasattr(sys, "addaudithook")}))
    atexit.register(end)
    if hasattr(sys, "addaudithook"):
        sys.addaudithook(hook)
    else:
        sys.meta_path.insert(0, Snapshots())


_install(
    _settings,
    _reporter,
    _judge,
    _metadata,
    _runner,
    _snapshots,
    _changes,
    _import_hooks,
    _event_judge,
    _auditor,
    _ender,
)
del (
    _install,
    _settings,
    _reporter,
    _judge,
    _metadata,
    _runner,
    _snapshots,
    _changes,
    _import_hooks,
    _event_judge,
)
del _auditor, _ender


def _chain():
    """Run the environment's own sitecustomize, if it has one, as Python would have without us."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


with contextlib.suppress(Exception):
    _chain()
del _chain
