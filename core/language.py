"""Languages and scripts: what a text is written in, and what reading it takes.

A `Language` holds what the modules that read text need to know about one language: whether
its words are delimited by spaces (Chinese and Japanese are not; Korean is, but its
particles stay attached to its words), where its sentences end, and whether the
English-trained models (the answer judge, the answerability decision, the support judge)
can read it. `detect` picks one for a text from its letters: script ranges first (Hangul:
Korean; kana: Japanese; Han alone: Chinese), then, for Latin text, the function words and
letters of the common European languages against English's. English wins every tie, so a
short English query of content words alone stays English.

The lexical analyzer is one for a whole index, whatever the language of each document or
question, so that a question matches a document written in another language on the words
they share (a name, a number, a term quoted in its own script): runs of CJK characters are
cut into overlapping bigrams (a lone character is a unigram), as Lucene's CJKAnalyzer and
Elasticsearch's `cjk_bigram` do; any other script is cut into words at Unicode boundaries
(`cjk_runs` splits the two). Full-width Latin letters and digits and half-width katakana
are read in their usual forms first (`normalized`).

Pure functions.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

# Han (with its radicals, compatibility forms and extensions), kana, Hangul (syllables and
# jamo), and the marks that live inside CJK words (々 〆 〇, the iteration marks)
CJK_CHARS = (
    "\u1100-\u11ff\u2e80-\u2fdf\u3005-\u3007\u3021-\u3029\u3031-\u3035\u3040-\u309f"
    "\u30a0-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f"
    "\uac00-\ud7ff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f"
)
_CJK_RUN = re.compile(f"[{CJK_CHARS}]+")
_HAN = re.compile(
    "[\u2e80-\u2fdf\u3005-\u3007\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]"
)
_KANA = re.compile("[\u3040-\u309f\u30a0-\u30ff\u31f0-\u31ff\uff66-\uff9f]")
_HANGUL = re.compile("[\u1100-\u11ff\u3130-\u318f\ua960-\ua97f\uac00-\ud7ff]")
_LATIN_WORD = re.compile(r"[^\W\d_]+")
# where a sentence ends without a space after it: the ideographic full stop and the
# full-width marks, with the closing brackets and quotes that may follow them
CJK_SENTENCE_END = "。！？｡"
CJK_CLOSERS = "」』）】〕〉》”’\"')"
DETECT_CHARS = 4000  # a text's first characters decide its language


@dataclass(frozen=True)
class Language:
    """One language as the modules that read text see it."""

    code: str  # ISO 639-1 ("und": a script or language not told apart here)
    name: str
    spaced: bool = True  # words are delimited by spaces
    trained_models: bool = False  # the English-trained judges and decision read it
    # the analyzed terms of how a question is asked in it, not what it is about: its
    # interrogatives and question endings, as bigrams for CJK (none: English's are the
    # answer path's own, `query.answerable.QUESTION_WORDS`)
    question_terms: frozenset[str] = frozenset()

    @property
    def cjk(self) -> bool:
        return self.code in ("zh", "ja", "ko")


def bigrams(run: str) -> list[str]:
    """A CJK run's overlapping character bigrams; a run of one character is its unigram.

    >>> bigrams("扁豆汤"), bigrams("汤")
    (['扁豆', '豆汤'], ['汤'])
    """
    return [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]


def _terms(words: str) -> frozenset[str]:
    """Interrogatives written out as the bigrams the analyzer cuts them into."""
    return frozenset(g for w in words.split() for g in bigrams(w))


ENGLISH = Language("en", "English", trained_models=True)
CHINESE = Language(
    "zh",
    "Chinese",
    spaced=False,
    question_terms=_terms(
        "是什么 为什么 什么时候 哪里 哪个 哪些 哪一 哪儿 多少 怎么 怎样 如何 是否 是谁 谁是 "
        "几个 第几 有几 吗 呢 请问"
    ),
)
JAPANESE = Language(
    "ja",
    "Japanese",
    spaced=False,
    question_terms=_terms(
        "いつ どこ だれ 誰が 誰で 誰の なに なん 何を 何が 何と 何の 何で 何か 何年 何人 "
        "どの どれ どう どんな ですか ますか でしょうか のは とは は何 は誰 "
        "のはいつですか のはどこですか のは誰ですか のは何ですか とは何ですか "
        "何という いくつ いくら"
    ),
)
KOREAN = Language(
    "ko",
    "Korean",
    question_terms=_terms(
        "무엇 무엇인가 누구 누가 언제 어디 어디에 어느 어떤 어떻게 왜 몇 입니까 인가요 나요"
    ),
)
UNDETERMINED = Language("und", "another language")
_EUROPEAN = {
    "de": Language("de", "German"),
    "fr": Language("fr", "French"),
    "es": Language("es", "Spanish"),
    "it": Language("it", "Italian"),
    "pt": Language("pt", "Portuguese"),
    "nl": Language("nl", "Dutch"),
}
LANGUAGES = {
    lang.code: lang for lang in (ENGLISH, CHINESE, JAPANESE, KOREAN, UNDETERMINED)
} | _EUROPEAN

# function words that are frequent in one language and not words of English (so "die",
# "in", "is", "an" are in no list), and the letters only that language writes
_FUNCTION_WORDS = {
    "en": "the of and to is was are for that with on by from this what who which when how "
    "where why does did have has were been not or it its they their there in an a as at be "
    "he she his her we you can will would should may also than then into only more most "
    "such these those our",
    "de": "der das und ist nicht ein eine einer mit von zu den dem des sich auf für wie wer "
    "wann warum welche welcher welches im auch werden wurde oder über nach bei",
    "fr": "le la les des une est et du dans qui que pour pas sur avec ce cette sont au aux "
    "où quel quelle quand comment pourquoi il elle être été",
    "es": "el los las del y es un una que por con para se qué cómo cuándo dónde quién lo "
    "como pero más su sus fue",
    "it": "il lo gli della di che è per con non sono chi come quando dove perché del della "
    "una degli questo",
    "pt": "os da do dos das não é em com para uma que quem como onde quando foi são mais",
    "nl": "het een van niet dat wie wat waar hoe met voor zijn werd ook naar",
}
_FUNCTION = {code: frozenset(words.split()) for code, words in _FUNCTION_WORDS.items()}
_LETTERS = {"de": "äöüß", "fr": "éèêàçœëîôù", "es": "ñ¿¡áíóú", "pt": "ãõâç", "it": "àèìòù"}


_WIDTH_FORMS = re.compile("[\uff01-\uff5e\uff61-\uff9f]+")


def normalized(text: str) -> str:
    """Full-width Latin letters, digits and signs, and half-width katakana, in their usual
    forms (NFKC on the Halfwidth and Fullwidth Forms block only, as Lucene's
    CJKWidthFilter): any other character is left as written.

    >>> normalized("Ｒｕｓｔ ２０２６ ｶﾞｲﾄﾞ µg ﬁ")
    'Rust 2026 ガイド µg ﬁ'
    """
    return _WIDTH_FORMS.sub(lambda m: unicodedata.normalize("NFKC", m.group()), text)


def cjk_runs(text: str) -> Iterator[tuple[str, bool]]:
    """The text as alternating pieces, each with whether it is a run of CJK characters.

    >>> list(cjk_runs("Python的作者 is 吉多"))
    [('Python', False), ('的作者', True), (' is ', False), ('吉多', True)]
    """
    at = 0
    for m in _CJK_RUN.finditer(text):
        if m.start() > at:
            yield text[at : m.start()], False
        yield m.group(), True
        at = m.end()
    if at < len(text):
        yield text[at:], False


def word_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each word-sized unit: a whitespace-delimited piece of a spaced script,
    and each character of a CJK run (what a budget in words counts in text without spaces).

    >>> [("a 東京 b"[s:e]) for s, e in word_spans("a 東京 b")]
    ['a', '東', '京', 'b']
    """
    out: list[tuple[int, int]] = []
    for m in re.finditer(r"\S+", text):
        at = m.start()
        for piece, cjk in cjk_runs(m.group()):
            if cjk:
                out.extend((at + i, at + i + 1) for i in range(len(piece)))
            else:
                out.append((at, at + len(piece)))
            at += len(piece)
    return out


