"""Train: the thin PyTorch adapter (row 4; the ``torch`` extra).

Calibrated noise samplers on a torch device (:mod:`.noise`), noise added once across
data-parallel workers (:mod:`.distributed`), the DP-SGD noise step with flat or group-wise
clipping (:mod:`.dpsgd`), DP-ZO / DPZero (:mod:`.dpzo`), BiTFiT parameter selection
(:mod:`.bitfit`) and the Opacus accountant backed by dpforge (:mod:`.opacus`).  It owns no
accounting mathematics: it records what it did in a :class:`dpforge.budget.Ledger`.
Nothing is imported here, so ``import dpforge.train`` does not need torch.
"""
