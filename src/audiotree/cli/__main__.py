"""``python -m audiotree.cli``: the same as the ``audiotree`` console script."""

from audiotree.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
