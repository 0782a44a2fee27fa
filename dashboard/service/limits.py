"""What a page may ask for: the limits of a local page and of one others can reach, and what the server holds for
visitors. How much of one field from a file or a visitor a page shows back is core.text's (`clip`).

The run options themselves (their bounds, defaults, flags and the command that repeats a run) are one table,
core.request.options.RUN_OPTIONS, put to work by core.request.run_schema; the load options' are
core.request.load.LOAD_OPTIONS, put to work by core.request.load_schema. No torch here.
"""

from __future__ import annotations

import ipaddress

from core.documents.files import MAX_REPORT_BYTES
from core.request.load_schema import LoadLimits
from core.request.run_schema import Limits

LOCAL_LIMITS = Limits()
# When the page is reachable by others (a share link or a non-local address), one visitor must not hold the single
# device queue for long: these bound a run to a few minutes on a GPU.
EXPOSED_LIMITS = Limits(max_new_tokens=1024, batch=8, trials=10, min_seconds=10.0, max_run_s=300.0)


# What a run under load may ask for: each load option's `page_high` on a local page, its `exposed_high` on a shared one
# (core.request.load.LOAD_OPTIONS), where every contestant runs each point, so the sweep is the multiplier to bound.
LOCAL_LOAD_LIMITS = LoadLimits.local()
EXPOSED_LOAD_LIMITS = LoadLimits.exposed()

# What the server itself holds for visitors (dashboard.edge.http_guard): the largest request body it reads (a report's
# upload excepted: core.documents.files.MAX_REPORT_BYTES, streamed to disk), and the sessions whose state it keeps.
MAX_BODY_BYTES = 4 * 2**20
MAX_SESSIONS = 1000
# A session with no page open in a browser (an API client's, or a page that closed) and nothing queued or running
# goes IDLE_SESSION_S after its last request; on an exposed server one address holds at most SESSIONS_PER_ADDRESS
# sessions, the idle ones going first (dashboard.edge.session_store).
IDLE_SESSION_S = 60.0
SESSIONS_PER_ADDRESS = 32

# A request body must arrive within BODY_GRACE_S plus its length at MIN_BODY_RATE (a 4 MiB body: 26 s; the largest
# upload: 414 s), and the bodies being received, all requests together, hold at most MAX_BUFFERED_BYTES in memory
# (past it the one holding the most is cut off). A body still arriving costs BODY_OVERHEAD_BYTES more than it has
# handed over: uvicorn reads up to 256 KiB at a time, pauses reading past 64 KiB and copies what it hands over.
# dashboard.edge.request_bodies.
BODY_GRACE_S = 10.0
MIN_BODY_RATE = 256 * 1024  # bytes a second
MAX_BUFFERED_BYTES = 8 * 2**20
BODY_OVERHEAD_BYTES = 640 * 1024

# Uploads (dashboard.edge.gradio_files): one request carries at most UPLOAD_FILES files in UPLOAD_REQUEST_BYTES (one
# report at Replay's limit and the multipart framing); a visitor (a client address) holds at most
# UPLOAD_VISITOR_BYTES on disk (two reports, for a diff of two files) and the folder at most UPLOAD_FOLDER_BYTES, the
# oldest uploads going first; an upload goes when the pages that used it close, or UPLOAD_KEEP_S after it came.
UPLOAD_FILES = 4
UPLOAD_REQUEST_BYTES = MAX_REPORT_BYTES + 2**20
UPLOAD_VISITOR_BYTES = 2 * UPLOAD_REQUEST_BYTES
UPLOAD_FOLDER_BYTES = 4 * UPLOAD_REQUEST_BYTES
UPLOAD_KEEP_S = 3600.0

# Logins (dashboard.edge.http_guard.LoginGate): checked one at a time, a failed one answered after FAILED_LOGIN_DELAY_S,
# so that guessing from everyone together is at most one password a FAILED_LOGIN_DELAY_S; a login body is at most
# LOGIN_BODY_BYTES, and at most MAX_LOGINS_WAITING wait for their turn.
FAILED_LOGIN_DELAY_S = 1.0
LOGIN_BODY_BYTES = 4096
MAX_LOGINS_WAITING = 256


def is_loopback(address: str) -> bool:
    """Whether a host name or client address is this machine's own (a local page; or, behind the share tunnel,
    every visitor)."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False
