"""`python -m core.bench` and `syncscope-bench`: the benchmark's command line, which lives above core, in cli.bench
(it may import the dashboard's HTML view, which core may not). This module only forwards to it, when run."""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from cli.bench import main as bench_main  # cli sits above core: imported when the command runs, never by core

    return bench_main(argv)


def cli() -> None:
    """The `syncscope-bench` command."""
    raise SystemExit(main())


if __name__ == "__main__":
    raise SystemExit(main())
