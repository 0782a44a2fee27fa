"""engine.protocol: one dataclass per message, one enum of message types, and messages that survive the pipe."""

from __future__ import annotations

import dataclasses
import pickle
import subprocess
import sys
from multiprocessing import Pipe

import pytest

from core.request.load import LoadRequest, WorkloadSpec
from core.request.options import BenchRequest, GenerationOptions
from engine import protocol
from engine.protocol import (
    Compare,
    Done,
    Events,
    Failed,
    FailureCategory,
    Hello,
    JobCancelled,
    Load,
    MessageType,
    ModelFacts,
    Progress,
    Ready,
    Shutdown,
    Started,
    UnderLoad,
    job_of,
)

REQUEST = BenchRequest(prompt="Hi", options=GenerationOptions(max_new_tokens=4), trials=1)
MODEL_FACTS = ModelFacts(job=3, spec="tiny-random", device="cpu", device_type="cpu", gpu=None, dtype="float32",
                parameters=1234, weight_bytes=4936, context_length=2048, tp=1, all_reduce="",
                transforms=("fused qkv",),
                tokenizer_json="{}", tokenizer_cleanup=False, load_s=0.5)
ONE_OF_EACH = (
    Load(job=1, spec="tiny-random"), Compare(job=2, spec=None, request=REQUEST), Shutdown(),
    Hello(pid=10, rank=0, world_size=1, cuda=False, gpus=0, torch="2.13"), Ready(start_s=0.9), Started(job=2),
    Progress(job=1, text="Loading model tiny-random"), MODEL_FACTS,
    Events(job=2, events=[{"type": "tokens", "contestant": "naive", "tokens": [5], "host_time_s": 1.0}]),
    Done(job=2, report={"schema": "syncscope.bench/1"}), JobCancelled(job=2, loaded="tiny-random"),
    Failed(job=None, error="ImportError: no torch", category=FailureCategory.START),
    UnderLoad(job=5, spec="tiny-random", request=LoadRequest(workload=WorkloadSpec(requests=6), sweep_batch=(1, 2))),
)


def test_every_message_type_has_one_message_class():
    assert sorted(m.type for m in ONE_OF_EACH) == sorted(MessageType)
    assert all(isinstance(m.type, MessageType) for m in ONE_OF_EACH)
    assert {t.value for t in MessageType} >= {"load", "compare", "done", "failed"}, "the wire names stay readable"


@pytest.mark.parametrize("message", ONE_OF_EACH, ids=lambda m: m.type.value)
def test_messages_cross_a_pipe_unchanged(message):
    ours, theirs = Pipe()
    ours.send(message)
    received = theirs.recv()
    assert received == message and type(received) is type(message) and received.type == message.type
    assert pickle.loads(pickle.dumps(message)) == message


def test_messages_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        MODEL_FACTS.spec = "something else"  # type: ignore[misc]


def test_a_loaded_model_is_described_by_typed_fields():
    fields = {f.name for f in dataclasses.fields(ModelFacts)}
    assert fields == {"job", "spec", "device", "device_type", "gpu", "dtype", "parameters", "weight_bytes",
                      "context_length", "tp",
                      "all_reduce", "transforms", "tokenizer_json", "tokenizer_cleanup", "load_s"}


def test_failures_come_in_categories():
    assert {c.value for c in FailureCategory} == {"input", "oom", "device", "error", "start", "bug"}
    failed = Failed(job=4, error="too long", category=FailureCategory.INPUT)
    assert failed.loaded is None and failed.traceback is None and failed.category == "input"


def test_the_job_of_a_message():
    assert [job_of(m) for m in ONE_OF_EACH] == [1, 2, None, None, None, 2, 1, 3, 2, 2, 2, None, 5]


def test_a_load_report_crosses_the_pipe_alone_its_reader_words_it():
    done = Done(job=5, report={"schema": "syncscope.load/1"})
    ours, theirs = Pipe()
    ours.send(done)
    assert theirs.recv() == done and [f.name for f in dataclasses.fields(Done)] == ["job", "report"]


def test_a_run_under_load_names_its_points_as_the_load_protocol_runs_them():
    request = LoadRequest(workload=WorkloadSpec(requests=6, rate=2.0), max_batch=4, sweep_batch=(1, 4, 8),
                          sweep_rate=(2.0, 8.0))
    assert request.points() == [(4, 2.0), (1, 2.0), (8, 2.0), (4, 8.0)]


def test_a_job_ends_with_done_cancelled_or_failed():
    ends = [m for m in ONE_OF_EACH if isinstance(m, protocol.JobEnd)]
    assert {m.type for m in ends} == {MessageType.DONE, MessageType.CANCELLED, MessageType.FAILED}


def test_the_engine_package_imports_neither_torch_nor_gradio_nor_plotly():
    code = ("import sys, engine, engine.protocol, engine.client, core.parallel.launch, core.parallel.ranks; "
            "print(sorted({'gradio', 'plotly', 'torch'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
