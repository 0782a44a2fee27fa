"""Fuzzing core.generate's options: a run either succeeds with sane results or raises a documented ValueError."""

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from core.loops.generation import generate

ANY_INT = st.one_of(st.integers(-5, 40), st.just(10**7), st.none(), st.booleans(), st.floats(-2, 2),
                    st.text(max_size=3))
OPTIONS = st.fixed_dictionaries(
    {},
    optional={
        "loop": st.sampled_from(["naive", "pipelined", "no-check", "eager", ""]),
        "max_new_tokens": ANY_INT,
        "cache": st.sampled_from(["dynamic", "static", "paged"]),
        "compile": st.sampled_from(["off", "step-graph", "turbo"]),
        "lag": ANY_INT,
        "streams": st.sampled_from([0, 1, 2, 3]),
        "do_sample": st.booleans(),
        "temperature": st.floats(-1, 3, allow_nan=False),
        "top_k": st.integers(-2, 60),
        "top_p": st.floats(-0.5, 1.5, allow_nan=False),
        "seed": st.one_of(st.none(), st.integers(0, 2**31), st.text(max_size=2)),
        "eos_token_id": st.one_of(st.none(), st.integers(0, 49151), st.lists(st.integers(0, 49151), max_size=3)),
        "ignore_eos": st.booleans(),
    },
)
PROMPTS = st.one_of(
    st.text(max_size=30),
    st.lists(st.text(min_size=1, max_size=12), min_size=0, max_size=3),
    st.lists(st.integers(-3, 60000), min_size=0, max_size=8),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompt=PROMPTS, options=OPTIONS)
def test_generate_succeeds_or_raises_value_error(tiny, prompt, options):
    options = {**options, "max_new_tokens": options.get("max_new_tokens", 4)}
    if isinstance(options["max_new_tokens"], int) and options["max_new_tokens"] > 40:
        options["max_new_tokens"] = 10**7  # only ever as the past-the-context case
    try:
        result = generate(tiny, prompt, **options)
    except ValueError as exc:
        assert str(exc)  # a message a user can read
        event("rejected with ValueError")
        return
    event("generated")
    steps = options["max_new_tokens"]
    assert len(result.token_ids) == len(result.texts) >= 1
    assert all(1 <= len(ids) <= steps for ids in result.token_ids)
    assert result.timings.kept_steps <= result.timings.computed_steps <= steps
