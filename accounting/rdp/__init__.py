"""The RDP engine: Rényi-DP curves of descriptions and their (epsilon, delta) conversion.

:mod:`.formulas` (closed forms and subsampling bounds), :mod:`.lmo` (exact RDP of LMO and
Laplace noise by quadrature, with the vector guard), :mod:`.curve` (per component and
composed), :mod:`.conversion` (Canonne-Kamath-Steinke), :mod:`.engine` (the entry points
registered as engine "rdp") and :mod:`.published` (the LMO-DP paper's formulas as
published: uncertified, for reproduction only, never called by an engine).
"""

from dpforge.accounting.rdp.conversion import delta_from_rdp, epsilon_from_rdp
from dpforge.accounting.rdp.curve import RdpCurve, rdp, rdp_curve, rdp_of_component
from dpforge.accounting.rdp.engine import delta, epsilon
from dpforge.accounting.rdp.formulas import (
    DEFAULT_ORDERS,
    MAX_ORDER,
    convexity_subsampled_rdp,
    gaussian_rdp,
    laplace_rdp,
    randomized_response_rdp,
    require_orders,
    subsampled_gaussian_rdp,
    zhu_wang_subsampled_rdp,
)

__all__ = [
    "DEFAULT_ORDERS",
    "MAX_ORDER",
    "RdpCurve",
    "convexity_subsampled_rdp",
    "delta",
    "delta_from_rdp",
    "epsilon",
    "epsilon_from_rdp",
    "gaussian_rdp",
    "laplace_rdp",
    "randomized_response_rdp",
    "rdp",
    "rdp_curve",
    "rdp_of_component",
    "require_orders",
    "subsampled_gaussian_rdp",
    "zhu_wang_subsampled_rdp",
]
