"""What a page may ask for: the limits of a local page and of one others can reach, and what the server holds for
visitors. How much of one field from a file or a visitor a page shows back is core.text's (`clip`).

The run options themselves (their bounds, defaults, flags and the command that repeats a run) are one table,
core.options.RUN_OPTIONS, put to work by core.run_schema. No torch here.
"""

from __future__ import annotations

from core.run_schema import Limits

LOCAL_LIMITS = Limits()
# When the page is reachable by others (a share link or a non-local address), one visitor must not hold the single
# device queue for long: these bound a run to a few minutes on a GPU.
EXPOSED_LIMITS = Limits(max_new_tokens=1024, batch=8, trials=10, min_seconds=10.0, max_run_s=300.0)

# What the server itself holds for visitors (dashboard.http_guard): the largest request body it reads (a report's
# upload excepted: core.report_schema.MAX_REPORT_BYTES, streamed to disk), and the sessions whose state it keeps.
MAX_BODY_BYTES = 4 * 2**20
MAX_SESSIONS = 1000
