"""The DataLoader's sampling scheme decides the description (torch needed)."""

import math

import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, RandomSampler, TensorDataset  # noqa: E402

from dpforge.accounting import epsilon  # noqa: E402
from dpforge.errors import UnsupportedError  # noqa: E402
from dpforge.mechanisms import Composed, Gaussian, PoissonSampled, Shuffled, WithRelation  # noqa: E402
from dpforge.train.loader_sampling import loader_description, sampling_scheme  # noqa: E402

DATA = TensorDataset(torch.zeros(1000, 2))


def test_shuffled_loader_is_accounted_by_a_lower_bound_only():
    loader = DataLoader(DATA, batch_size=100, shuffle=True)
    assert sampling_scheme(loader) == "shuffled"
    description = loader_description(Gaussian(1.0), loader, epochs=3)
    assert description == Composed([(Shuffled(Gaussian(1.0), 100, 1000), 3)])
    result = epsilon(description, 1e-5)
    assert math.isinf(result.upper) and result.sampling == "shuffled"
    assert loader_description(Gaussian(1.0), loader, 3, "replace-one") == WithRelation(description, "replace-one")


def test_poisson_loader():
    opacus = pytest.importorskip("opacus")
    from opacus.data_loader import DPDataLoader

    loader = DPDataLoader.from_data_loader(DataLoader(DATA, batch_size=100))
    assert sampling_scheme(loader) == "poisson"
    description = loader_description(Gaussian(1.0), loader, epochs=2)
    assert description == Composed([(PoissonSampled(Gaussian(1.0), 0.1), 2 * len(loader))])


@pytest.mark.parametrize(
    "loader, scheme",
    [
        (DataLoader(DATA, batch_size=100), "sequential"),
        (DataLoader(DATA, batch_size=100, sampler=RandomSampler(DATA, replacement=True)), "with-replacement"),
    ],
)
def test_other_loaders_are_refused(loader, scheme):
    assert sampling_scheme(loader) == scheme
    with pytest.raises(UnsupportedError, match=scheme):
        loader_description(Gaussian(1.0), loader, epochs=1)


def test_drop_last_is_refused():
    with pytest.raises(UnsupportedError, match="drop_last"):
        loader_description(Gaussian(1.0), DataLoader(DATA, batch_size=300, shuffle=True, drop_last=True), 1)
