"""The ``whileai`` command line: thin Typer commands over the library (``whileai.cli.main``)."""

import os
import signal
import sys


def loading(signum: int, frame: object) -> None:
    """Ctrl-C or SIGTERM while the command line loads and reads its arguments: nothing of the user's runs yet, so its
    one line and exit code at once, no traceback (``console.guarded`` hands both signals to the command it runs)."""
    said, code = ("Ctrl-C", 130) if signum == signal.SIGINT else ("SIGTERM", 143)
    os.write(2, f"whileai: interrupted ({said})\n".encode())
    os._exit(code)


if os.path.basename(sys.argv[0]) == "whileai" or sys.argv[0] == "-m":  # the console script, python -m whileai.cli.main
    for _signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(_signum, loading)
