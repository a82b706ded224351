"""The CLI's parser: the seconds and ports that `preflight` and `hang` take (one pair of argparse
types), and the parser built for the one verb a command line names."""

from __future__ import annotations

import pytest

from clusterenv.cli import build_parser


@pytest.mark.parametrize("verb", [["preflight"], ["hang", "--collect"]])
@pytest.mark.parametrize("value", ["0", "-1", "3601", "nan", "inf", "x", ""])
def test_a_timeout_outside_0_to_3600_seconds_is_refused(
    verb: list[str], value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args([*verb, "--timeout", value])
    assert exit_.value.code == 2
    assert "expected seconds between 0 and 3600" in capsys.readouterr().err


@pytest.mark.parametrize("verb", [["preflight"], ["hang", "--collect"]])
@pytest.mark.parametrize("value", ["0", "65536", "-1", "\u0663", "80a", ""])
def test_a_port_outside_1_to_65535_is_refused(
    verb: list[str], value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args([*verb, "--port", value])
    assert exit_.value.code == 2
    assert "expected a TCP port 1-65535" in capsys.readouterr().err


def test_the_values_in_range_are_taken() -> None:
    args = build_parser().parse_args(["preflight", "--timeout", "0.5", "--wait", "0",
                                      "--port", "65535"])
    assert (args.timeout, args.wait, args.port) == (0.5, 0.0, 65535)
    args = build_parser().parse_args(["hang", "--collect", "--timeout", "3600", "--port", "1"])
    assert (args.timeout, args.port) == (3600.0, 1)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["preflight", "--wait", "-0.1"])


def test_a_parser_for_one_verb_parses_that_verb_and_knows_no_other() -> None:
    # what `clusterenv hang ...` builds: the hang verb's options, no other verb's parser
    parser = build_parser(["hang"], only=True)
    args = parser.parse_args(["hang", "--collect", "--port", "29500"])
    assert (args.verb, args.port) == ("hang", 29500)
    with pytest.raises(SystemExit):
        parser.parse_args(["preflight"])
    assert build_parser(["hang"]).parse_args(["preflight"]).verb == "preflight"
