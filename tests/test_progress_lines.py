"""Progress of ``agentsim run`` when stderr is not a terminal (a log file, a batch job): one plain
line at most every ``PLAIN_PROGRESS_EVERY_S`` wall seconds, nothing for a short run."""

from agentsim.commands import common
from agentsim.commands.common import _clock, simulated_time_progress


def test_clock_text():
    assert [_clock(s) for s in (0, 59.9, 61, 3600, 86399)] == ["0s", "59s", "1m01s", "1h00m00s", "23h59m59s"]


def test_plain_lines_on_a_non_terminal(capsys, monkeypatch):
    monkeypatch.setattr(common, "PLAIN_PROGRESS_EVERY_S", 0.0)
    with simulated_time_progress(True, "simulating fleet-day") as update:   # pytest's stderr: no tty
        assert update is not None
        update(3600.0, 86400.0)
        update(86400.0, 86400.0)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("simulating fleet-day: 1h00m00s of 24h00m00s simulated (4%), ")
    assert lines[1].startswith("simulating fleet-day: 24h00m00s of 24h00m00s simulated (100%), ")
    assert all(line.endswith(" elapsed") for line in lines) and len(lines) == 2


def test_no_line_before_the_interval_and_none_when_quiet(capsys):
    with simulated_time_progress(True) as update:
        update(60.0, 600.0)            # well within the first 30 wall seconds
    with simulated_time_progress(False) as quiet:
        assert quiet is None
    assert capsys.readouterr().err == ""


def test_count_lines_for_check_timing(capsys, monkeypatch):
    monkeypatch.setattr(common, "PLAIN_PROGRESS_EVERY_S", 0.0)
    advance = common.plain_count_progress("emulated rows", 3)
    for _ in range(3):
        advance(object())
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(",")[0] for line in lines] == ["emulated rows: 1 of 3", "emulated rows: 2 of 3",
                                                       "emulated rows: 3 of 3"]
    monkeypatch.setattr(common, "PLAIN_PROGRESS_EVERY_S", 30.0)
    quiet = common.plain_count_progress("emulated rows", 3)
    quiet(None)                        # within the first 30 wall seconds: nothing
    assert capsys.readouterr().err == ""
