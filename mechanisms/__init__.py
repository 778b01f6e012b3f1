"""Describe: frozen dataclasses describing noisy releases (row 1 of the layout).

A description says what happened (noise family, parameters, sensitivity, sampling,
composition); engines in :mod:`dpforge.accounting` count it.
"""

from dpforge import _deprecated
from dpforge.mechanisms.allocation import (
    allocate_noise,
    effective_noise_multiplier,
    geometric_threshold_update,
    gradient_noise_multiplier,
)
from dpforge.mechanisms.base import Gaussian, Laplace, Mechanism, PureDP, RandomizedResponse
from dpforge.mechanisms.combinators import Component, Composed, Description, PoissonSampled, flatten
from dpforge.mechanisms.dp_event import from_dp_event, to_dp_event
from dpforge.mechanisms.lmo import LMO, LMOPair
from dpforge.mechanisms.replace_pairs import ReplaceOneGaussianPair, ShuffleMaxPair, SymmetrisedPair
from dpforge.mechanisms.sampling import RELATIONS, SampledWithoutReplacement, Shuffled, WithRelation
from dpforge.mechanisms.serialize import mechanism_from_dict, mechanism_to_dict
from dpforge.mechanisms.pairs import (
    GaussianPair,
    LaplacePair,
    MonotonePair,
    PrivacyLoss,
    RandomizedResponsePair,
)

__all__ = [
    "Component",
    "allocate_noise",
    "effective_noise_multiplier",
    "geometric_threshold_update",
    "gradient_noise_multiplier",
    "Composed",
    "Description",
    "Gaussian",
    "GaussianPair",
    "Laplace",
    "LaplacePair",
    "LMO",
    "LMOPair",
    "Mechanism",
    "MonotonePair",
    "PoissonSampled",
    "PrivacyLoss",
    "PureDP",
    "RandomizedResponse",
    "RandomizedResponsePair",
    "RELATIONS",
    "ReplaceOneGaussianPair",
    "SampledWithoutReplacement",
    "Shuffled",
    "ShuffleMaxPair",
    "SymmetrisedPair",
    "WithRelation",
    "flatten",
    "from_dp_event",
    "mechanism_from_dict",
    "mechanism_to_dict",
    "to_dp_event",
]


def __getattr__(name: str):
    return _deprecated.moved_name(__name__, name)
