"""Registrations with other libraries, made when those libraries are imported (row 0).

``import dpforge`` must stay cheap and must not import torch, yet
``PrivacyEngine(accountant="dpforge")`` should work with no further import.  So the root
package only declares, in :data:`REGISTRATIONS`, which dpforge module registers itself
with which library (by name, like the aliases of :mod:`dpforge._deprecated`), and
:func:`install` arranges for that module to be imported right after the library's own
module has finished importing:

* when the library module is already imported, the registering module is imported now;
* otherwise a finder at the front of ``sys.meta_path`` waits for the library module,
  lets the normal finders locate it, and wraps that one module's ``exec_module`` so the
  registering module is imported once the library module has run (a post-import hook,
  PEP 302 / PEP 451).  The finder answers ``None`` for every other name and removes
  itself after the hook has fired.

A registration that fails (e.g. an incompatible library version) never breaks the
library's import: it is reported as an ``ImportWarning`` and the library works without
"dpforge".
"""

from __future__ import annotations

import importlib
import sys
import warnings
from typing import Any

#: library module -> the dpforge module whose import registers dpforge with it
REGISTRATIONS: dict[str, str] = {
    # Opacus looks accountants up in opacus.accountants' registry (PrivacyEngine(accountant=...))
    "opacus.accountants": "dpforge.train.opacus",
}


def _register(library: str) -> None:
    """Import the module that registers dpforge with ``library`` (warn if it fails)."""
    try:
        importlib.import_module(REGISTRATIONS[library])
    except Exception as error:  # noqa: BLE001 - never break the library's own import
        warnings.warn(f"dpforge could not register with {library}: {error}", ImportWarning, stacklevel=2)


class _AfterImport:
    """A meta-path finder that hooks the modules of :data:`REGISTRATIONS` (see above)."""

    def __init__(self, pending: set[str]) -> None:
        self.pending = pending

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in self.pending:
            return None
        spec = None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module: Any) -> None:
            original(module)
            self.pending.discard(fullname)
            if not self.pending and self in sys.meta_path:
                sys.meta_path.remove(self)
            _register(fullname)

        loader.exec_module = exec_module  # this spec's own loader instance only
        return spec


def install() -> None:
    """Register now with the libraries already imported; hook the others (idempotent)."""
    pending = set()
    for library in REGISTRATIONS:
        if library in sys.modules:
            _register(library)
        else:
            pending.add(library)
    if pending and not any(isinstance(finder, _AfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(pending))
