"""Replace-one, fixed-size-batch and shuffled-epoch descriptions: pairs checked against
independent draws and integrals, strict construction, conversion and serialisation."""

import math

import numpy as np
import pytest

from dpforge.errors import InputFileError, ParameterError, UnsupportedError
from dpforge.mechanisms import (
    Composed,
    Gaussian,
    Laplace,
    PoissonSampled,
    PureDP,
    ReplaceOneGaussianPair,
    SampledWithoutReplacement,
    Shuffled,
    ShuffleMaxPair,
    SymmetrisedPair,
    WithRelation,
    flatten,
    from_dp_event,
    to_dp_event,
)
from dpforge.mechanisms.description_io import description_from_dict, description_to_dict
from dpforge.mechanisms.pairs import GaussianPair, LaplacePair, PrivacyLoss
from dpforge.mechanisms.sampling import EffectiveMechanism, lower_bound_description, result_labels


def test_replace_one_gaussian_pair_matches_draws():
    pair = ReplaceOneGaussianPair(mu=0.8, q=0.2)
    rng = np.random.default_rng(1)
    n = 400_000
    for under, shift in (("P", 0.8), ("Q", -0.8)):
        x = rng.standard_normal(n) + np.where(rng.random(n) < 0.2, shift, 0.0)
        r = pair.log_likelihood_ratio(x)
        for c in (-1.0, -0.2, 0.0, 0.3, 1.5):
            empirical = float(np.mean(r <= c))
            assert abs(float(pair.r_cdf(c, under)) - empirical) < 4e-3
            assert abs(float(pair.r_sf(c, under)) - (1 - empirical)) < 4e-3


def test_replace_one_gaussian_pair_is_symmetric():
    pair = ReplaceOneGaussianPair(mu=1.3, q=0.05)
    c = np.linspace(-3, 3, 13)
    assert np.allclose(pair.r_cdf(c, "P"), pair.r_sf(-c, "Q"), atol=1e-12)


def test_shuffle_max_pair_matches_simulated_epochs():
    """Monte-Carlo check of the construction: max over T noisy sums, the record in one step."""
    pair = ShuffleMaxPair(mu=1.0, steps=7)
    rng = np.random.default_rng(2)
    n = 200_000
    outputs = rng.standard_normal((n, 7))
    with_record = outputs.copy()
    with_record[np.arange(n), rng.integers(0, 7, n)] += 1.0  # the record's step is uniform
    for under, sums in (("P", with_record), ("Q", outputs)):
        r = pair.log_likelihood_ratio(sums.max(axis=1))
        for c in (-1.0, 0.0, 0.5, 2.0):
            assert abs(float(pair.r_cdf(c, under)) - float(np.mean(r <= c))) < 5e-3


def test_shuffle_max_pair_one_step_is_the_gaussian_pair():
    pair, gauss = ShuffleMaxPair(mu=0.7, steps=1), GaussianPair(0.7)
    c = np.linspace(-2, 2, 9)
    for under in ("P", "Q"):
        assert np.allclose(pair.r_cdf(c, under), gauss.r_cdf(c, under), atol=1e-10)


@pytest.mark.parametrize("base, q", [(GaussianPair(2.0), 0.1), (LaplacePair(1.5), 0.3)])
def test_symmetrised_pair_is_a_pair_of_laws(base, q):
    pair = SymmetrisedPair(PrivacyLoss(base, q, "remove"))
    assert pair.zero_mass >= 0.0
    # B = e^{-L} A: integrate e^{-l} against A's law on a fine grid and compare with B's sf
    edges = np.linspace(-12, 12, 240_001)
    masses = np.diff(pair.r_cdf(edges, "P"))
    mids = 0.5 * (edges[1:] + edges[:-1])  # bins (a, b] hold the atoms too
    for c in (-1.0, -0.1, 0.4, 2.0):
        expected = float(np.sum(masses[edges[:-1] >= c] * np.exp(-mids[edges[:-1] >= c])))
        assert abs(float(pair.r_sf(c, "Q")) - expected) < 2e-3
    # total masses
    assert abs(float(pair.r_cdf(50.0, "P")) - 1.0) < 1e-12 and abs(float(pair.r_cdf(50.0, "Q")) - 1.0) < 1e-12


def test_symmetrised_profile_is_the_mixture_profile_for_positive_epsilon():
    """Dong-Roth-Su C_q(f): delta(eps) of the symmetrised pair equals the mixture's at eps >= 0."""
    loss = PrivacyLoss(GaussianPair(2.0), 0.1, "remove")
    pair = SymmetrisedPair(loss)
    for eps in (0.0, 0.3, 1.0):
        mixture = float(loss.sf(eps, "P")) - math.exp(eps) * float(loss.sf(eps, "Q"))
        symmetrised = float(pair.r_sf(eps, "P")) - math.exp(eps) * float(pair.r_sf(eps, "Q"))
        assert symmetrised == pytest.approx(mixture, abs=1e-12)


def test_flatten_maps_schemes_and_relations():
    (wor,) = flatten(SampledWithoutReplacement(Gaussian(1.0), 10, 100))
    assert isinstance(wor.mechanism, EffectiveMechanism) and wor.sampling_rate == 1.0
    assert isinstance(wor.mechanism.dominating_pair(), SymmetrisedPair)
    (plain,) = flatten(WithRelation(Gaussian(2.0)))
    assert plain.mechanism == Gaussian(1.0)  # twice the sensitivity = half the multiplier
    (pure,) = flatten(WithRelation(PureDP(0.5)))
    assert pure.mechanism == PureDP(1.0)
    (lap,) = flatten(WithRelation(Laplace(2.0)))
    assert lap.mechanism == Laplace(2.0, sensitivity=2.0)
    (poisson,) = flatten(WithRelation(PoissonSampled(Gaussian(1.0), 0.1)))
    assert isinstance(poisson.mechanism.dominating_pair(), ReplaceOneGaussianPair)
    # add-remove descriptions are untouched
    (old,) = flatten(PoissonSampled(Gaussian(1.0), 0.1))
    assert old.mechanism == Gaussian(1.0) and old.sampling_rate == 0.1


