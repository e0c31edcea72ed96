"""Deprecated alias: the loopback PostgreSQL + Valkey servers moved to :mod:`ragcache.testing.local_servers`.

``python -m ragcache.local_servers`` still works (it runs the new module's command line).
"""

import runpy
import sys
import warnings

if __name__ == "__main__":
    warnings.warn("ragcache.local_servers moved to ragcache.testing.local_servers; "
                  "run `python -m ragcache.testing.local_servers`", DeprecationWarning, stacklevel=1)
    runpy.run_module("ragcache.testing.local_servers", run_name="__main__", alter_sys=True)
else:
    from ragcache._moved import alias_package

    alias_package(__name__, "ragcache.testing.local_servers")
