"""Polarity: does a claim say the opposite of the sentence it copies?

Overlap scores cannot see a negated copy ("X does not reduce Y" cited to "X reduces Y"
shares every content word), and the trained judge (operators/judge.py) misses some of them.
This rule aligns the claim with its support span word by word (after stemming) and looks
only at the places where they differ. An edit
made of nothing but polarity words flips the meaning: a negation cue put in or taken out
("not", "no", "never", "fails to", "without" …), a word swapped for its opposite
("increased" / "reduced", "required" / "dispensable", "stable" / "unstable"). An odd number of
such flips in a claim that otherwise copies its span means the claim contradicts it. An
edit that also changes content words (the claim leaves out a clause, adds a detail) is
not a flip: a claim that drops "but did not change Z" from its span still agrees with it.

The opposites are general-purpose direction words, not a list fitted to a corpus. The
rule only fires on near-copies, so a faithful paraphrase in other words is never read as
a negation. Pure functions.
"""

from __future__ import annotations

import difflib
import re
from functools import cache, lru_cache

from ragstream.connectors.lexical import tokenize

# "doesn't" -> "does not", "cannot" -> "can not", "it is not true that" -> "not"
_NORMALIZE = (
    (re.compile(r"\bcan't\b|\bcannot\b"), "can not"),
    (re.compile(r"n't\b"), " not"),
    (re.compile(r"\bit is (?:not true|false|not the case) that\b"), "not"),
)
_WORDS = re.compile(r"[a-z0-9]+")

# Opposite directions. A word of one side replaced by a word of the other flips the
# meaning; replaced by a word of the same side it is a paraphrase ("reduces" / "lowers").
_OPPOSITES = (
    (
        "increase increased increases increasing increment elevate elevated elevates raise "
        "raised raises rise rises higher highest more greater greatest larger largest "
        "enhance enhanced enhances enhancing promote promoted promotes promoting activate "
        "activated activates activating activation upregulate upregulated upregulates "
        "upregulation up overexpression stimulate stimulated stimulates stimulation induce "
        "induced induces inducing induction improve improved improves improving improvement "
        "gain gains augment augmented amplify amplified accelerate accelerated accelerates "
        "strengthen strengthened stronger better faster longer above exceed exceeds "
        "positive positively beneficial benefit benefits protective protects protect "
        "agonist sensitive sensitivity susceptible susceptibility",
        "decrease decreased decreases decreasing decrement reduce reduced reduces reducing "
        "reduction lower lowered lowers lowest fall falls less least fewer smaller smallest "
        "diminish diminished diminishes inhibit inhibited inhibits inhibiting inhibition "
        "suppress suppressed suppresses suppression downregulate downregulated "
        "downregulates downregulation down underexpression attenuate attenuated attenuates "
        "prevent prevented prevents preventing prevention impair impaired impairs worsen "
        "worsened worsens worsening loss losses decline declined declines slow slowed slows "
        "weaken weakened weaker worse slower shorter below negative negatively harmful "
        "harm harms detrimental damaging antagonist resistant resistance",
    ),
    ("required require requires necessary essential needed", "dispensable unnecessary redundant"),
    ("present presence", "absent absence missing"),
    ("significant significantly", "insignificant nonsignificant"),
    ("effective efficacious", "ineffective"),
    ("sufficient", "insufficient"),
    ("associated correlated linked", "unassociated uncorrelated unrelated unlinked"),
    ("include includes included", "exclude excludes excluded"),
    ("benign", "malignant"),
    ("early earlier", "late later"),
    ("all always", "some sometimes"),
    ("stable stability", "unstable instability"),
    ("safe safety", "unsafe toxic"),
)
_NEGATING_PREFIXES = ("un", "in", "im", "non", "dis", "ir", "il")


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """The analyzer's stem of one word, or the word itself when it is a stop word."""
    out = tokenize(word)
    return out[0] if out else word


