"""Refs by their end (SPEC wave 3, issue 23 item 11) where they are written rather than
resolved: parsed back to the same text, and linked by the web viewer as what they are."""

from __future__ import annotations

import pytest

from orchestrator.web._views import ref_url
from store import ThreadRef

END = "x2p4abcd"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (f"T-…{END}", f"T-…{END}"),
        (f"T-...{END}", f"T-…{END}"),
        (f"T-…{END}#3", f"T-…{END}#3"),
        (f"T-...{END}#3-9", f"T-…{END}#3-9"),
        (f"T-…{END}#3-", f"T-…{END}#3-"),
    ],
)
def test_a_ref_by_its_end_reads_back_as_written(text: str, shown: str) -> None:
    ref = ThreadRef.parse(text)
    assert ref.suffix and ref.id == END and str(ref) == shown
    assert str(ThreadRef.parse(str(ref))) == shown
    assert ref.matches("0" * 18 + END) and not ref.matches(END + "0" * 18)


def test_the_viewer_links_a_ref_by_its_end_to_the_thread_it_names() -> None:
    assert ref_url(f"T-…{END}") == f"/t/T-…{END}"
    assert ref_url(f"T-...{END}#3") == f"/t/T-…{END}#3"
    assert ref_url(f"T-{END}#3") == f"/t/T-{END}#3"  # a start stays a start
