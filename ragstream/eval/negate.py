"""Negating a statement by rule: the contradictions the support judge learns and is tested on.

A claim that negates its source ("X does not reduce Y" cited to "X reduces Y") is the
verification failure lexical or embedding overlap cannot see: the two share every content
word. SciFact has only a few hundred labelled contradictions, so the trainer makes more from
supporting sentences with these rules, and the evaluation measures the verifier on negations
made from claims it never trained on. Pure functions, deterministic.
"""

from __future__ import annotations

import re

_AUX = "is are was were can could may might will would should must has have had does do did shall"
AUXILIARY = re.compile(r"\b(" + "|".join(_AUX.split()) + r")\b(?!\s+not\b|n't)", re.IGNORECASE)
_NEGATED = [
    (re.compile(r"\bcannot\b", re.I), "can"),
    (
        re.compile(
            r"\b(is|are|was|were|does|do|did|has|have|had|can|could|may|might|will|would"
            r"|should|must)\s+not\b",
            re.I,
        ),
        r"\1",
    ),
    (
        re.compile(r"\b(is|are|was|were|does|do|did|has|have|had|could|would|should)n't\b", re.I),
        r"\1",
    ),
    (re.compile(r"\bno longer\b", re.I), "still"),
    (re.compile(r"\bno\b", re.I), "some"),
]
_ANTONYMS = {
    "increase": "decrease",
    "increases": "decreases",
    "increased": "decreased",
    "increasing": "decreasing",
    "higher": "lower",
    "more": "less",
    "greater": "smaller",
    "reduces": "increases",
    "reduced": "increased",
    "reduce": "increase",
    "improves": "worsens",
    "improved": "worsened",
    "positive": "negative",
    "positively": "negatively",
    "enhances": "inhibits",
    "enhanced": "inhibited",
    "promotes": "inhibits",
    "promoted": "inhibited",
    "activates": "inhibits",
    "activated": "inhibited",
    "upregulates": "downregulates",
    "upregulated": "downregulated",
    "up-regulated": "down-regulated",
    "elevated": "reduced",
    "raises": "lowers",
    "associated": "unassociated",
    "effective": "ineffective",
    "beneficial": "harmful",
    "induces": "prevents",
    "induced": "prevented",
    "required": "dispensable",
    "necessary": "unnecessary",
    "significant": "insignificant",
    "present": "absent",
}
_ANTONYMS.update({v: k for k, v in list(_ANTONYMS.items()) if v not in _ANTONYMS})
_WORD = re.compile(r"[A-Za-z][A-Za-z-]*")


def negate(statement: str) -> str:
    """The statement's negation, made by the first rule that applies.

    1. remove an existing negation ("is not" -> "is", "cannot" -> "can");
    2. insert "not" after the first auxiliary or copula ("is" -> "is not");
    3. swap the first directional word for its opposite ("increases" -> "decreases");
    4. otherwise prefix "It is not true that".

    >>> negate("Aspirin reduces the risk of stroke.")
    'Aspirin increases the risk of stroke.'
    >>> negate("The effect was significant in mice.")
    'The effect was not significant in mice.'
    >>> negate("Smoking does not cause cancer.")
    'Smoking does cause cancer.'
    >>> negate("There was no difference between groups.")
    'There was some difference between groups.'
    >>> negate("Cells divide.")
    'It is not true that cells divide.'
    """
    text = statement.strip()
    for pattern, repl in _NEGATED:
        found = pattern.search(text)
        if found:
            out = pattern.sub(repl, text, count=1)
            return out[:1].upper() + out[1:] if found.start() == 0 else out
    aux = AUXILIARY.search(text)
    words = list(_WORD.finditer(text))
    swap = next((w for w in words if w.group().lower() in _ANTONYMS), None)
    if swap is not None and (aux is None or swap.start() < aux.start()):
        return _replace_word(text, swap)
    if aux is not None:
        return f"{text[: aux.end()]} not{text[aux.end() :]}"
    if swap is not None:
        return _replace_word(text, swap)
    return "It is not true that " + (text[:1].lower() + text[1:] if text[1:2].islower() else text)


def _replace_word(text: str, match: re.Match[str]) -> str:
    word = match.group()
    other = _ANTONYMS[word.lower()]
    if word[:1].isupper():
        other = other[:1].upper() + other[1:]
    return text[: match.start()] + other + text[match.end() :]


def questions(statement: str) -> list[str]:
    """Questions the statement answers, made by rule: "Is it true that …?", the yes/no
    inversion around the first auxiliary ("X is Y." -> "Is X Y?"), and the wh-question
    that asks for its subject ("X is Y." -> "What is Y?").

    People ask questions; SciFact states claims. The judge trains on both so that a
    question is read like the claim it asks about.

    >>> for q in questions("The effect was significant in mice."):
    ...     print(q)
    Is it true that the effect was significant in mice?
    Was the effect significant in mice?
    What was significant in mice?
    """
    text = statement.strip().rstrip(".!?;: ")
    if not text:
        return []
    lowered = text[:1].lower() + text[1:] if text[1:2].islower() else text
    out = [f"Is it true that {lowered}?"]
    aux = AUXILIARY.search(text)
    if aux is not None and aux.start() > 0:
        subject = text[: aux.start()].strip()
        subject = subject[:1].lower() + subject[1:] if subject[1:2].islower() else subject
        verb = aux.group()
        out.append(f"{verb[:1].upper()}{verb[1:].lower()} {subject}{text[aux.end() :]}?")
        out.append(f"What {verb.lower()}{text[aux.end() :]}?")
    return out
