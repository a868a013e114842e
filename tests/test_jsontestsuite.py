"""The strict JSON reader against the JSONTestSuite parsing corpus (nst/JSONTestSuite).

The corpus is shared test data outside this repository; it is read where it lies and
never copied in. A clone without it skips this module.

- ``n_`` files must be refused with :class:`Invalid`.
- ``y_`` files must be accepted, except where a oncebox rule deliberately refuses valid
  JSON; each such file is named in ``Y_REFUSED`` with the rule that refuses it.
- ``i_`` files leave the decision to the implementation. ``I_DECISIONS`` records ours,
  and docs/json-decisions.md explains them; a corpus file missing from it fails loudly.

Everything runs at the depth bound json-event uses (20). No ``y_`` file nests deeper,
so none needs a depth exception.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from oncebox.formats.invalid import Invalid
from oncebox.formats.json_event import MAX_DEPTH
from oncebox.formats.strictjson import loads

REPO_ROOT = Path(__file__).resolve().parent.parent
CORPUS = REPO_ROOT.parent / "shared" / "testdata" / "JSONTestSuite" / "test_parsing"

if not CORPUS.is_dir():
    pytest.skip(
        f"JSONTestSuite corpus not found at {CORPUS}; it is shared test data kept outside "
        "the repository, so a plain clone skips these tests",
        allow_module_level=True,
    )

# A hang guard, not a performance assertion: every file parses in milliseconds.
HANG_GUARD_SECONDS = 2.0

ACCEPT = "accept"

# Valid JSON that oncebox refuses on purpose, with the rule that refuses it.
Y_REFUSED: dict[str, str] = {
    # Which of two equal members would a consumer read? Refuse rather than guess.
    "y_object_duplicated_key.json": "duplicate_member",
    "y_object_duplicated_key_and_value.json": "duplicate_member",
}

# Our decision for every implementation-defined file: "accept" or the refusing rule.
I_DECISIONS: dict[str, str] = {
    # Numbers are kept as spelled; one that overflows a double would read as infinity.
    "i_number_double_huge_neg_exp.json": ACCEPT,
    "i_number_huge_exp.json": "non_finite_number",
    "i_number_neg_int_huge_exp.json": "non_finite_number",
    "i_number_pos_double_huge_exp.json": "non_finite_number",
    "i_number_real_neg_overflow.json": "non_finite_number",
    "i_number_real_pos_overflow.json": "non_finite_number",
    "i_number_real_underflow.json": ACCEPT,
    "i_number_too_big_neg_int.json": ACCEPT,
    "i_number_too_big_pos_int.json": ACCEPT,
    "i_number_very_big_negative_int.json": ACCEPT,
    # Strings must be valid Unicode: UTF-8 bytes and no lone surrogate escapes.
    "i_object_key_lone_2nd_surrogate.json": "invalid_unicode",
    "i_string_1st_surrogate_but_2nd_missing.json": "invalid_unicode",
    "i_string_1st_valid_surrogate_2nd_invalid.json": "invalid_unicode",
    "i_string_UTF-16LE_with_BOM.json": "invalid_unicode",
    "i_string_UTF-8_invalid_sequence.json": "invalid_unicode",
    "i_string_UTF8_surrogate_U+D800.json": "invalid_unicode",
    "i_string_incomplete_surrogate_and_escape_valid.json": "invalid_unicode",
    "i_string_incomplete_surrogate_pair.json": "invalid_unicode",
    "i_string_incomplete_surrogates_escape_valid.json": "invalid_unicode",
    "i_string_invalid_lonely_surrogate.json": "invalid_unicode",
    "i_string_invalid_surrogate.json": "invalid_unicode",
    "i_string_invalid_utf-8.json": "invalid_unicode",
    "i_string_inverted_surrogates_U+1D11E.json": "invalid_unicode",
    "i_string_iso_latin_1.json": "invalid_unicode",
    "i_string_lone_second_surrogate.json": "invalid_unicode",
    "i_string_lone_utf8_continuation_byte.json": "invalid_unicode",
    "i_string_not_in_unicode_range.json": "invalid_unicode",
    "i_string_overlong_sequence_2_bytes.json": "invalid_unicode",
    "i_string_overlong_sequence_6_bytes.json": "invalid_unicode",
    "i_string_overlong_sequence_6_bytes_null.json": "invalid_unicode",
    "i_string_truncated-utf-8.json": "invalid_unicode",
    "i_string_utf16BE_no_BOM.json": "invalid_unicode",
    "i_string_utf16LE_no_BOM.json": "invalid_unicode",
    # Structure: the depth bound, and no byte order mark.
    "i_structure_500_nested_arrays.json": "too_deep",
    "i_structure_UTF-8_BOM_empty_object.json": "bad_json",
}


def _files(prefix: str) -> list[str]:
    return sorted(path.name for path in CORPUS.glob(f"{prefix}*.json"))


def _decide(name: str, max_depth: int = MAX_DEPTH) -> str:
    """Parse one corpus file in a daemon thread; return "accept" or the refusing rule."""
    data = (CORPUS / name).read_bytes()
    outcome: list[str] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            loads(data, max_depth=max_depth)
        except Invalid as exc:
            outcome.append(exc.reason)
        except BaseException as exc:  # reported below: only Invalid is an allowed refusal
            failure.append(exc)
        else:
            outcome.append(ACCEPT)

    worker = threading.Thread(target=run, name=f"parse {name}", daemon=True)
    worker.start()
    worker.join(HANG_GUARD_SECONDS)
    if worker.is_alive():
        pytest.fail(f"{name}: still parsing after {HANG_GUARD_SECONDS} s")
    if failure:
        raise AssertionError(f"{name}: raised {failure[0]!r} instead of Invalid") from failure[0]
    return outcome[0]


def test_corpus_is_complete() -> None:
    # A truncated corpus would make the parametrized tests pass vacuously.
    assert len(_files("y_")) >= 90
    assert len(_files("n_")) >= 180
    assert _files("i_")


@pytest.mark.parametrize("name", _files("n_"))
def test_n_file_is_refused(name: str) -> None:
    assert _decide(name) != ACCEPT, f"{name} must be refused"


@pytest.mark.parametrize("name", _files("y_"))
def test_y_file_is_accepted_unless_a_rule_refuses_it(name: str) -> None:
    assert _decide(name) == Y_REFUSED.get(name, ACCEPT)


def test_y_refusals_name_real_files() -> None:
    assert set(Y_REFUSED) <= set(_files("y_"))


def test_every_i_file_has_a_documented_decision() -> None:
    present = set(_files("i_"))
    assert present - set(I_DECISIONS) == set(), "decide and document these i_ files"
    assert set(I_DECISIONS) - present == set(), "these decisions name no corpus file"


@pytest.mark.parametrize("name", _files("i_"))
def test_i_file_gets_its_documented_decision(name: str) -> None:
    assert name in I_DECISIONS, f"{name}: no documented decision"
    assert _decide(name) == I_DECISIONS[name]


def test_deep_nesting_is_a_bound_not_a_parser_limit() -> None:
    # The 500-deep array is refused by the bound alone; raised, the bound lets it through.
    assert _decide("i_structure_500_nested_arrays.json", max_depth=512) == ACCEPT


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _nested_objects(depth: int) -> str:
    return '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)


@pytest.mark.parametrize("make", [_nested, _nested_objects], ids=["arrays", "objects"])
def test_default_depth_bound_is_twenty(make: Callable[[int], str]) -> None:
    assert loads(make(20)) is not None
    with pytest.raises(Invalid) as refused:
        loads(make(21))
    assert refused.value.reason == "too_deep"


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    text = '["' + "[{" * 50 + '\\"' + "]}" * 10 + '"]'
    assert loads(text) == ["[{" * 50 + '"' + "]}" * 10]


def _documented_decisions() -> dict[str, str]:
    """The decisions table of docs/json-decisions.md, as file name -> decision."""
    decisions: dict[str, str] = {}
    doc = (REPO_ROOT / "docs" / "json-decisions.md").read_text(encoding="utf-8")
    for line in doc.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] == "rule" or not cells[2].startswith("`i_"):
            continue
        decision = ACCEPT if cells[0].startswith("accepted") else cells[0].strip("`")
        for name in cells[2].split(","):
            decisions[name.strip().strip("`") + ".json"] = decision
    return decisions


def test_decisions_document_matches_the_tested_decisions() -> None:
    assert _documented_decisions() == I_DECISIONS
