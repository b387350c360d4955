"""Run by every interpreter with the elastic module's directory on its PYTHONPATH.

A training process the node's guard started has ELASTIC_PROGRESS_FD: it
maps its progress page before the script runs (elastic.progress.attach),
so that its optimizer steps are counted with no change to the script. Then
the sitecustomize this one shadows (the next on sys.path: the system's, a
virtual environment's, the user's) runs as it would have.

Cheap (neither torch nor the rest of the package is imported: the module
elastic.progress is loaded on its own) and it raises nothing of its own.
"""


def _attach():
    import os

    if "ELASTIC_PROGRESS_FD" not in os.environ:
        return
    try:
        progress_module().attach()
    except Exception:
        pass


def progress_module():
    """elastic.progress, loaded without the package's __init__ (which imports torch when it is there).

    The package imports it later as its own (sys.modules).
    """
    import importlib.util
    import sys

    mod = sys.modules.get("elastic.progress")
    if mod is None:
        package = importlib.util.find_spec("elastic")  # found, not run
        spec = importlib.util.spec_from_file_location(
            "elastic.progress", package.submodule_search_locations[0] + "/progress.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules["elastic.progress"] = mod
        try:
            spec.loader.exec_module(mod)
        except BaseException:
            del sys.modules["elastic.progress"]
            raise
    return mod


def _shadowed_spec():
    """The spec of the sitecustomize on sys.path after this one's directory, or None."""
    import os
    import sys
    from importlib.machinery import PathFinder

    here = os.path.dirname(os.path.abspath(__file__))
    rest = None
    for i, entry in enumerate(sys.path):
        try:
            if os.path.abspath(entry or os.curdir) == here:
                rest = sys.path[i + 1:]
                break
        except (TypeError, ValueError):
            continue
    if rest is None:
        rest = [e for e in sys.path if not (isinstance(e, str) and os.path.abspath(e or os.curdir) == here)]
    return PathFinder.find_spec("sitecustomize", rest)


def _chain():
    import sys

    try:
        spec = _shadowed_spec()
    except Exception:
        return None
    if spec is None or spec.loader is None:
        return None
    try:
        # What importlib.util.module_from_spec is, without importing
        # importlib.util (milliseconds).
        from importlib._bootstrap import module_from_spec
    except ImportError:
        from importlib.util import module_from_spec
    module = module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        # As site.py says it of a sitecustomize that failed.
        if sys.flags.verbose:
            sys.excepthook(*sys.exc_info())
        else:
            sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n%s: %s\n"
                             % (err.__class__.__name__, err))
    return module


_attach()
# The sitecustomize this one shadows, once it ran.
shadowed = _chain()