def join_spans(text: str, spans: list[tuple[int, int]]) -> str:
    """The units `spans` of `text` (from `word_spans`), space-separated where the text had
    space between them and glued where it had none.

    >>> join_spans("a  b 東京", word_spans("a  b 東京"))
    'a b 東京'
    """
    out = []
    for i, (start, end) in enumerate(spans):
        if i and spans[i - 1][1] < start:
            out.append(" ")
        out.append(text[start:end])
    return "".join(out)


_SENTENCE_CUT = re.compile(f"(?:[{CJK_SENTENCE_END}]|[!?](?=[{CJK_CHARS}]))[{CJK_CLOSERS}]*")


def cjk_sentence_ends(text: str) -> list[int]:
    """Offsets just past each sentence end that needs no space after it (`。！？`, and `!?`
    before a CJK character), closing brackets and quotes included, the text's end excluded.

    >>> text = "東京は首都です。人口は多い！「本当？」そう。"
    >>> [text[:i][-2:] for i in cjk_sentence_ends(text)]
    ['す。', 'い！', '？」']
    """
    return [m.end() for m in _SENTENCE_CUT.finditer(text) if text[m.end() :].strip()]


def _script_counts(text: str) -> Counter[str]:
    sample = text[:DETECT_CHARS]
    counts: Counter[str] = Counter(
        han=len(_HAN.findall(sample)),
        kana=len(_KANA.findall(sample)),
        hangul=len(_HANGUL.findall(sample)),
    )
    cjk = counts["han"] + counts["kana"] + counts["hangul"]
    letters = sum(1 for c in sample if c.isalpha())
    counts["latin"] = sum(1 for c in sample if "a" <= c.lower() <= "z" or "\u00c0" <= c <= "\u024f")
    counts["other"] = max(0, letters - cjk - counts["latin"])
    return counts


