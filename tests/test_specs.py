"""core.models.specs: the built-in model specs, named without torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from core.models.specs import (
    BUILTIN_SPECS,
    DEFAULT_MODEL,
    SYNTHETIC_CONFIG_CLASSES,
    SYNTHETIC_PREFIX,
    SYNTHETIC_SHAPES,
    TINY_FAMILIES,
    TINY_FAMILY_PREFIX,
    TINY_RANDOM,
    loading_note,
)


def test_the_built_ins_are_the_default_the_synthetic_shapes_and_tiny_random():
    assert BUILTIN_SPECS[0] == DEFAULT_MODEL and BUILTIN_SPECS[-1] == TINY_RANDOM
    synthetic = [spec for spec in BUILTIN_SPECS if spec.startswith(SYNTHETIC_PREFIX)]
    assert synthetic == [SYNTHETIC_PREFIX + name for name in SYNTHETIC_SHAPES]


@pytest.mark.parametrize("spec", [*BUILTIN_SPECS, TINY_FAMILY_PREFIX + "gemma2", "org/some-model", "./a/dir"])
def test_every_spec_has_a_loading_note(spec):
    note = loading_note(spec)
    assert note and "\n" not in note


def test_every_named_config_class_exists_in_transformers():
    import transformers

    for name in {*SYNTHETIC_CONFIG_CLASSES.values(), *(cls for cls, _ in TINY_FAMILIES.values())}:
        assert hasattr(transformers, name), name


@pytest.mark.parametrize("name", SYNTHETIC_SHAPES)
def test_each_synthetic_shape_is_a_valid_config_of_its_family(name):
    import transformers

    config = getattr(transformers, SYNTHETIC_CONFIG_CLASSES.get(name, "LlamaConfig"))(**SYNTHETIC_SHAPES[name])
    assert config.hidden_size % config.num_attention_heads == 0
    assert config.num_attention_heads % config.num_key_value_heads == 0


def test_naming_the_specs_imports_no_torch():
    code = "import sys, core.models.specs; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


def test_a_spec_is_quoted_whole_when_short_and_cut_at_80_characters_when_long():
    from core.models.specs import check_spec_length, quote_spec

    assert quote_spec("tiny-random") == "'tiny-random'"
    quoted = quote_spec("y" * 5000)
    assert quoted == f"'{'y' * 80}'… (5,000 characters)"
    check_spec_length("z" * 512)
    with pytest.raises(ValueError, match="at most 512 characters"):
        check_spec_length("z" * 513)
