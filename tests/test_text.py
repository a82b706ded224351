"""The one error policy for outside text and the one terminal sanitiser (property tests)."""

from __future__ import annotations

import json
import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from clusterenv._text import clip, escape_surrogates, printable, terminal_line
from clusterenv.preflight.wire import decode_object, encode_json

# Any code point, lone surrogates included (what surrogateescape and JSON escapes produce).
ANY_TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=200)


def _unsafe(char: str) -> bool:
    category = unicodedata.category(char)
    return category in ("Cc", "Cs") or char in "\u061c\u200e\u200f\u2028\u2029" or \
        "\u202a" <= char <= "\u202e" or "\u2066" <= char <= "\u2069"


@given(ANY_TEXT)
def test_printable_leaves_nothing_a_terminal_acts_on(text: str) -> None:
    shown = printable(text)
    assert not any(_unsafe(c) for c in shown)
    shown.encode("utf-8")
    assert printable(shown) == shown  # escaping twice changes nothing more


@given(ANY_TEXT)
def test_terminal_lines_keep_only_newlines_tabs_and_our_colours(text: str) -> None:
    line = terminal_line(text).replace("\x1b[31m", "").replace("\x1b[0m", "")
    for code in ("1", "2", "32", "33", "34"):
        line = line.replace(f"\x1b[{code}m", "")
    assert not any(_unsafe(c) and c not in "\n\t" for c in line)
    line.encode("utf-8")


@given(ANY_TEXT)
def test_any_text_survives_the_wire_and_comes_back_printable_to_json(text: str) -> None:
    payload = encode_json({"hostname": text, text: "key"})
    payload.decode("utf-8")  # always valid UTF-8
    back = decode_object(payload)
    assert back["hostname"] == escape_surrogates(text)
    json.dumps(back, ensure_ascii=False).encode("utf-8")  # and can be sent again


@given(st.text(max_size=500), st.integers(min_value=1, max_value=400))
def test_clip_is_bounded(text: str, limit: int) -> None:
    cut = clip(text, limit)
    assert cut == text if len(text) <= limit else cut.startswith(text[:1])
    assert len(cut) <= max(limit, len(f"x… ({len(text)} more)"))
