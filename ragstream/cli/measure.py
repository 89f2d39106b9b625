"""Measuring and configuring: `eval` (a BEIR or SQuAD 2.0-format dataset through the real
ingest, then retrieval or answer checks) and `config` (each effective setting and where it
came from). `tune` lives in `cli.tune`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, cast

import typer

from ragstream.cli.options import AsJson, DataDir
from ragstream.cli.render import emit_json, err, out, print_settings

MODE_HELP = (
    "retrieval: ablation rows + failure report; gold: answer from the gold passages; abstain: "
    "questions with no answer in the index must be refused; answers: context-assembly "
    "ablation (document order, parent expansion) scored on the answers. A SQuAD-format set "
    "takes answers (every question: answered / refused per kind and check, gold answer in the "
    "answer and its first sentence, gold paragraph cited, each signal's AUC and refusal "
    "curve) or abstain (the unanswerable questions only)"
)
DatasetArg = Annotated[
    Path,
    typer.Argument(
        help="a BEIR-format dataset folder, or a SQuAD 2.0-format JSON file (or the folder "
        "holding it and its split.json)"
    ),
]
EvalDataDir = Annotated[
    Path, typer.Option("--data-dir", help="data dir the corpus is indexed into (reused)")
]
Split = Annotated[
    str, typer.Option(help="BEIR: qrels/<split>.tsv; SQuAD: the split.json entry (articles)")
]
Answers = Annotated[
    bool,
    typer.Option(
        "--answers",
        help="retrieval mode: also run the answer path per query to classify refused / "
        "unsupported answers (slower)",
    ),
]
Rows = Annotated[
    str,
    typer.Option(
        help="answers mode: which rows: assembly (order, parent expansion), answerability "
        "(one row per answerability signal), or all"
    ),
]
Plot = Annotated[
    Path | None,
    typer.Option(
        "--plot",
        help="retrieval mode: also write the figures as PNG files into this folder "
        "(ndcg.png: nDCG@10 per configuration; latency.png: each stage's latency)",
    ),
]


def check_eval_options(dataset_dir: Path, mode: str, rows: str, plot: Path | None) -> None:
    """Usage errors before anything is indexed."""
    from ragstream.eval.answer_ablation import ROW_SETS
    from ragstream.eval.evaluation import MODES
    from ragstream.eval.squad import squad_file

    if mode not in MODES:
        raise typer.BadParameter(f"expected one of {', '.join(MODES)}", param_hint="--mode")
    if rows not in ROW_SETS:
        raise typer.BadParameter(f"expected one of {', '.join(ROW_SETS)}", param_hint="--rows")
    if plot is not None and mode != "retrieval":
        raise typer.BadParameter("plots are drawn from --mode retrieval", param_hint="--plot")
    if squad_file(dataset_dir) is not None and mode not in ("answers", "abstain"):
        raise typer.BadParameter(
            "a SQuAD-format set is evaluated with --mode answers or --mode abstain",
            param_hint="--mode",
        )


def eval_(
    dataset_dir: DatasetArg,
    data_dir: EvalDataDir,
    split: Split = "test",
    as_json: AsJson = False,
    limit_queries: Annotated[
        int | None, typer.Option("--limit-queries", help="only the first N judged queries")
    ] = None,
    depth: Annotated[int | None, typer.Option(help="chunks retrieved per leg")] = None,
    mode: Annotated[str, typer.Option(help=MODE_HELP)] = "retrieval",
    answers: Answers = False,
    k: Annotated[int | None, typer.Option("--k", help="chunks an answer is built from")] = None,
    rows: Rows = "all",
    plot: Plot = None,
) -> None:
    """Index a BEIR or SQuAD 2.0-format dataset through the real ingest, then evaluate it.

    retrieval (default): the ablation table and the "which stage broke?" failure counts,
    saved to DATA_DIR/eval/SPLIT.json; gold / abstain / answers: answer-level checks, saved to
    DATA_DIR/eval/SPLIT.MODE.json. Per-query details go to DATA_DIR/eval/SPLIT.MODE.details.json.
    Reruns embed nothing.
    """
    from ragstream.eval.datasets import evaluate_dataset
    from ragstream.eval.evaluation import DEFAULT_DEPTH, DEFAULT_K, markdown_report

    check_eval_options(dataset_dir, mode, rows, plot)
    if not as_json:  # a test runner may read stderr and stdout as one stream
        err.print(f"indexing {dataset_dir} into {data_dir} (incremental), then evaluating")
    report = evaluate_dataset(
        dataset_dir,
        data_dir,
        split,
        limit_queries=limit_queries,
        depth=depth or DEFAULT_DEPTH,
        mode=cast(Any, mode),  # checked against MODES above
        answers=answers,
        k=k or DEFAULT_K,
        row_set=rows,
    )
    written = []
    if plot is not None:
        from ragstream.eval.plots import write_plots

        written = write_plots(report, plot)
    if as_json:
        print(report.to_json())
        return
    out.print(f"{report.dataset} {split}: {report.queries} queries, depth {report.depth}/leg\n")
    print(markdown_report(report))
    for path in written:
        err.print(f"wrote {path}")


def config(
    as_json: AsJson = False,
    env: Annotated[bool, typer.Option("--env", help="list every RAGSTREAM_* variable")] = False,
    data_dir: DataDir = None,
) -> None:
    """The effective settings and where each value came from (env, file, default)."""
    from ragstream.core.settings import env_var_help, load_settings, settings_report

    if env:
        print(env_var_help())
        return
    rows = settings_report(load_settings(data_dir))
    if as_json:
        emit_json([{"name": n, "value": v, "source": src} for n, v, src in rows])
        return
    print_settings(rows)


__all__ = ["config", "eval_"]
