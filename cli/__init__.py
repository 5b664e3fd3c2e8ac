"""The ``whileai`` command line: thin Typer commands over the library (``whileai.cli.main``)."""
