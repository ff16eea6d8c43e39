"""torchrun's own failure summary, read from real console.logs of the 2-rank gloo job
(tests/fixtures/torchrun/README.md says how each was captured)."""

from pathlib import Path

from hybrid.collect.torchrun_failures import parse_torchrun_failures, read_torchrun_failures

FIXTURES = Path(__file__).parent / "fixtures" / "torchrun"


def test_a_rank_killed_by_a_signal_is_the_root_cause_with_its_signal():
    failures = read_torchrun_failures(FIXTURES / "rank1_sigabrt_console.log")
    assert failures.root_cause == 1
    assert failures.ranks[1].exit_code == -6 and failures.ranks[1].signal == "SIGABRT"
    assert failures.ranks[0].exit_code == 1 and failures.ranks[0].signal is None
    assert failures.ranks[1].describe() == "exit code -6, SIGABRT per torchrun"


def test_a_rank_that_raised_first_is_the_root_cause():
    failures = read_torchrun_failures(FIXTURES / "rank1_raised_console.log")
    assert failures.root_cause == 1
    assert {r: f.exit_code for r, f in failures.ranks.items()} == {0: 1, 1: 1}


def test_no_summary_and_no_file_read_as_no_failures(tmp_path):
    # A pass stopped before torchrun printed its summary, or whose log is gone.
    text = (FIXTURES / "rank1_raised_console.log").read_text()
    cut = parse_torchrun_failures(text[: text.index("Failures:")])
    assert cut.ranks == {} and cut.root_cause is None
    assert read_torchrun_failures(tmp_path / "missing.log").ranks == {}
