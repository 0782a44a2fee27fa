"""The run history: one row per finished comparison (dashboard.reports.history_row), kept for its owner's downloads.

Rows hold run data only (options and numbers; no prompt text, host names or paths), so the CSV and JSON are safe to
offer to the visitor who ran them.
"""

from __future__ import annotations

import collections
import json
import threading
from typing import Any

from dashboard.reports import history_csv

HISTORY_LIMIT = 500
HISTORY_SCHEMA = "syncscope.history/1"


class RunHistory:
    """The newest HISTORY_LIMIT rows, each with the owner (a browser session) that ran it."""

    def __init__(self, limit: int = HISTORY_LIMIT):
        self._rows: collections.deque[tuple[str | None, dict[str, Any]]] = collections.deque(maxlen=limit)
        self._lock = threading.Lock()

    def add(self, owner: str | None, row: dict[str, Any]) -> None:
        with self._lock:
            self._rows.append((owner, row))

    def rows(self, owner: str | None = None) -> list[dict[str, Any]]:
        """Finished runs (newest last); with `owner`, only that owner's."""
        with self._lock:
            return [dict(row) for who, row in self._rows if owner is None or who == owner]

    def csv(self, owner: str | None = None) -> str:
        return history_csv(self.rows(owner))

    def json(self, owner: str | None = None) -> str:
        return json.dumps({"schema": HISTORY_SCHEMA, "runs": self.rows(owner)}, indent=1)

    def __len__(self) -> int:
        return len(self._rows)
