"""dpforge: differential-privacy accounting with certified lower and upper bounds.

The import package is assembled from the repository's folders, in rows; a module
imports only from its own package or from a lower row (``tests/test_layers.py``):

0. foundation: :mod:`dpforge.errors`, :mod:`dpforge.validation`, :mod:`dpforge.parallel`
1. describe: :mod:`dpforge.mechanisms` (what a noisy release is)
2. count: :mod:`dpforge.accounting` (engines, calibration, profiles)
3. use: :mod:`dpforge.design` (mechanism search), :mod:`dpforge.budget` (plans, verify, ledger)
4. glue: :mod:`dpforge.train` (PyTorch, Opacus), :mod:`dpforge.plots`
5. shell: :mod:`dpforge.cli` (the ``dpforge`` command)

Opacus: ``PrivacyEngine(accountant="dpforge")`` works after ``import dpforge``.  The
registration is made when Opacus' accountants are imported (:mod:`dpforge._plugins`), so
``import dpforge`` itself imports neither Opacus nor torch.
"""

from dpforge import _deprecated, _plugins

__version__ = "0.2.0"

_deprecated.install()
_plugins.install()
