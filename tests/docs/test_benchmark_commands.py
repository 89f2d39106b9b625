"""Figures have one home: docs/benchmarks.md. Every command it quotes names a script that
exists and flags its parser accepts (the bench's own argparse calls, rebuilt from its source
without importing it, so no model or dataset loads; `ragstream` commands through the CLI's
own parser), every bench script has a section, and each headline figure of the README appears
in the benchmark section it links to and in no other."""

from __future__ import annotations

import argparse
import ast
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "docs" / "benchmarks.md"
ENV_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*$")
PARSER_CALLS = {"ArgumentParser", "add_subparsers", "add_parser", "add_mutually_exclusive_group"}
KEPT_KEYWORDS = {"action", "nargs", "required", "dest", "default", "choices", "const"}
TYPES = {"int": int, "float": float, "str": str, "Path": Path}


def sections() -> dict[str, str]:
    """`## ` sections of benchmarks.md by their anchor (the slug mkdocs and GitHub both make)."""
    parts = re.split(r"^## (.+)$", BENCHMARKS.read_text(encoding="utf-8"), flags=re.MULTILINE)
    return {slug(title): body for title, body in zip(parts[1::2], parts[2::2], strict=True)}


def slug(title: str) -> str:
    return re.sub(r"\s+", "-", re.sub(r"[^\w\s-]", "", title.strip().lower()))


def commands(text: str) -> Iterator[list[str]]:
    """Each line of the text's ```bash blocks, split as the shell would, without leading
    environment assignments and `nice -n N`."""
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            while words and ENV_ASSIGNMENT.match(words[0]):
                words = words[1:]
            if words[:2] == ["nice", "-n"]:
                words = words[3:]
            if words:
                yield words


def _literal(node: ast.expr) -> Any:
    return ast.literal_eval(node)


def _keyword(kw: ast.keyword) -> tuple[str, Any] | None:
    if kw.arg == "type":
        name = kw.value.id if isinstance(kw.value, ast.Name) else ""
        return "type", TYPES.get(name, str)
    if kw.arg not in KEPT_KEYWORDS:
        return None
    try:
        return kw.arg, _literal(kw.value)
    except ValueError:  # a default or choices computed at run time: not a parsing rule
        return None if kw.arg in ("default", "choices") else (kw.arg, None)


def bench_parser(script: Path) -> argparse.ArgumentParser:
    """The script's argument parser, rebuilt from the argparse calls in its source."""
    tree = ast.parse(script.read_text(encoding="utf-8"))
    objects: dict[str, Any] = {}
    root: argparse.ArgumentParser | None = None
    for node in ast.walk(tree):
        call = node.value if isinstance(node, ast.Assign | ast.Expr) else None
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute | ast.Name):
            continue
        method = call.func.attr if isinstance(call.func, ast.Attribute) else call.func.id
        owner = call.func.value if isinstance(call.func, ast.Attribute) else None
        target = node.targets[0] if isinstance(node, ast.Assign) else None
        args = [_literal(a) for a in call.args if isinstance(a, ast.Constant)]
        kwargs = dict(kw for kw in map(_keyword, call.keywords) if kw is not None)
        built: Any
        if method == "ArgumentParser":
            built = root = argparse.ArgumentParser(prog=script.name, add_help=True)
        elif method in PARSER_CALLS or method == "add_argument":
            assert isinstance(owner, ast.Name) and owner.id in objects, ast.unparse(call)
            if method == "add_subparsers":
                kwargs = {k: v for k, v in kwargs.items() if k in ("dest", "required")}
            built = getattr(objects[owner.id], method)(*args, **kwargs)
        else:
            continue
        if isinstance(target, ast.Name):
            objects[target.id] = built
    assert root is not None, f"{script} builds no ArgumentParser"
    return root


def check_bench(words: list[str]) -> None:
    if words[1] == "-m":
        script = REPO / (words[2].replace(".", "/") + ".py")
        args = words[3:]
    else:
        script, args = REPO / words[1], words[2:]
    assert script.is_file(), f"{script.relative_to(REPO)} does not exist"
    try:
        bench_parser(script).parse_args(args)
    except SystemExit as exit_:
        pytest.fail(f"{shlex.join(words)}: the flags do not parse ({exit_})")


def check_ragstream(words: list[str]) -> None:
    from typer.main import get_command

    from ragstream.cli.app import app

    command: Any = get_command(app)
    context = command.context_class(command, info_name="ragstream")
    args = words[1:]
    while hasattr(command, "list_commands"):
        name, args = args[0], args[1:]
        sub = command.get_command(context, name)
        assert sub is not None, f"no command {name!r} in {shlex.join(words)}"
        command = sub
        context = command.context_class(command, info_name=name, parent=context)
    try:
        command.make_context(command.name, list(args), parent=context.parent)
    except Exception as error:  # typer's click raises its own UsageError / NoSuchOption
        pytest.fail(f"{shlex.join(words)}: {error}")


QUOTED = [words for body in sections().values() for words in commands(body)]


@pytest.mark.parametrize("words", QUOTED, ids=lambda words: " ".join(words[:4])[:60])
def test_every_quoted_command_exists_and_its_flags_parse(words: list[str]) -> None:
    program = Path(words[0]).name
    if program == "python":
        check_bench(words)
    else:
        assert program == "ragstream", f"unexpected program in {shlex.join(words)}"
        check_ragstream(words)


def test_the_rebuilt_parser_refuses_an_unknown_flag() -> None:
    parser = bench_parser(REPO / "bench" / "freshness.py")
    assert parser.parse_args(["--docs", "10"]).docs == 10
    with pytest.raises(SystemExit):
        parser.parse_args(["--no-such-flag"])
    with pytest.raises(pytest.fail.Exception):
        check_ragstream(["ragstream", "eval", "DIR", "--data-dir", "D", "--no-such-flag"])


def test_every_bench_script_has_a_section_with_its_command() -> None:
    quoted = {" ".join(words[:3]) for words in QUOTED}
    scripts = sorted(p for p in (REPO / "bench").glob("*.py") if not p.name.startswith("_"))
    assert len(scripts) >= 20
    missing = [
        p.name
        for p in scripts
        if not any(f"bench/{p.name}" in q or f"bench.{p.stem}" in q for q in quoted)
    ]
    assert missing == []
    assert all(list(commands(body)) for body in sections().values()), "a section with no command"


def readme_results() -> list[tuple[str, str]]:
    """(figure, anchor) of every link from the README's results table into benchmarks.md."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("## Results") :]
    return re.findall(r"\[([^\]]+)\]\(docs/benchmarks\.md#([\w-]+)\)", table)


def test_each_readme_figure_has_one_home_in_the_benchmarks() -> None:
    results = readme_results()
    assert 6 <= len({anchor for _, anchor in results}) <= 8
    by_anchor = sections()
    for figure, anchor in results:
        assert anchor in by_anchor, f"benchmarks.md has no section #{anchor}"
        assert figure in by_anchor[anchor], f"{figure} is not in #{anchor}"
        assert list(commands(by_anchor[anchor])), f"#{anchor} quotes no command"
        elsewhere = [a for a, body in by_anchor.items() if a != anchor and figure in body]
        assert elsewhere == [], f"{figure} also appears in {elsewhere}"
