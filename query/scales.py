"""The cosine scale each side's embedder is read on, measured once and kept in the data dir.

The gate's dense floor and the answerability decision read cosines on the scale of the
embedder the decision was fitted with (`Decision.embedder`; without a decision, the default
preset the gate's floor was fitted on). A side built with another embedder has its cosines
mapped onto that scale (operators/cosine_scale.py): measured on the side's own live chunks
the first time a query (or the server's warm-up) needs it, kept under
`<state_dir>/scales/<slug>.json`, and measured again once the collection has grown to twice
the chunks it was measured on. A reference that cannot be loaded here, or
`query.cosine_scale = false`, reads every cosine raw.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from ragstream.core.jsonfile import read_json, write_json_atomic
from ragstream.core.models import name_slug
from ragstream.core.settings import Settings
from ragstream.core.telemetry import span
from ragstream.operators.cosine_scale import SAMPLE_CHUNKS, CosineScale, measure_scale
from ragstream.operators.embed import PRESET_MODELS, Embedder, load_embedder
from ragstream.query.decision import Decision
from ragstream.query.retrieve import LiveSide

log = logging.getLogger(__name__)

DEFAULT_REFERENCE = "minilm-l6"  # the gate's default floor was fitted on its cosines
PAGE = 8 * SAMPLE_CHUNKS  # live chunks read to draw the sample from
GROWTH = 2.0  # measured again once the collection holds this many times the chunks


def reference_preset(decision: Decision | None) -> str | None:
    """The preset whose cosines the floors mean, told by its model's name alone (no model
    opened, so `status` can ask too): the one the decision was fitted on, the default
    preset without a decision; None when the decision names an embedder that is no preset
    (a user's refit reads its own embedder's cosines, and only those).

    >>> reference_preset(None)
    'minilm-l6'
    """
    if decision is None or not decision.embedder:
        return DEFAULT_REFERENCE
    named = (
        s for m, s in PRESET_MODELS.items() if decision.embedder.startswith(f"{name_slug(m)}-")
    )
    return next(named, None)


def reference_embedder(decision: Decision | None) -> Embedder | None:
    """The reference preset (`reference_preset`), when it is the very version the decision
    was fitted on."""
    spec = reference_preset(decision)
    if spec is None:
        return None
    embedder = load_embedder(spec)
    fitted = decision.embedder if decision is not None else ""
    return embedder if not fitted or embedder.version.slug == fitted else None


class CosineScales:
    """Each side's `CosineScale`, by its embedder's version slug."""

    def __init__(self, settings: Settings, decision: Decision | None) -> None:
        self._dir: Path | None = settings.scales_dir if settings.query.cosine_scale else None
        self._decision = decision
        self._known: dict[str, CosineScale] = {}
        self._lock = threading.Lock()

    def of(self, side: LiveSide) -> CosineScale:
        """The scale `side`'s cosines are read on (the identity when none applies)."""
        slug = side.embedder.version.slug
        known = self._known.get(slug)
        if known is not None:
            return known
        with self._lock:
            if slug in self._known:
                return self._known[slug]
            scale, final = self._scale(side)
            if final:  # else measured again by the next query: the index is still too small
                self._known[slug] = scale
            return scale

    def _scale(self, side: LiveSide) -> tuple[CosineScale, bool]:
        """The side's scale, and whether it is final for this process."""
        slug = side.embedder.version.slug
        reference = reference_embedder(self._decision) if self._dir is not None else None
        if self._dir is None or reference is None or reference.version.slug == slug:
            return CosineScale(slug, reference.version.slug if reference else slug), True
        path = self._dir / f"{slug}.json"
        count = side.vectors.count("live")
        kept = _kept(path)  # a file that is no scale is measured again, never fatal
        current = kept is not None and kept.reference == reference.version.slug
        if kept is not None and current and count < GROWTH * max(kept.chunks, 1):
            return kept, True
        with span("query.cosine_scale", embedder=slug, reference=reference.version.slug) as sp:
            sample = next(iter(side.vectors.live_pages(PAGE)), [])
            scale = measure_scale(side.embedder, reference, sample, count)
            sp.set_attribute("pairs", scale.pairs)
        if not scale.identity:
            write_json_atomic(path, scale.to_json())
            log.info("cosine scale of %s measured on %d pairs", slug, scale.pairs)
        return scale, not scale.identity


def _kept(path: Path) -> CosineScale | None:
    raw = read_json(path, None)
    try:
        return CosineScale.from_json(raw) if isinstance(raw, dict) else None
    except ValueError:
        return None


__all__ = ["DEFAULT_REFERENCE", "CosineScales", "reference_embedder", "reference_preset"]
