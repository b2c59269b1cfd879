"""``python -m datajourney``: the command line (see :mod:`datajourney.cli`)."""
from datajourney.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
