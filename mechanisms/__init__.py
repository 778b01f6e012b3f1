"""Mechanism descriptions: frozen dataclasses describing noisy releases.

A description says what happened (noise family, parameters, sensitivity, sampling,
composition); engines in :mod:`dpforge.accounting` count it.
"""

from dpforge.mechanisms.base import Gaussian, Laplace, Mechanism, PureDP, RandomizedResponse
from dpforge.mechanisms.combinators import Component, Composed, Description, PoissonSampled, flatten
from dpforge.mechanisms.dp_event import from_dp_event, to_dp_event
from dpforge.mechanisms.lmo import LMO, LMOPair
from dpforge.mechanisms.lmo_search import LMOSearchResult, lmo_search
from dpforge.mechanisms.pairs import (
    GaussianPair,
    LaplacePair,
    MonotonePair,
    PrivacyLoss,
    RandomizedResponsePair,
)

__all__ = [
    "Component",
    "Composed",
    "Description",
    "Gaussian",
    "GaussianPair",
    "Laplace",
    "LaplacePair",
    "LMO",
    "LMOPair",
    "LMOSearchResult",
    "Mechanism",
    "MonotonePair",
    "PoissonSampled",
    "PrivacyLoss",
    "PureDP",
    "RandomizedResponse",
    "RandomizedResponsePair",
    "flatten",
    "from_dp_event",
    "lmo_search",
    "to_dp_event",
]
