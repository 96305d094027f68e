"""The server transport's settings without a server: requests in flight halved after a timeout, and the command
line's ``--timeout``/``--max-retries`` (the real server's behaviour: tests/test_server_keys.py)."""

import asyncio

import pytest

from jaxrank.judges._server_client import _InFlight


def test_in_flight_limit_holds_and_halves():
    """At most ``limit`` tasks inside at once; after ``shrink`` the new, halved limit holds (never below 1)."""
    async def run():
        gate = _InFlight(8)
        peak, inside = [0], [0]

        async def task(k):
            async with gate:
                inside[0] += 1
                peak[0] = max(peak[0], inside[0])
                await asyncio.sleep(0.01)
                inside[0] -= 1

        await asyncio.gather(*(task(k) for k in range(8)))
        first_peak = peak[0]
        gate.shrink()
        gate.shrink()                      # two timeouts: 8 -> 4 -> 2
        peak[0] = 0
        await asyncio.gather(*(task(k + 1) for k in range(10)))
        return first_peak, peak[0], gate.limit

    first, later, limit = asyncio.run(run())
    assert first == 8 and later == 2 and limit == 2
    g = _InFlight(1)
    g.shrink()
    assert g.limit == 1


@pytest.mark.parametrize("flag, value, match", [("--timeout", "0", "--timeout must be > 0"),
                                                ("--max-retries", "-1", "--max-retries must be >= 0"),
                                                ("--max-concurrency", "0", "--max-concurrency must be at least 1")])
def test_command_line_settings_are_checked(flag, value, match, capsys):
    from jaxrank.cli import main
    with pytest.raises(SystemExit) as e:
        main(["judge", "--judge", "server:m", "--base-url", "http://127.0.0.1:9/v1", flag, value, "--contexts", "0:1"])
    assert e.value.code == 2 and match in capsys.readouterr().err


def test_command_line_settings_reach_the_judge():
    import argparse

    from jaxrank.cli import _common as common
    args = argparse.Namespace(judge="server:m", base_url="http://127.0.0.1:9/v1", api_key_env="K", max_concurrency=3,
                              timeout=7.5, max_retries=2, template="poe", answer_prefix="none", soft_prompt=None,
                              data="summeval", aspect="coherence")
    judge = common.server_judge(args)
    assert (judge.timeout, judge.max_retries, judge.max_concurrency) == (7.5, 2, 3)
