"""`python -m core.audit`: the audit's command line (core.audit.runner, which chooses inductor's cache folder before
it imports torch)."""

from core.audit.runner import main

if __name__ == "__main__":
    raise SystemExit(main())
