"""dashboard.service.limits: what a page others can reach may ask for."""

from __future__ import annotations

import pytest

import app
from dashboard.service.limits import EXPOSED_LIMITS
from tests.conftest import page_request


def test_exposed_limits_refuse_hours_of_work():
    with pytest.raises(ValueError, match="max new tokens must be between 1 and 1024"):
        page_request(dict(prompt="hi", max_new_tokens=2000), limits=EXPOSED_LIMITS)
    with pytest.raises(ValueError, match="batch size must be between 1 and 8"):
        page_request(dict(prompt="hi", batch=64), limits=EXPOSED_LIMITS)
    with pytest.raises(ValueError, match="trials must be between 1 and 10"):
        page_request(dict(prompt="hi", trials=20), limits=EXPOSED_LIMITS)
    exposed = app.build_parser().parse_args(["--share"])
    assert app.limits_for(exposed) == EXPOSED_LIMITS and app.limits_for(exposed).max_run_s == 300
    assert app.limits_for(app.build_parser().parse_args([])).max_run_s is None