def _european(text: str) -> Language:
    """English, or the European language whose distinct function words and letters outnumber
    English's (at least two of them)."""
    words = {w.casefold() for w in _LATIN_WORD.findall(text[:DETECT_CHARS])}
    letters = set("".join(words))
    score = {code: len(words & vocab) for code, vocab in _FUNCTION.items()}
    for code, own in _LETTERS.items():
        score[code] += len(letters & set(own))
    best = max(_EUROPEAN, key=lambda code: score[code])
    if score[best] >= 2 and score[best] > score["en"]:
        return _EUROPEAN[best]
    return ENGLISH


def detect(text: str) -> Language:
    """The language a text is written in, from its letters.

    A text at least 30 % CJK letters reads as Chinese, Japanese or Korean (kana make it Japanese,
    Hangul Korean); a text mostly in another non-Latin script is `UNDETERMINED`; Latin text is
    English unless another European language's words outnumber English's.

    >>> questions = ("扁豆汤是什么？", "東京の人口は何人ですか", "서울은 어디에 있나요?")
    >>> [detect(t).code for t in questions]
    ['zh', 'ja', 'ko']
    >>> [detect(t).code for t in ("pompeii eruption date", "Wer hat die Glühbirne erfunden?")]
    ['en', 'de']
    >>> detect("What does 扁豆汤 mean?").code, detect("Что такое Python?").code
    ('en', 'und')
    """
    counts = _script_counts(text)
    cjk = counts["han"] + counts["kana"] + counts["hangul"]
    letters = cjk + counts["latin"] + counts["other"]
    if not letters:
        return ENGLISH
    if cjk >= 0.3 * letters:
        if counts["hangul"] > counts["kana"] and counts["hangul"] >= counts["han"]:
            return KOREAN
        return JAPANESE if counts["kana"] > 0.05 * cjk else CHINESE
    if counts["other"] > counts["latin"]:
        return UNDETERMINED
    return _european(text)


def language_of(code: str | None, text: str) -> Language:
    """The language `code` names (a source's setting), else the one `detect` reads in `text`."""
    if code:
        return LANGUAGES.get(code.split("-")[0].casefold(), UNDETERMINED)
    return detect(text)
