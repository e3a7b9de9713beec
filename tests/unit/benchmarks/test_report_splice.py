"""benchmarks/report_splice.py: a partial benchmark run replaces what it
measured in BENCHMARKS.md and keeps every other block as it was written."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "benchmarks"))
import report_splice  # noqa: E402

OLD = """# psgd benchmarks

Generated on day 1.

## Machine

old machine

## Headlines

- a: 1.0x
- b: 2.0x
- c: 3.0x

## A

A's table, day 1

A note written by hand.

## B

B's table, day 1

Another note by hand.

## Findings: what was slow, what was fixed, what remains

old findings

## Time per section

old times
"""

NEW = """# psgd benchmarks

Generated on day 2.

## Machine

new machine

## Headlines

- a: 1.0x
- b: 2.5x
- c: 3.0x
- d: 4.0x

## A

A's table, day 1

## B

B's table, day 2

## D

D's table, day 2

## Findings: what was slow, what was fixed, what remains

new findings

## Time per section

new times
"""


def test_only_the_measured_blocks_and_headlines_change():
    text, missing = report_splice.splice(OLD, NEW, ["B", "D"], ["b: 2.0x"],
                                         ["b: 2.5x", "d: 4.0x"])
    assert missing == []
    assert "A note written by hand." in text            # A was not measured: kept
    assert "Another note by hand." not in text          # B was: as the run wrote it
    assert "B's table, day 2" in text and "D's table, day 2" in text
    assert text.index("## B") < text.index("## D") < text.index("## Findings")
    for owned in ("Generated on day 2.", "new machine", "new findings", "new times"):
        assert owned in text
    heads = [line for line in text.split("\n") if line.startswith("- ")]
    assert heads == ["- a: 1.0x", "- b: 2.5x", "- d: 4.0x", "- c: 3.0x"]


def test_a_headline_edited_by_hand_is_kept_and_named():
    edited = OLD.replace("- b: 2.0x", "- b: 2.0x (see below)")
    text, missing = report_splice.splice(edited, NEW, ["B"], ["b: 2.0x"], ["b: 2.5x"])
    assert missing == ["b: 2.0x"]
    heads = [line for line in text.split("\n") if line.startswith("- ")]
    assert heads == ["- a: 1.0x", "- b: 2.0x (see below)", "- c: 3.0x", "- b: 2.5x"]


def test_nothing_measured_changes_only_the_owned_blocks():
    text, _ = report_splice.splice(OLD, NEW, [], [], [])
    assert text == (OLD.replace("Generated on day 1.", "Generated on day 2.")
                    .replace("old machine", "new machine").replace("old findings", "new findings")
                    .replace("old times", "new times"))
