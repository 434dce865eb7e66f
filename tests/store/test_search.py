"""Full-text search over every message of every thread."""

from __future__ import annotations

import pytest

from store import (
    NewMessage,
    SearchQueryError,
    Store,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from store._search import MAX_TERMS

from .helpers import assistant, user


async def _corpus(store: Store) -> dict[str, str]:
    lead = await store.create_thread(
        kind="lead",
        messages=[
            user("Make the tokenizer tests pass"),
            NewMessage(
                role="assistant",
                content=[
                    ThinkingBlock(thinking="the lexer probably mishandles unicode"),
                    ToolUseBlock(id="tu1", name="bash", input={"command": "pytest -x tests"}),
                ],
            ),
            NewMessage(
                role="user",
                content=[
                    ToolResultBlock(
                        tool_use_id="tu1",
                        content="1 failed: ZeroDivisionError at parser.py:12 in parse_expr",
                    )
                ],
            ),
            assistant("The parser divides by zero on empty input."),
        ],
    )
    worker = await store.create_thread(
        kind="worker", parent_id=lead.id, messages=[user("Fix ZeroDivisionError in parser.py")]
    )
    other = await store.create_thread(
        kind="lead", messages=[user("unrelated job about ZeroDivisionError too")]
    )
    return {"lead": lead.id, "worker": worker.id, "other": other.id}


async def test_search_finds_messages_as_refs_with_snippets(store: Store) -> None:
    ids = await _corpus(store)
    hits = await store.search("tokenizer")
    assert [h.ref for h in hits] == [f"T-{ids['lead']}#1"]
    hit = hits[0]
    assert (hit.thread_id, hit.seq, hit.role) == (ids["lead"], 1, "user")
    assert "tokenizer" in hit.snippet and "\n" not in hit.snippet


async def test_search_covers_thinking_tool_inputs_and_tool_outputs(store: Store) -> None:
    ids = await _corpus(store)
    lead = ids["lead"]
    assert [h.ref for h in await store.search("unicode")] == [f"T-{lead}#2"]
    assert [h.ref for h in await store.search("pytest")] == [f"T-{lead}#2"]
    assert [h.ref for h in await store.search("parse_expr")] == [f"T-{lead}#3"]


async def test_search_requires_every_word(store: Store) -> None:
    ids = await _corpus(store)
    assert [h.ref for h in await store.search("parser zero")] == [f"T-{ids['lead']}#4"]
    assert await store.search("parser giraffe") == []


async def test_search_can_be_limited_to_one_job(store: Store) -> None:
    ids = await _corpus(store)
    everywhere = {h.thread_id for h in await store.search("ZeroDivisionError")}
    assert everywhere == {ids["lead"], ids["worker"], ids["other"]}
    in_job = await store.search("ZeroDivisionError", job_id=ids["lead"])
    assert {h.thread_id for h in in_job} == {ids["lead"], ids["worker"]}
    assert len(await store.search("ZeroDivisionError", limit=1)) == 1


@pytest.mark.parametrize(
    "query", ["parser.py:12", "parser.py", "at parser.py:12 in", '"parser.py"']
)
async def test_punctuation_in_a_query_is_literal(store: Store, query: str) -> None:
    ids = await _corpus(store)
    hits = await store.search(query)
    assert f"T-{ids['lead']}#3" in [h.ref for h in hits]
    assert all("parser" in h.snippet for h in hits)


async def test_a_quoted_phrase_must_match_in_order(store: Store) -> None:
    ids = await _corpus(store)
    assert [h.ref for h in await store.search('"divides by zero"')] == [f"T-{ids['lead']}#4"]
    assert await store.search('"zero by divides"') == []


ONLY_PUNCTUATION = ["", "   ", "...", ":", '"', '""', "-", "*", "()", "#!@", "'", "::: ---"]
SYNTAX = ["NOT parser", "parser AND", "parser OR", "NEAR(parser zero)", "text:parser", "parser*"]


async def test_a_query_of_only_punctuation_returns_nothing_without_error(store: Store) -> None:
    await _corpus(store)
    for query in ONLY_PUNCTUATION:
        assert await store.search(query) == [], query


async def test_query_syntax_words_and_characters_never_raise(store: Store) -> None:
    await _corpus(store)
    for query in [*SYNTAX, "(x", "x)", '"unbalanced', "^parser", "parser + zero", "a:b:c"]:
        await store.search(query)


async def test_a_forks_inherited_messages_are_found_once_under_their_owner(store: Store) -> None:
    ids = await _corpus(store)
    fork = await store.fork(ids["lead"], at=4, messages=[user("what about the tokenizer then")])
    refs = [h.ref for h in await store.search("tokenizer")]
    assert sorted(refs) == sorted([f"T-{ids['lead']}#1", f"T-{fork.id}#5"])


async def test_a_nul_in_a_query_separates_words(store: Store) -> None:
    """A web or MCP query may hold a NUL (no shell can pass one): it was an FTS5 syntax error,
    a 500 page on the web viewer."""
    await _corpus(store)
    for query in ("\x00", "ZeroDivisionError\x00parser", '"ZeroDivisionError\x00in"'):
        hits = await store.search(query)
        assert [(h.thread_id, h.seq) for h in hits] == [
            (h.thread_id, h.seq) for h in await store.search(query.replace("\x00", " "))
        ]
    assert await store.search("\x00") == []


async def test_a_repeated_word_counts_once_and_too_many_words_are_refused(store: Store) -> None:
    """Each different word or phrase ranks every hit again: a pasted page of text ran for
    minutes. A repeated one adds nothing to the search; more than MAX_TERMS different ones is
    an error saying so."""
    await _corpus(store)
    once = await store.search("parser")
    assert await store.search(" ".join(["parser", "PARSER", '"parser"'] * 300)) == once
    words = " ".join(f"w{i}" for i in range(MAX_TERMS))
    assert await store.search(words) == []  # as many as a search takes
    with pytest.raises(
        SearchQueryError, match=rf"65 different words or phrases: at most {MAX_TERMS}"
    ):
        await store.search(words + " one-more")


async def test_a_snippet_keeps_its_brackets_and_says_where_its_matches_are(store: Store) -> None:
    # the snippet is the text as written — brackets, the ⟦ ⟧ a piped search prints, and the
    # private-use characters the store marks matches with internally — and each match is
    # known by its offsets, never by what surrounds it
    text = "emit _BINARY[op] then [op] again; ⟦op⟧ and \ue000op\ue001 stay text"
    made = await store.create_thread(kind="lead", messages=[user(text)])
    [hit] = await store.search("op")
    assert hit.thread_id == made.id
    assert "_BINARY[op]" in hit.snippet and "⟦op⟧" in hit.snippet
    assert "\ue000op\ue001" in hit.snippet
    assert hit.marks and all(hit.snippet[a:b].lower() == "op" for a, b in hit.marks)
    assert [hit.snippet[a - 1 : b + 1] for a, b in hit.marks][:3] == ["[op]", "[op]", "⟦op⟧"]
    [both] = await store.search("then op")
    assert {both.snippet[a:b].lower() for a, b in both.marks} == {"then", "op"}
