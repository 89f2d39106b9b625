"""`ragstream tune`: train models for this index's corpus, with a progress bar
per phase (mining, then each model) on stderr; `--json` keeps stdout to one JSON object."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from pydantic import BaseModel
from rich.progress import (
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)

from ragstream.cli.options import AsJson
from ragstream.cli.render import BAR_COLUMNS, err, out

Steps = Callable[[int, int], None]
PHASES = {
    "mine": "mining candidates",
    "reranker": "training reranker",
    "embedder": "training embedder",
}


@contextmanager
def phase_bars() -> Iterator[Callable[[str], Steps]]:
    """`bars(phase)` is the (done, total) callback of that phase's bar, added on first use."""
    columns = (TextColumn("{task.description:<18}"), *BAR_COLUMNS, TimeRemainingColumn())
    with Progress(*columns, console=err) as progress:
        tasks: dict[str, TaskID] = {}

        def bar(phase: str) -> Steps:
            def update(done: int, total: int) -> None:
                if phase not in tasks:
                    tasks[phase] = progress.add_task(PHASES.get(phase, phase), total=total)
                progress.update(tasks[phase], total=total, completed=done)

            return update

        yield bar


def check_tune_options(what: str, reranker_size: str) -> None:
    from ragstream.train.tune import RERANKER_SIZES

    if what not in ("reranker", "embedder", "both", "decision"):
        raise typer.BadParameter(
            "expected reranker, embedder, both or decision", param_hint="--what"
        )
    if reranker_size not in RERANKER_SIZES:
        raise typer.BadParameter(
            f"expected one of {', '.join(RERANKER_SIZES)}", param_hint="--reranker-size"
        )


def tune(
    dataset_dir: Annotated[
        Path,
        typer.Argument(help="a BEIR-format dataset folder (or, for --what decision, SQuAD 2.0)"),
    ],
    data_dir: Annotated[
        Path, typer.Option("--data-dir", help="data dir the corpus is indexed into (reused)")
    ],
    split: Annotated[str, typer.Option(help="the split trained on: qrels/<split>.tsv")] = "train",
    what: Annotated[str, typer.Option(help="reranker | embedder | both | decision")] = "reranker",
    self_supervised: Annotated[
        bool,
        typer.Option("--self-supervised", help="train on pairs made from the corpus (no qrels)"),
    ] = False,
    reranker_size: Annotated[
        str,
        typer.Option(
            "--reranker-size",
            help="base (3 layers, 160 tokens) | small (2 layers, 128 tokens: ~60 % of the "
            "time per candidate, less gain; for slower CPUs)",
        ),
    ] = "base",
    limit_queries: Annotated[
        int | None, typer.Option("--limit-queries", help="only the first N judged queries")
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Train a reranker and/or adapt the embedder for this index's corpus from its own
    hybrid candidates (offline, CPU, fixed seed) into DATA_DIR/models/. Nothing changes until
    you switch them on: the reranker with `query.reranker` (compare with `ragstream eval`,
    rows `+rerank(tuned)`), the embedder with `reindex start --embedder DIR` then `reindex
    promote --eval-dataset` (the eval gate). `--what decision` refits the answerability
    decision on this index (its questions with and without their gold documents), kept only
    when it beats the shipped one on a held-out fifth; switch it on with
    `query.answerable.judge`. Reads only SPLIT."""
    check_tune_options(what, reranker_size)
    if split == "test" and not self_supervised:
        err.print("warning: tuning on the test split makes its eval figures meaningless")
    if what == "decision":
        _tune_decision(dataset_dir, data_dir, split, as_json)
    else:
        _tune_models(
            dataset_dir, data_dir, split, what, self_supervised, reranker_size, limit_queries,
            as_json,
        )  # fmt: skip


def _tune_models(
    dataset_dir: Path,
    data_dir: Path,
    split: str,
    what: str,
    self_supervised: bool,
    reranker_size: str,
    limit_queries: int | None,
    as_json: bool,
) -> None:
    """The reranker and/or the embedder, trained on the index's mined candidates."""
    from ragstream.train.tune import RERANKER_SIZES, MineConfig, mine_index, tune_reranker
    from ragstream.train.tune_embedder import tune_embedder

    reports: dict[str, BaseModel] = {}
    with phase_bars() as bars:
        mined = mine_index(
            dataset_dir, data_dir, split, MineConfig(), limit_queries=limit_queries,
            self_supervised=self_supervised, on_step=bars("mine"),
        )  # fmt: skip
        err.print(f"mined {len(mined.groups)} queries ({mined.seconds:.0f} s)")
        if what in ("reranker", "both"):
            reports["reranker"] = tune_reranker(
                dataset_dir, data_dir, split, mined=mined, config=RERANKER_SIZES[reranker_size],
                progress=err.print, on_step=bars,
            )  # fmt: skip
        if what in ("embedder", "both"):
            reports["embedder"] = tune_embedder(
                data_dir, mined, dataset_dir=dataset_dir, progress=err.print, on_step=bars
            )
    if as_json:
        dumped = {k: json.loads(r.model_dump_json()) for k, r in reports.items()}
        print(json.dumps(dumped.get(what, {"what": what, **dumped})))
        return
    _summary(reports)


def _tune_decision(dataset_dir: Path, data_dir: Path, split: str, as_json: bool) -> None:
    from ragstream.train.tune_decision import tune_decision

    try:
        report = tune_decision(dataset_dir, data_dir, split, progress=err.print)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="DATASET_DIR") from exc
    if as_json:
        print(report.model_dump_json())
        return
    verdict = "kept" if report.kept else "NOT better on the held-out questions: nothing written"
    out.print(f"decision over {report.features}: {verdict}")
    for cell, tuned in report.held_refused_tuned.items():
        shipped = report.held_refused_shipped[cell]
        out.print(f"  {cell}: refused at 90 % answered {shipped:.3f} (shipped) -> {tuned:.3f}")
    if report.kept:
        out.print(f"model: {report.model_dir}\nswitch it on: {report.switch_on}")


def _summary(reports: dict[str, BaseModel]) -> None:
    from ragstream.train.tune import TuneReport
    from ragstream.train.tune_embedder import EmbedderTuneReport

    rerank = reports.get("reranker")
    if isinstance(rerank, TuneReport):
        out.print(
            f"{rerank.version}: held-out MRR@10 {rerank.held_mrr10_fused:.4f} (fused) -> "
            f"{rerank.held_mrr10_tuned:.4f} (tuned, blended with the fused rank at weight "
            f"{rerank.prior_weight}, top {rerank.rerank_depth}), {rerank.fit_pairs} pairs from "
            f"{rerank.fit_queries} queries, trained in {rerank.train_seconds:.0f} s"
        )
        out.print(f"model: {rerank.model_dir}\nswitch it on: {rerank.switch_on}")
    emb = reports.get("embedder")
    if isinstance(emb, EmbedderTuneReport):
        verdict = "better" if emb.improved else "NOT better: keep the live one"
        out.print(
            f"{emb.version}: held-out MRR@10 of the embedder alone {emb.held_mrr10_base:.4f} "
            f"(live {emb.base_embedder.rsplit('/', 1)[-1]}) -> {emb.held_mrr10_tuned:.4f} "
            f"({verdict}), {emb.fit_triples} triples from {emb.fit_queries} queries, trained "
            f"in {emb.train_seconds:.0f} s"
        )
        out.print(f"model: {emb.model_dir}\nreindex: {emb.reindex_with}\nthen: {emb.promote_with}")
