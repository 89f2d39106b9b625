"""Conversations: the pure parts of query/conversation.py (history bounds, the standalone
test, the offline rewrite, the LLM rewrite's check) as properties, and `QueryEngine.chat` on a
real index, where a follow-up only means something with its history.

The index, the embedder, both stores and every stage are real; the LLM is the
OpenAI-compatible stub (a test double at the generator boundary)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from conftest import Stub
from ragstream import api
from ragstream.connectors.lexical import tokenize
from ragstream.core.answers import Answer, ChatMessage, ChatRequest, QueryRequest
from ragstream.core.models import IndexedChunk
from ragstream.core.settings import ConversationSettings, Settings
from ragstream.core.source_config import FolderConfig
from ragstream.operators.embed import Embedder
from ragstream.query.answerable import (
    CHAT_WORDS,
    AnswerRule,
    Evidence,
    answering,
    new_terms,
    question_terms,
)
from ragstream.query.conversation import (
    Bounded,
    Rewriter,
    bounded,
    condense_prompt,
    parse_rewrite,
    smuggled,
    standalone_reasons,
)
from ragstream.query.engine import QueryEngine

VOLCANOES = {
    "vesuvius.md": "# Mount Vesuvius\n\nMount Vesuvius is a stratovolcano on the Gulf of Naples "
    "in Campania, Italy. Its eruption in AD 79 buried the Roman towns of Pompeii and "
    "Herculaneum. Vesuvius is 1,281 metres high. It last erupted in March 1944.\n",
    "etna.md": "# Mount Etna\n\nMount Etna is an active stratovolcano on the east coast of "
    "Sicily. It is the highest volcano in Europe outside the Caucasus, about 3,357 metres "
    "high, and one of the most active volcanoes in the world.\n",
    "mauna_loa.md": "# Mauna Loa\n\nMauna Loa is a shield volcano on the Island of Hawaii. "
    "It rises 4,169 metres above sea level. Its most recent eruption began in November "
    "2022.\n",
    "sourdough.md": "# Sourdough bread\n\nSourdough is leavened by a starter of wild yeast "
    "and lactobacilli. Bakers feed the starter flour and water, then proof the dough "
    "overnight.\n",
}
HISTORY = [
    {"role": "user", "content": "Which Roman towns did Mount Vesuvius bury in AD 79?"},
    {
        "role": "assistant",
        "content": "Its eruption in AD 79 buried the Roman towns of Pompeii and Herculaneum.",
    },
]
FOLLOW_UP = "How high is it?"

# --- the pure functions ----------------------------------------------------------------

messages = st.lists(
    st.builds(
        ChatMessage,
        role=st.sampled_from(["user", "assistant"]),
        content=st.text(min_size=1, max_size=40),
    ),
    max_size=30,
)


@given(messages, st.integers(0, 40), st.integers(0, 400))
def test_bounded_keeps_the_newest_messages_within_both_bounds(
    history: list[ChatMessage], turns: int, chars: int
) -> None:
    b = bounded(history, turns, chars)
    assert len(b.messages) <= turns
    assert sum(len(m.content) for m in b.messages) <= chars
    assert list(b.messages) == history[len(history) - len(b.messages) :]  # a suffix
    assert b.dropped == len(history) - len(b.messages)


def fixed_freqs(known: dict[str, int], documents: int = 100) -> Callable[..., Any]:
    def doc_freqs(terms: Any) -> tuple[int, dict[str, int]]:
        return documents, {t: known.get(t, 0) for t in terms}

    return doc_freqs


FREQS = fixed_freqs({t: 1 for t in tokenize("vesuvius roman towns bury pompeii")})
NO_BM25: Callable[[str], float] = lambda _: 0.0  # noqa: E731
WEAK: Callable[[str], float] = lambda _: 0.2  # noqa: E731  (a dense cosine below strong_dense)
HISTORY_READ = Bounded(tuple(ChatMessage.model_validate(m) for m in HISTORY))


def plan_of(question: str, dense: Callable[[str], float] = WEAK, **s: Any) -> Any:
    rewriter = Rewriter(ConversationSettings(**s))
    return rewriter.offline(question, HISTORY_READ, FREQS, NO_BM25, dense)


@given(st.text(min_size=1, max_size=80))
@settings(max_examples=60, deadline=None)
def test_the_offline_rewrite_only_adds_to_the_bm25_leg(question: str) -> None:
    plan = plan_of(question, not_standalone=("weak", "deictic", "short", "no_topic"))
    assert plan.dense == plan.question  # the dense leg embeds the effective question
    assert plan.question.startswith(question) and plan.sparse.startswith(question)
    assert plan.record.standalone == (plan.record.reasons == [])
    if plan.record.standalone:  # a question that stands alone comes out unchanged
        assert plan.sparse == plan.question == question and plan.record.rewrite == "none"


@given(st.text(min_size=1, max_size=80))
@settings(max_examples=30, deadline=None)
def test_no_history_means_no_rewrite(question: str) -> None:
    plan = Rewriter(ConversationSettings()).offline(question, Bounded(), FREQS, NO_BM25, WEAK)
    assert (plan.question, plan.dense, plan.sparse) == (question, question, question)
    assert plan.record.standalone and plan.record.rewrite == "none"


def test_a_follow_up_gains_the_topic_terms_of_earlier_turns() -> None:
    plan = plan_of(FOLLOW_UP, not_standalone=("weak", "deictic"))
    assert plan.record.reasons == ["weak", "deictic"]
    assert plan.record.rewrite == "offline" and "Vesuvius" in plan.record.added_terms
    assert plan.sparse.startswith(FOLLOW_UP) and "Vesuvius" in plan.sparse
    standalone = "Which Roman towns did the eruption of Mount Vesuvius bury?"
    assert plan_of(standalone, not_standalone=("deictic",)).sparse == standalone


words = st.text(st.sampled_from("abcdefgh sotwel"), min_size=1, max_size=40)


@given(words, st.lists(words, max_size=4), st.lists(words, min_size=1, max_size=6))
@settings(max_examples=80, deadline=None)
def test_a_follow_ups_answer_leads_with_a_word_the_turn_adds(
    turn: str, history: list[str], sentences: list[str]
) -> None:
    added = new_terms(turn, history)
    assert set(added) <= set(question_terms(turn)) - CHAT_WORDS
    assert not set(added) & {t for message in history for t in tokenize(message)}
    text = " ".join(f"{x}." for x in sentences)
    spans, start = [], 0
    for x in sentences:
        spans.append(Evidence(0, start, start + len(x) + 1, answers=0.9, covered=1.0))
        start += len(x) + 2
    chunk = IndexedChunk.model_construct(text=text, doc_id="d", non_prose=(), section_path=())
    plain = answering([chunk], spans, AnswerRule(floor=0.5))
    led = answering([chunk], spans, AnswerRule(floor=0.5), added)
    if not added:
        assert led == plain
        return
    holding = [i for i, x in enumerate(plain) if set(added) & set(tokenize(x))]
    if holding:  # the same sentences, the first that holds an added word first
        i = holding[0]
        assert led == [plain[i], *plain[:i], *plain[i + 1 :]]
    else:  # no sentence holds one: no answer
        assert led == []


def test_each_standalone_test_can_be_switched_off() -> None:
    s = ConversationSettings(not_standalone=("no_topic",))
    assert standalone_reasons("How high is it?", [], s, 5.0, best_dense=0.1) == ["no_topic"]


@given(st.text(min_size=1, max_size=80), st.floats(0.0, 1.0))
@settings(max_examples=60, deadline=None)
def test_a_question_that_retrieves_strongly_comes_out_unchanged(
    question: str, cosine: float
) -> None:
    """The default test reads the index: whatever the question's form (pronouns, a few
    words, no topic term), a best dense cosine at `strong_dense` or above leaves it as asked,
    and one below it is rewritten when the history has topic terms to carry."""
    strong = ConversationSettings().strong_dense
    plan = plan_of(question, lambda _: cosine)
    assert plan.record.standalone == (cosine >= strong)
    if cosine >= strong:
        assert (plan.question, plan.dense, plan.sparse) == (question, question, question)
        assert plan.record.rewrite == "none" and plan.record.reasons == []
    else:
        assert plan.record.reasons == ["weak"]


def test_the_dense_probe_is_read_only_when_the_weak_test_is_on() -> None:
    asked: list[str] = []

    def probe(text: str) -> float:
        asked.append(text)
        return 0.9

    assert plan_of(FOLLOW_UP, probe, not_standalone=("deictic",)).record.rewrite == "offline"
    assert asked == []
    assert plan_of(FOLLOW_UP, probe).record.rewrite == "none"
    assert asked == [FOLLOW_UP]


@given(st.lists(st.sampled_from(tokenize_words := ["volcano", "towns", "Pompeii", "high"])))
def test_a_rewrite_made_of_the_conversations_words_smuggles_nothing(picked: list[str]) -> None:
    history = [ChatMessage(role="assistant", content="The volcano buried towns like Pompeii.")]
    assert smuggled(" ".join(picked), "How high?", history) == []
    assert smuggled("How high is Krakatoa?", "How high?", history) == ["krakatoa"]


def test_the_condense_prompt_and_reply() -> None:
    history = [ChatMessage.model_validate(m) for m in HISTORY]
    prompt = condense_prompt(history, FOLLOW_UP)
    assert "User: Which Roman towns" in prompt.user and prompt.user.endswith(FOLLOW_UP)
    assert parse_rewrite("\n Standalone question: 'How high is Vesuvius?'\nmore") == (
        "How high is Vesuvius?"
    )


@pytest.mark.parametrize(
    "messages, where",
    [
        ([], "messages"),
        ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes"}], "messages"),
        ([{"role": "user", "content": "x" * 1_000_000}], "messages.0.content"),
        ([{"role": "user", "content": "q"}] * 10_000, "messages"),
        ([{"role": "system", "content": "q"}], "messages.0.role"),
        ([{"role": "user", "content": "   "}], "messages"),
    ],
    ids=["empty", "assistant-last", "1MB", "10k-turns", "system-role", "blank"],
)
def test_bad_conversations_are_typed_validation_errors(messages: list[Any], where: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ChatRequest(messages=messages)
    assert ".".join(map(str, caught.value.errors()[0]["loc"])) == where


# --- the engine on a real index --------------------------------------------------------


@pytest.fixture(scope="module")
def volcano_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    root = tmp_path_factory.mktemp("conversation") / "notes"
    root.mkdir()
    for name, text in VOLCANOES.items():
        (root / name).write_text(text, encoding="utf-8")
    s = Settings(
        data_dir=tmp_path_factory.mktemp("data"), sources=[FolderConfig(name="notes", root=root)]
    )
    s.query.log_queries = False
    report = api.sync([root], settings=s)
    assert report.docs_changed == len(VOLCANOES) and not report.dead_letters
    return s


@pytest.fixture(scope="module")
def engine(volcano_settings: Settings) -> Iterator[QueryEngine]:
    with QueryEngine.open(volcano_settings) as e:
        yield e


def chat(engine: QueryEngine, *turns: dict[str, str]) -> Answer:
    return engine.chat(ChatRequest(messages=[*turns]))  # type: ignore[list-item]


def cited(answer: Answer) -> set[str]:
    return {c.doc_id for c in answer.citations}


def test_a_follow_up_is_answered_from_its_history(engine: QueryEngine) -> None:
    with_history = chat(engine, *HISTORY, {"role": "user", "content": FOLLOW_UP})
    assert with_history.refusal is None, with_history.refusal
    assert cited(with_history) == {"notes:vesuvius.md"}
    assert "1,281" in with_history.text
    assert with_history.query == FOLLOW_UP
    eq, conv = with_history.effective_query, with_history.conversation
    assert eq is not None and conv is not None
    assert eq.dense == eq.question and "Vesuvius" in eq.sparse and eq.question in eq.sparse
    assert conv.rewrite == "offline" and not conv.standalone and conv.history_messages == 2
    alone = engine.answer(QueryRequest(query=FOLLOW_UP))
    assert alone.refusal is not None or cited(alone) != {"notes:vesuvius.md"}
    assert alone.effective_query is None and alone.conversation is None


def test_a_first_question_is_answered_as_a_query(engine: QueryEngine) -> None:
    question = HISTORY[0]["content"]
    as_chat = chat(engine, {"role": "user", "content": question})
    as_query = engine.answer(QueryRequest(query=question))
    assert as_chat.text == as_query.text and cited(as_chat) == cited(as_query)
    assert as_chat.conversation is not None and as_chat.conversation.standalone
    assert as_chat.effective_query is not None and as_chat.effective_query.sparse == question


@pytest.mark.parametrize(
    "follow_up",
    ["What did its eruption cost in dollars?", "Who was its first mayor?"],
)
def test_a_follow_up_about_what_the_documents_lack_is_refused(
    engine: QueryEngine, follow_up: str
) -> None:
    """The carried topic terms make every sentence about Vesuvius look relevant; none of them
    holds a word the turn adds ("cost", "dollars"; "first", "mayor"), so none answers it."""
    answer = chat(engine, *HISTORY, {"role": "user", "content": follow_up})
    assert answer.refusal is not None and answer.refusal.detail, answer.text
    assert answer.refusal.check == "generator" and not answer.citations
    added = [w for w in ("cost", "dollars", "first", "mayor") if w in follow_up]
    assert all(w in answer.refusal.detail for w in added), answer.refusal.detail
    assert answer.effective_query is not None and "Vesuvius" in answer.effective_query.sparse
    settings = engine.settings.model_copy(deep=True)
    settings.query.conversation.lead_shares_turn = False  # the rule off: answered, wrongly
    loose = QueryEngine(settings, engine.retriever, engine.models)
    assert chat(loose, *HISTORY, {"role": "user", "content": follow_up}).refusal is None


def test_a_follow_ups_answer_leads_with_what_the_turn_asks(engine: QueryEngine) -> None:
    """ "When did it last erupt?": the sentence holding "last" leads, not the AD 79 one that
    the carried terms rank first."""
    answer = chat(engine, *HISTORY, {"role": "user", "content": "When did it last erupt?"})
    assert answer.refusal is None and answer.text.startswith("It last erupted in March 1944")


def test_a_follow_up_that_stands_alone_is_encoded_once(
    engine: QueryEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The standalone test's dense probe and the dense leg search the same text: one
    encode serves both."""
    encoded: list[str] = []
    encode_queries = Embedder.encode_queries

    def counted(self: Embedder, texts: Sequence[str], batch_size: int = 64) -> Any:
        encoded.extend(texts)
        return encode_queries(self, texts, batch_size)

    monkeypatch.setattr(Embedder, "encode_queries", counted)
    question = "Which volcano is the highest in Europe outside the Caucasus?"
    messages = [*HISTORY, {"role": "user", "content": question}]
    got = engine.chat_retrieve(ChatRequest(messages=messages, generate=False))  # type: ignore[arg-type]
    assert got.effective_query is not None and got.effective_query.dense == question
    assert [r.doc_id for r in got.results[:1]] == ["notes:etna.md"]
    assert encoded == [question]


