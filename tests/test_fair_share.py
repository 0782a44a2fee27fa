"""dashboard.service.fair_share (issue 42): what one client may hold of the queue, and the turns clients take in it."""

from __future__ import annotations

import pytest

from dashboard.service.fair_share import EXPOSED_SHARING, LOCAL_SHARING, Client, FairShare, ShareRule, sharing_for
from dashboard.service.jobs import COMPARE, DONE, Job
from tests.conftest import TINY, make_runner
from tests.helpers import FakeClock, wait_until

VISITOR_ADDRESS, FLOOD_ADDRESS, TUNNEL = "198.51.100.7", "203.0.113.5", "127.0.0.1"


def run_of(client: Client, share: FairShare, job_id: int = 1) -> Job:
    return share.stamp(Job(id=job_id, work=COMPARE, owner=client.owner, model=None), client)


def admitted(share: FairShare, client: Client, pending: list[Job]) -> Job:
    share.admit(client, pending)
    share.seen(client)
    job = run_of(client, share, len(pending) + 1)
    pending.append(job)
    return job


def one_line_refusal(share: FairShare, client: Client, pending: list[Job], match: str) -> str:
    with pytest.raises(ValueError, match=match) as refused:
        share.admit(client, pending)
    said = str(refused.value)
    assert "\n" not in said and len(said) < 200, said
    return said


def test_an_exposed_server_shares_and_a_local_one_does_not():
    assert sharing_for(True) is EXPOSED_SHARING and sharing_for(False) is LOCAL_SHARING
    share, pending = FairShare(LOCAL_SHARING), []
    for i in range(20):
        admitted(share, Client(f"session{i}", VISITOR_ADDRESS), pending)


def test_one_address_holds_at_most_its_runs_whatever_its_sessions():
    share, pending = FairShare(EXPOSED_SHARING), []
    for i in range(EXPOSED_SHARING.per_address):
        admitted(share, Client(f"flood{i}", FLOOD_ADDRESS), pending)
    for i in range(5):
        said = one_line_refusal(share, Client(f"more{i}", FLOOD_ADDRESS), pending, "from your address are already")
    assert said.startswith("2 runs from your address are already queued or running")
    admitted(share, Client("visitor", VISITOR_ADDRESS), pending)


def test_an_address_gives_runs_to_at_most_so_many_visitors_in_its_window():
    clock = FakeClock()
    share = FairShare(ShareRule(per_address=100, visitors_per_address=3, window_s=60), clock)
    for i in range(3):
        admitted(share, Client(f"session{i}", FLOOD_ADDRESS), [])
    said = one_line_refusal(share, Client("session3", FLOOD_ADDRESS), [], "3 visitors from your address")
    assert said.endswith("in the last 1 minutes, this server's limit for one address: try again later")
    admitted(share, Client("session0", FLOOD_ADDRESS), [])  # one already counted is not counted again
    admitted(share, Client("visitor", VISITOR_ADDRESS), [])
    clock.now += 61
    admitted(share, Client("session3", FLOOD_ADDRESS), [])


def test_behind_the_tunnel_newcomers_hold_a_few_places_and_visitors_who_finished_a_run_queue_as_before():
    share, pending = FairShare(EXPOSED_SHARING), []
    earlier = run_of(Client("regular", TUNNEL), share)
    earlier.state = DONE
    share.finished(earlier)
    for i in range(EXPOSED_SHARING.newcomers_per_address):
        admitted(share, Client(f"fresh{i}", TUNNEL), pending)
    for i in range(85):
        said = one_line_refusal(share, Client(f"flood{i}", TUNNEL), pending, "no finished run yet")
    assert said == ("2 runs of visitors with no finished run yet are queued or running from your address, this "
                    "server's limit: try again when one has finished")
    regular = admitted(share, Client("regular", TUNNEL), pending)
    assert not regular.newcomer and regular.share_key is None, "its turn is its own, not the tunnel's"
    assert Client("x", TUNNEL).many and Client("x", "::1").many and not Client("x", VISITOR_ADDRESS).many


@pytest.mark.slow
def test_a_flood_of_85_sessions_from_one_address_leaves_a_new_visitors_run_next_in_line():
    """The in-process engine, tiny-random, the exposed server's sharing: the flood holds two places, the other 83
    sessions are refused in one line each, and a visitor arriving after them runs as soon as the run going ends."""
    runner = make_runner(monitor=False, in_process_engine=True, sharing=EXPOSED_SHARING)
    long_run = dict(prompt="Count", model=TINY, max_new_tokens=24, ignore_eos=True, trials=1)
    try:
        flood, refusals = [], []
        for i in range(85):
            try:
                flood.append(runner.submit(long_run, owner=f"flood{i}", address=FLOOD_ADDRESS))
            except ValueError as exc:
                refusals.append(str(exc))
        visitor = runner.submit(long_run, owner="visitor", address=VISITOR_ADDRESS)
        assert len(flood) == 2 and len(refusals) == 83 and all("\n" not in said for said in refusals)
        assert runner.position(visitor) <= 1, "at most the flood's run that is going is ahead"
        for job in (*flood, visitor):
            assert job.wait(120) and job.state == DONE, job.error
        assert flood[0].t_end <= visitor.t0 <= flood[1].t0, "the visitor's run came before the flood's second"
    finally:
        runner.close()


@pytest.mark.slow
def test_through_the_page_a_waiting_visitor_sees_its_place_and_a_refused_one_gets_one_line():
    """Served, with one place in the runner's queue and the exposed sharing: the second visitor (once past Gradio's
    handler slots, which were as many as the queue's places) streams its place; the third, a third newcomer from
    the one loopback address, is refused in one line and the page goes on serving."""
    from dashboard.ui.form import page_values
    from tests.conftest import page_client, serve
    from tests.test_dashboard_client import text_of

    runner = make_runner(monitor=False, in_process_engine=True, sharing=EXPOSED_SHARING, max_queue=1)
    app = serve(runner)
    try:
        form = page_values(dict(prompt="Count", model=TINY, max_new_tokens=400, ignore_eos=True, trials=1))
        visitors = [page_client(app.url) for _ in range(3)]
        going = visitors[0].submit(**form, api_name="/run")
        assert wait_until(lambda: len(runner.pending()) == 1, timeout=60)
        waiting = visitors[1].submit(**form, api_name="/run")
        assert wait_until(lambda: len(runner.pending()) == 2, timeout=60)
        assert wait_until(lambda: any("ahead of yours" in text_of(out[0]) for out in waiting.outputs()), 60)
        assert text_of(waiting.outputs()[-1][0]) == "Waiting for the device: 1 job ahead of yours in the queue."
        refused = text_of(visitors[2].predict(**form, api_name="/run")[0])
        assert refused == ("Not started: 2 runs of visitors with no finished run yet are queued or running from "
                           "your address, this server's limit: try again when one has finished")
        for visitor in visitors[:2]:
            visitor.predict(api_name="/cancel")
        assert text_of(going.result(timeout=60)[0]).startswith("Cancelled")
        assert text_of(waiting.result(timeout=60)[0]).startswith("Cancelled")
    finally:
        app.demo.close()
        runner.close()
