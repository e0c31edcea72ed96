"""Deprecation aliases for modules that moved: the old import path keeps working and warns once.

:func:`alias_package` makes ``old`` (and every ``old.sub`` module) the very module objects of
``new``, so ``isinstance`` checks and monkeypatching see one class, not a copy.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import warnings
from types import ModuleType


def alias_package(old: str, new: str, *, stacklevel: int = 3) -> ModuleType:
    """Point ``old`` and its submodules at ``new``'s; warn with :class:`DeprecationWarning`.

    Returns the new package. Submodules are imported eagerly (they are small and already
    imported by the package itself), so ``from old.sub import X`` resolves from ``sys.modules``.
    """
    warnings.warn(f"{old} moved to {new}; import it from there (the old path will be removed)",
                  DeprecationWarning, stacklevel=stacklevel)
    pkg = importlib.import_module(new)
    sys.modules[old] = pkg
    for info in pkgutil.iter_modules(getattr(pkg, "__path__", [])):
        sys.modules[f"{old}.{info.name}"] = importlib.import_module(f"{new}.{info.name}")
    return pkg
