"""Ocular's start-up hook for ``python -m ocular --follow``: it makes a child Python process trace itself.

``--follow`` puts this directory first on the children's PYTHONPATH, so ``site`` imports this module at
start-up in every Python process the program starts (subprocess, multiprocessing spawn/forkserver).
It starts tracing from the settings in the OCULAR_FOLLOW environment variable, takes itself off
sys.path, and then imports the ``sitecustomize`` this one hides, if there is one.  It never raises:
a child that cannot be traced (an older Python, no Ocular for its version) runs untraced, and the
reason goes to the session's log, which the command line reports at the end.  Its syntax is kept
valid for any Python (no f-strings), so that even an old interpreter started by the program runs it.
"""


def _ocular_follow_boot():
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if not p or os.path.abspath(p) != here]
    try:
        if os.environ.get("OCULAR_FOLLOW"):
            if sys.version_info >= (3, 12):
                try:
                    import ocular._follow as follow
                except ImportError:
                    root = os.path.dirname(os.path.dirname(here))  # the directory that holds ocular/
                    sys.path.append(root)
                    try:
                        import ocular._follow as follow
                    finally:
                        if sys.path and sys.path[-1] == root:
                            sys.path.pop()
                follow.boot()
            else:
                _log("not traced: Python %s has no sys.monitoring (3.12+ needed)" % sys.version.split()[0])
    except BaseException as exc:  # never the reason a child fails to start
        try:
            _log("not traced: %s: %s" % (type(exc).__name__, exc))
        except BaseException:
            pass
    # the sitecustomize this module hides (the next one on sys.path), if any
    import importlib

    me = sys.modules.pop("sitecustomize", None)
    try:
        importlib.import_module("sitecustomize")
    except ImportError as exc:
        if getattr(exc, "name", "sitecustomize") != "sitecustomize":
            raise
    finally:  # the import system expects to find the module it is importing
        sys.modules.setdefault("sitecustomize", me)


def _log(message):
    import json
    import os
    import sys

    cfg = json.loads(os.environ["OCULAR_FOLLOW"])
    argv = getattr(sys, "orig_argv", None) or getattr(sys, "argv", None) or [sys.executable or "python"]
    line = "%d %s: %s\n" % (os.getpid(), " ".join(argv)[:200], message)
    with open(os.path.join(cfg["dir"], "follow.log"), "ab") as f:
        f.write(line.encode("utf-8", "backslashreplace"))


_ocular_follow_boot()
