"""The ``dpforge`` command line: ``dpforge epsilon | delta | calibrate | verify``.

The entry point is :func:`dpforge.cli.main.main` (console script ``dpforge``; also
``python -m dpforge.cli.main``).  Nothing is imported here, so that running the module
with ``-m`` does not import it twice.
"""