def test_one_relation_per_description():
    with pytest.raises(ParameterError, match="relation"):
        Composed([(WithRelation(Gaussian(1.0)), 2)])
    with pytest.raises(ParameterError, match="relation"):
        WithRelation(WithRelation(Gaussian(1.0)))
    with pytest.raises(ParameterError, match="relation must be one of"):
        WithRelation(Gaussian(1.0), "replace")


def test_shuffled_is_refused_by_flatten_and_checked():
    with pytest.raises(UnsupportedError, match="no certified upper bound"):
        flatten(Composed([(Shuffled(Gaussian(1.0), 10, 100), 3)]))
    with pytest.raises(UnsupportedError, match="Gaussian"):
        Shuffled(Laplace(1.0), 10, 100)
    with pytest.raises(ParameterError, match="batch_size"):
        SampledWithoutReplacement(Gaussian(1.0), 200, 100)
    with pytest.raises(UnsupportedError, match="step count"):
        Shuffled(Gaussian(1.0), 10, 101).lower_bound_pair("add-remove")
    assert Shuffled(Gaussian(1.0), 10, 101).lower_bound_pair("replace-one").steps == 11


def test_labels_and_realised_lower_descriptions():
    assert result_labels(WithRelation(SampledWithoutReplacement(Gaussian(1.0), 1, 10))) == {
        "neighbouring": "replace_one",
        "sampling": "without-replacement",
    }
    assert lower_bound_description(PoissonSampled(Gaussian(1.0), 0.1)) is None
    assert lower_bound_description(WithRelation(PoissonSampled(Gaussian(1.0), 0.1))) is None
    realised = lower_bound_description(SampledWithoutReplacement(Gaussian(1.0), 10, 100))
    assert realised == PoissonSampled(Gaussian(0.5), 0.1)


def test_dp_event_round_trip_of_fixed_size_batches():
    from dp_accounting import NeighboringRelation, dp_event

    from dpforge.mechanisms.dp_event import neighboring_relation

    description = Composed([(SampledWithoutReplacement(Gaussian(2.0), 10, 1000), 5)])
    event = to_dp_event(description)
    inner = event.events[0].event
    assert isinstance(inner, dp_event.SampledWithoutReplacementDpEvent)
    assert inner.event.noise_multiplier == 1.0  # per replace-one sensitivity, as dp-accounting reads it
    assert from_dp_event(event) == description
    wrapped = WithRelation(description)
    assert to_dp_event(wrapped) == event
    assert neighboring_relation(wrapped) == NeighboringRelation.REPLACE_ONE
    assert neighboring_relation(description) == NeighboringRelation.ADD_OR_REMOVE_ONE
    assert from_dp_event(event, relation="replace-one") == wrapped
    with pytest.raises(UnsupportedError):
        to_dp_event(SampledWithoutReplacement(Laplace(1.0), 1, 10))
    with pytest.raises(UnsupportedError):
        to_dp_event(Shuffled(Gaussian(1.0), 1, 10))


@pytest.mark.parametrize(
    "description",
    [
        WithRelation(Composed([(SampledWithoutReplacement(Gaussian(1.5), 64, 6000), 100), (PoissonSampled(Laplace(2.0), 0.1), 3)])),
        Composed([(Shuffled(Gaussian(1.0), 32, 640), 4)]),
        PureDP(1.0),
    ],
)
def test_description_serialisation_round_trip(description):
    data = description_to_dict(description)
    assert description_from_dict(data) == description


@pytest.mark.parametrize(
    "data, name",
    [
        ({"sampling": "fixed", "of": {}}, "sampling"),
        ({"sampling": "without-replacement", "batch_size": 2.5, "dataset_size": 10, "of": {"mechanism": "pure", "epsilon": 1.0}}, "batch_size"),
        ({"relation": "replace-one"}, "of"),
        ({"composed": [{"count": 2}]}, "of"),
        ({"relation": "sideways", "of": {"mechanism": "pure", "epsilon": 1.0}}, "relation"),
        ({"foo": 1}, "description"),
    ],
)
def test_description_reading_is_strict(data, name):
    with pytest.raises(InputFileError, match=name):
        description_from_dict(data)


@pytest.mark.parametrize("base", [GaussianPair(1.0), GaussianPair(4.0), LaplacePair(3.0)])
@pytest.mark.parametrize("q", [0.01, 0.3, 0.9])
def test_mixture_profile_dominates_its_reverse_for_positive_epsilon(base, q):
    """The condition under which the symmetrised law is Dong-Roth-Su's C_q(f): at eps >= 0
    the reverse order (add) never exceeds the mixture order (remove)."""
    remove, add = PrivacyLoss(base, q, "remove"), PrivacyLoss(base, q, "add")
    for eps in np.linspace(0.0, 6.0, 25):
        profile = [float(loss.sf(eps, "P")) - math.exp(eps) * float(loss.sf(eps, "Q")) for loss in (remove, add)]
        assert profile[1] <= profile[0] + 1e-12
