"""The ``dpforge`` command line: ``dpforge epsilon | delta | calibrate | verify | lmo | plot``.

The entry point is :func:`dpforge.cli.main.main` (console script ``dpforge``; also
``python -m dpforge.cli.main``), which assembles the parser from one module per job:
:mod:`~dpforge.cli.flags` (reading and checking flag values), :mod:`~dpforge.cli.output`
(tables, JSON, exit statuses), :mod:`~dpforge.cli.account` (``epsilon``, ``delta``,
``calibrate``), :mod:`~dpforge.cli.verify`, :mod:`~dpforge.cli.lmo` and
:mod:`~dpforge.cli.plot`.  Nothing is imported here, so that running a module with
``-m`` does not import it twice.
"""
