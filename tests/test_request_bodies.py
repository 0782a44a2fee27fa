"""dashboard.edge.request_bodies: a body's deadline and size limit, and the bytes all bodies being received may hold."""

from __future__ import annotations

import asyncio

import pytest

from dashboard.edge.request_bodies import BodyBudget, BodyCut, BodyReader, body_deadline_s


def sender(chunks: list[bytes], then_wait: bool = True):
    """A server's receive giving `chunks` (the last marked final unless `then_wait`), then nothing ever again."""
    left = list(chunks)

    async def receive():
        if left:
            chunk = left.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(left) or then_wait}
        await asyncio.Event().wait()  # a body whose last byte never comes

    return receive


async def read_all(reader: BodyReader) -> bytes:
    body = b""
    while not reader.whole:
        body += (await reader.receive()).get("body", b"")
    return body


def test_a_body_that_stops_arriving_is_cut_off_with_408_at_its_deadline():
    async def main():
        reader = BodyReader(sender([b"x" * 100]), limit=1000, deadline_s=0.2)
        with pytest.raises(BodyCut) as cut:
            await read_all(reader)
        return cut.value

    cut = asyncio.run(asyncio.wait_for(main(), timeout=30))
    assert cut.status == 408 and cut.line.startswith("the request body did not arrive in time: 100 bytes in")


def test_a_whole_body_within_its_limit_is_read_and_one_over_it_is_413():
    async def main(limit: int):
        return await read_all(BodyReader(sender([b"ab", b"cd"], then_wait=False), limit=limit, deadline_s=30))

    assert asyncio.run(main(4)) == b"abcd"
    with pytest.raises(BodyCut, match="over this server's limit of 3 bytes"):
        asyncio.run(main(3))


def test_past_the_budget_the_body_holding_the_most_is_cut_and_a_small_one_goes_through():
    async def main():
        budget = BodyBudget(max_bytes=1000, overhead=0)
        slow = [BodyReader(sender([b"s" * 450]), limit=10_000, deadline_s=60, budget=budget) for _ in range(2)]
        for reader in slow:
            await reader.receive()
        waiting = [asyncio.ensure_future(read_all(reader)) for reader in slow]
        await asyncio.sleep(0)
        small = await read_all(BodyReader(sender([b"k" * 50], then_wait=False), 10_000, 60, budget))
        bigger = BodyReader(sender([b"b" * 200]), limit=10_000, deadline_s=60, budget=budget)
        await bigger.receive()  # 450 + 450 + 200 > 1000: one of the 450s goes
        done, pending = await asyncio.wait(waiting, timeout=10, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        return small, [task.exception() for task in done], budget.held_bytes

    small, cuts, held = asyncio.run(main())
    assert small == b"k" * 50
    assert len(cuts) == 1 and isinstance(cuts[0], BodyCut) and cuts[0].status == 503
    assert held == 650


def test_a_deadline_grows_with_the_body():
    assert body_deadline_s(0) == pytest.approx(10.0)
    assert body_deadline_s(4 * 2**20) == pytest.approx(26.0)


def test_a_body_still_arriving_counts_the_servers_own_buffers_for_it():
    async def main():
        budget = BodyBudget(max_bytes=3000, overhead=1000)
        readers = [BodyReader(sender([b"s" * 10]), limit=100, deadline_s=60, budget=budget) for _ in range(3)]
        for reader in readers:
            await reader.receive()
        held = budget.held_bytes  # three of 1010 are over 3000: the first went
        with pytest.raises(BodyCut) as cut:
            await readers[0].receive()
        whole = await read_all(BodyReader(sender([b"w" * 10], then_wait=False), 100, 60, budget))
        return held, cut.value.status, whole

    assert asyncio.run(main()) == (2020, 503, b"w" * 10)
