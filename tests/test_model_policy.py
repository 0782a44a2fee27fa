"""dashboard.service.model_policy: which models may be loaded, and what the banner every visitor sees may call them."""

from __future__ import annotations

import pytest

from core.models.specs import BUILTIN_SPECS
from dashboard.service.model_policy import VISITORS_MODEL, ModelPolicy


def test_any_model_by_default_with_the_built_ins_offered():
    policy = ModelPolicy()
    assert policy.allow_any and policy.choices() == list(BUILTIN_SPECS)
    assert policy.check("  someone/some-model ") == "someone/some-model"


def test_an_allow_list_refuses_the_rest_and_offers_what_it_allows():
    policy = ModelPolicy(allowed={"tiny-random", "my-org/my-model"})
    assert not policy.allow_any and policy.choices() == [*BUILTIN_SPECS, "my-org/my-model"]
    assert policy.check("my-org/my-model") == "my-org/my-model"
    with pytest.raises(ValueError, match="'evil/remote-code-model' is not allowed on this dashboard"):
        policy.check("evil/remote-code-model")
    for nothing in ("", "   ", None, 3):
        with pytest.raises(ValueError, match="no model chosen; pick one of: "):
            policy.check(nothing)


def test_the_banner_names_built_ins_and_startup_models_only():
    policy = ModelPolicy(named=["synthetic:llama-8b", "/srv/models/ours"])
    assert policy.public_name("synthetic:llama-8b") == "synthetic:llama-8b"
    assert policy.public_name("/srv/models/ours") == "/srv/models/ours"
    assert policy.public_name(BUILTIN_SPECS[0]) == BUILTIN_SPECS[0]
    assert policy.public_name("/home/visitor/secret-model") == VISITORS_MODEL
    assert policy.public_name(None) == "no model"
    assert ModelPolicy(allowed={"my-org/my-model"}).public_name("my-org/my-model") == "my-org/my-model"


def test_an_exposed_server_neither_offers_nor_accepts_what_cannot_fit():
    too_big = {"synthetic:llama-70b": "model 'synthetic:llama-70b' does not fit: it needs about 329.5 GiB"}
    policy = ModelPolicy(allowed=set(BUILTIN_SPECS))
    policy.leave_out_unfit(too_big.get)
    assert "synthetic:llama-70b" not in policy.choices() and "tiny-random" in policy.choices()
    with pytest.raises(ValueError, match=r"^model 'synthetic:llama-70b' does not fit"):
        policy.check("synthetic:llama-70b")
    local = ModelPolicy()
    local.leave_out_unfit(too_big.get)
    assert "synthetic:llama-70b" in local.choices(), "a local server offers every built-in (and refuses at the load)"


def test_a_retired_model_is_refused_and_no_longer_offered():
    policy = ModelPolicy()
    policy.retire("synthetic:llama-1b", "it was unloaded after the engine process was lost 3 times in a row")
    assert "synthetic:llama-1b" not in policy.choices()
    with pytest.raises(ValueError, match="not offered any more: it was unloaded after"):
        policy.check("synthetic:llama-1b")


def test_a_spec_too_long_to_be_a_name_is_refused_quoting_80_characters_of_it():
    with pytest.raises(ValueError) as refused:
        ModelPolicy().check("x" * 5000)
    assert len(str(refused.value)) < 200 and "x" * 80 in str(refused.value) and "x" * 81 not in str(refused.value)
    assert "5,000 characters" in str(refused.value)
