"""Exit 0 when the GIL is still off after importing dshtools, every module of
it whose optional dependencies are installed, and the extensions they load;
else print what is wrong and exit 1. Run by .ci/run on the free-threaded
build (docs/interpreters.md)."""

from __future__ import annotations

import importlib
import pkgutil
import sys

if not hasattr(sys, "_is_gil_enabled") or sys._is_gil_enabled():
    print(f"CI: {sys.executable} does not run without the GIL at start", file=sys.stderr)
    sys.exit(1)

import dshtools

skipped = []
for module in pkgutil.walk_packages(dshtools.__path__, "dshtools."):
    try:
        importlib.import_module(module.name)
    except ImportError as exc:  # an optional extra that is not installed here
        skipped.append(f"{module.name} ({exc.name})")
    except SystemExit:  # a __main__ module
        pass

extensions = sorted(
    name for name, mod in list(sys.modules.items()) if (getattr(mod, "__file__", None) or "").endswith(".so")
)
top_level = sorted({name.split(".")[0] for name in extensions})
print(f"CI: imported dshtools and {len(extensions)} extension modules from: {', '.join(top_level)}")
if skipped:
    print(f"CI: not importable here (optional extras): {', '.join(skipped)}")
if sys._is_gil_enabled():
    print("CI: an extension turned the GIL on (a RuntimeWarning above names it)", file=sys.stderr)
    sys.exit(1)
print("CI: GIL off")