@cache
def _sides() -> dict[str, set[int]]:
    """stem -> the opposite-pair sides it belongs to (pair index * 2 + side)."""
    sides: dict[str, set[int]] = {}
    for i, pair in enumerate(_OPPOSITES):
        for side, words in enumerate(pair):
            for word in words.split():
                sides.setdefault(stem(word), set()).add(2 * i + side)
    return sides


def words(text: str) -> list[str]:
    """Lower-cased words of `text`, contractions and "it is not true that" spelled out."""
    lowered = text.lower()
    for pattern, repl in _NORMALIZE:
        lowered = pattern.sub(repl, lowered)
    return _WORDS.findall(lowered)


# Quantity words an edit may add or drop without changing the content ("more stable").
OPTIONAL_WORDS = frozenset(words("more less most least some all any"))


# Words that negate what follows: each one in an edit flips the meaning once.
NEGATION_CUES = frozenset(
    words(
        "not no never none neither nor without fail fails failed failing lack lacks lacked "
        "lacking unable nothing nobody"
    )
)

# Words that carry grammar, not content: an edit may add or drop them ("reduces" -> "does
# not reduce") without changing what the claim is about.
FUNCTION_WORDS = frozenset(
    words(
        "a an the and or but if of to in on at by for with from into onto as than then so such "
        "is are was were be been being am do does did doing done has have had having can could "
        "may might will would shall should must it its this that these those there here which "
        "who whom whose what very also too quite rather yet still even only just"
    )
)


@lru_cache(maxsize=65536)
def _is_function_word(word: str) -> bool:
    return word in FUNCTION_WORDS or not tokenize(word)


def _opposed(a: str, b: str) -> bool:
    """`a` and `b` are opposites: in opposite sides of a pair, or one is the other with a
    negating prefix ("stable" / "unstable", "significant" / "nonsignificant")."""
    sa, sb = _sides().get(stem(a), set()), _sides().get(stem(b), set())
    if any((x ^ 1) in sb for x in sa) and not sa & sb:
        return True
    longer, shorter = (a, b) if len(a) > len(b) else (b, a)
    return any(longer == p + shorter for p in _NEGATING_PREFIXES) and len(shorter) > 3


def edit_flips(left: list[str], right: list[str]) -> int | None:
    """How many times one differing stretch flips the meaning, or None when it changes
    content (a word that is neither a negation cue, an opposite nor a function word)."""
    flips = sum(w in NEGATION_CUES for w in left) + sum(w in NEGATION_CUES for w in right)
    unmatched_right = [w for w in right if w not in NEGATION_CUES]
    for a in (w for w in left if w not in NEGATION_CUES):
        partner = next((b for b in unmatched_right if _opposed(a, b)), None)
        if partner is not None:
            unmatched_right.remove(partner)
            flips += 1
        elif not _is_function_word(a) and a not in OPTIONAL_WORDS:
            return None
    if any(not _is_function_word(b) and b not in OPTIONAL_WORDS for b in unmatched_right):
        return None
    return flips


def contradicts(span: str, claim: str, *, min_copied: float = 0.6) -> bool:
    """The claim copies `span` (at least `min_copied` of its words, stemmed, in order)
    except for edits that flip its meaning an odd number of times.

    >>> contradicts("Aspirin reduces stroke risk.", "Aspirin does not reduce stroke risk.")
    True
    >>> contradicts("Aspirin reduces stroke risk.", "Aspirin lowers stroke risk.")
    False
    >>> contradicts("X increased Y, but did not change Z.", "X increased Y.")
    False
    """
    left, right = words(span), words(claim)
    a, b = [stem(w) for w in left], [stem(w) for w in right]
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    copied = sum(size for _, _, size in matcher.get_matching_blocks())
    if not b or copied / len(b) < min_copied:
        return False
    flips = 0
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        changed = edit_flips(left[i1:i2], right[j1:j2])
        if changed:
            flips += changed
    return flips % 2 == 1
