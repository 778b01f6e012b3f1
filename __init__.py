"""dpforge: differential-privacy accounting with certified lower and upper bounds.

The import package is assembled from the repository's code folders:
``dpforge.mechanisms`` (what a noisy release is), ``dpforge.accounting`` (how to count
it) and ``dpforge.cli`` (the ``dpforge`` command).
"""

__version__ = "0.1.0"
