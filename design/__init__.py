"""Design: offline search for noise mechanisms under a certified budget (row 3).

:func:`lmo_search` finds the LMO mixture that minimises a utility (variance, E|noise| or
a callable) subject to a certified upper epsilon, calibrating each shape's scale with the
one root finder of :mod:`dpforge.accounting.calibrate`, and compares it with the
calibrated Gaussian on the same workload.  The search is split by job:
:mod:`~dpforge.design.search` (the entry point), :mod:`~dpforge.design.space` (the
shapes), :mod:`~dpforge.design.scale` (calibrating one shape),
:mod:`~dpforge.design.stages` (the global and local stages) and
:mod:`~dpforge.design.result` (:class:`LMOSearchResult` and its JSON).
"""

from dpforge.design.search import LMOSearchResult, lmo_search

__all__ = ["LMOSearchResult", "lmo_search"]