def test_a_long_history_is_truncated_from_the_oldest_turn(
    volcano_settings: Settings, engine: QueryEngine
) -> None:
    s = volcano_settings.model_copy(deep=True)
    s.query.conversation.max_turns = 2
    bounded_engine = QueryEngine(s, engine.retriever, engine.models)
    chatter = [{"role": "user", "content": "Tell me about sourdough."}] * 2 + HISTORY
    answer = bounded_engine.chat(
        ChatRequest(messages=[*chatter, {"role": "user", "content": FOLLOW_UP}])  # type: ignore[list-item]
    )
    assert answer.conversation is not None
    assert answer.conversation.dropped_messages == 2 and answer.conversation.history_messages == 2
    assert cited(answer) == {"notes:vesuvius.md"}


def test_chat_async_answers_as_chat_does(engine: QueryEngine) -> None:
    async def offload(fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.to_thread(fn, *args)

    request = ChatRequest(messages=[*HISTORY, {"role": "user", "content": FOLLOW_UP}])  # type: ignore[list-item]
    awaited = asyncio.run(engine.chat_async(request, offload=offload))
    blocking = engine.chat(request)
    assert awaited.text == blocking.text and awaited.effective_query == blocking.effective_query


def llm_engine(settings: Settings, engine: QueryEngine, stub: Stub) -> QueryEngine:
    s = settings.model_copy(deep=True)
    s.generator.base_url = stub.url
    return QueryEngine(s, engine.retriever, engine.models)


def test_the_llm_rewrite_runs_both_legs_and_the_answer_reads_the_history(
    volcano_settings: Settings, engine: QueryEngine, stub: Stub
) -> None:
    llm = llm_engine(volcano_settings, engine, stub)
    stub.replies += ["How high is Mount Vesuvius?", "Vesuvius is 1,281 metres high [S1]."]
    answer = chat(llm, *HISTORY, {"role": "user", "content": FOLLOW_UP})
    assert answer.effective_query is not None and answer.conversation is not None
    assert answer.conversation.rewrite == "llm"
    assert (
        answer.effective_query.dense
        == answer.effective_query.sparse
        == ("How high is Mount Vesuvius?")
    )
    assert cited(answer) == {"notes:vesuvius.md"}
    rewrite, written = (r["body"]["messages"] for r in stub.requests)
    assert FOLLOW_UP in rewrite[1]["content"] and "Pompeii" in rewrite[1]["content"]
    # the answer is written from the question as asked, with the history before it
    assert [m["role"] for m in written] == ["system", "user", "assistant", "user"]
    assert written[1]["content"] == HISTORY[0]["content"]
    assert f"Question: {FOLLOW_UP}" in written[-1]["content"]


def test_an_llm_rewrite_that_adds_its_own_terms_is_rejected(
    volcano_settings: Settings, engine: QueryEngine, stub: Stub
) -> None:
    llm = llm_engine(volcano_settings, engine, stub)
    stub.replies += ["How high is Mount Etna in Sicily?", "Vesuvius is 1,281 metres high [S1]."]
    answer = chat(llm, *HISTORY, {"role": "user", "content": FOLLOW_UP})
    assert answer.conversation is not None
    assert answer.conversation.rewrite == "offline"
    assert set(answer.conversation.llm_rejected) == {"etna", "sicili"}


def test_no_llm_call_for_a_first_or_standalone_question(
    volcano_settings: Settings, engine: QueryEngine, stub: Stub
) -> None:
    llm = llm_engine(volcano_settings, engine, stub)
    stub.default = "Vesuvius buried Pompeii and Herculaneum [S1]."
    chat(llm, {"role": "user", "content": HISTORY[0]["content"]})
    chat(llm, *HISTORY, {"role": "user", "content": "How high is Mount Vesuvius in metres?"})
    assert len(stub.requests) == 2  # the two answers; no rewrite call
    assert all(r["body"]["messages"][0]["content"].startswith("You answer") for r in stub.requests)
