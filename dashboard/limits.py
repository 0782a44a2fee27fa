"""What a page may ask for: the limits of a local page and of one others can reach.

The run options themselves (their bounds, defaults, flags and the command that repeats a run) are one table,
core.options.RUN_OPTIONS, put to work by core.run_schema. No torch here.
"""

from __future__ import annotations

from core.run_schema import Limits

LOCAL_LIMITS = Limits()
# When the page is reachable by others (a share link or a non-local address), one visitor must not hold the single
# device queue for long: these bound a run to a few minutes on a GPU.
EXPOSED_LIMITS = Limits(max_new_tokens=1024, batch=8, trials=10, min_seconds=10.0, max_run_s=300.0)
