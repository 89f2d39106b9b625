"""Generates the asyncio twins of the blocking index classes from their source, as
qdrant-client generates its async client: `RemoteIndex` (ragstream/service/remote.py) gives
`AsyncRemoteIndex` (ragstream/service/remote_async.py), `Client` (ragstream/client.py) gives
`AsyncClient` (ragstream/service/client_async.py). Each blocking class is read with `ast`,
rewritten by the rules below, printed, and formatted by ruff (imports sorted, then
`ruff format`), so the output is `ruff check` / `ruff format --check` clean.

    python tools/generate_async.py          # rewrite the generated files (`make generate`)
    python tools/generate_async.py --check  # exit 1, naming them, when they are stale

The rules, applied to every method of a blocking class:

- `self._client` is an httpx client: `.request(...)` is awaited, `.close()` is
  `await ....aclose()`, `with self._client.stream(...) as r` is `async with`, and on `r`
  `.read()` is `await r.aread()` and `for x in r.iter_lines()` is
  `async for x in r.aiter_lines()`; `httpx.Client` is `httpx.AsyncClient`.
- `time.sleep(s)` is `await asyncio.sleep(s)`.
- A call of one of the class's own coroutines (`self._do(...)`, `self.close()`) is awaited,
  and so is a call of the twin's coroutines on its delegate (`Client._index` is a
  `RemoteIndex`, so `AsyncClient._index` is an `AsyncRemoteIndex`), under the twin's names
  (`close` -> `aclose`).
- A method that then awaits is `async def` (a coroutine; found to a fixed point, so a method
  calling a coroutine of its own class is one too), a generator that does is an async
  generator, and `__enter__` / `__exit__` are `async def __aenter__` / `__aexit__`; a method
  that returns the async generator's iterator (`stream`, `chat_stream`) stays a plain `def`.
- Names: `Iterator` is `AsyncIterator`, and each blocking class's name is its twin's.
- Docstrings: a public coroutine's is "`Client.name`, awaited: " and the first paragraph
  of the blocking one; a public method returning an async iterator's is
  "`Client.name` as an async iterator: " and that paragraph; the others are kept.

What no rule expresses is in each `Twin`'s override table, never edited into the output:
the class docstring, `renames` (the twin's name of a method: `RemoteIndex.close` is
`AsyncRemoteIndex.aclose`), `omit` (methods without a twin), `replace` (a method's twin
written out: `AsyncClient.__init__` takes a URL only) and `docstrings`.

The generated module imports what its class uses from where the blocking module imports it
(a name the blocking module defines itself is refused: importing it would be a cycle, as the
blocking module exports its twin); tests/unit/service/test_generated_async.py fails when the
files on disk differ from what this script prints.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import inspect
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from copy import deepcopy
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINE_LENGTH = 100  # pyproject.toml's [tool.ruff] line-length
COMMAND = "make generate"
CODE_SPACE = "\x00"  # a space inside `code` while a docstring is wrapped


@dataclass(frozen=True)
class Twin:
    """One blocking class and its generated asyncio twin, with what no rule expresses."""

    source: str  # the blocking module, relative to the repository
    blocking: str  # the blocking class
    target: str  # the generated module
    name: str  # the asyncio class
    module_doc: str  # the generated module's docstring
    class_doc: str  # the asyncio class's docstring
    renames: dict[str, str] = field(default_factory=dict)  # method -> its twin's name
    omit: frozenset[str] = frozenset()  # methods with no twin
    replace: dict[str, str] = field(default_factory=dict)  # method -> its twin's source
    docstrings: dict[str, str] = field(default_factory=dict)  # method -> its twin's docstring
    delegate: tuple[str, str] | None = None  # (attribute, blocking class): `self._index`


TWINS = (
    Twin(
        source="ragstream/service/remote.py",
        blocking="RemoteIndex",
        target="ragstream/service/remote_async.py",
        name="AsyncRemoteIndex",
        module_doc=(
            "`AsyncRemoteIndex`: the index a running server holds, over asyncio requests "
            "(httpx.AsyncClient), with `RemoteIndex`'s methods and retries; "
            "`ragstream.service.remote` exports it. Generated from `RemoteIndex`: edit that, "
            f"then run `{COMMAND}`."
        ),
        class_doc=(
            "`RemoteIndex`'s methods as coroutines (httpx.AsyncClient), with the same retries; "
            "`stream` is an async iterator (not retried either)."
        ),
        renames={"close": "aclose"},
        # no `async with`: the twin is closed by `aclose` (AsyncClient's `async with` does it)
        omit=frozenset({"__enter__", "__exit__"}),
    ),
    Twin(
        source="ragstream/client.py",
        blocking="Client",
        target="ragstream/service/client_async.py",
        name="AsyncClient",
        module_doc=(
            "`AsyncClient`: `Client`'s questions and typed results as coroutines over HTTP "
            "(an `AsyncRemoteIndex`); `ragstream.client` and `ragstream` export it. Generated "
            f"from `Client`: edit that, then run `{COMMAND}`."
        ),
        class_doc="""`Client`'s methods as coroutines over HTTP (httpx.AsyncClient); `stream` is an
    async iterator. Embedded use is the sync `Client`: the stores are not async.

    Args:
        url: A running `ragstream serve` or `watch --serve`, e.g. `http://127.0.0.1:8765`.
        api_key: The key sent as `Authorization: Bearer ...` (`server.api_keys`).
        timeout_s: Seconds a request may take.
        principal: Who the questions read as where sources mirror file permissions: its
            user name travels in `X-Ragstream-User`, honoured by a server that trusts the
            header (`server.trust_user_header`), as `Client`'s does over HTTP.
    """,
        replace={
            # HTTP only: a URL, no data dir or settings (the embedded stores are not async)
            "__init__": """
def __init__(
    self,
    url: str,
    *,
    api_key: str | None = None,
    timeout_s: float = 120.0,
    principal: Principal | str | None = None,
) -> None:
    user = principal.user if isinstance(principal, Principal) else principal
    self._index = AsyncRemoteIndex(url, api_key=api_key, timeout_s=timeout_s, user=user)
""",
        },
        docstrings={
            "mode": 'Always "http".',
            "url": "The server's URL.",
            "reindex_start": "`Client.reindex_start`, awaited; `wait` polls the server's backfill.",
            "close": "Close the HTTP connection pool; `async with` does it.",
        },
        delegate=("_index", "RemoteIndex"),
    ),
)

# httpx's blocking method -> (its asyncio name, how it is used): awaited, iterated
# (`async for`) or entered (`async with`)
HTTPX = {
    "request": ("request", "await"),
    "send": ("send", "await"),
    "close": ("aclose", "await"),
    "read": ("aread", "await"),
    "iter_lines": ("aiter_lines", "for"),
    "iter_bytes": ("aiter_bytes", "for"),
    "iter_text": ("aiter_text", "for"),
    "stream": ("stream", "with"),
}
HTTPX_CLIENT = "self._client"  # the attribute that holds the httpx client
NAMES = {"Iterator": "AsyncIterator"}  # and each blocking class's name is its twin's
CONTEXT = {"__enter__": "__aenter__", "__exit__": "__aexit__"}
# names the rules bring in, and their imports
NEW_IMPORTS = {
    "asyncio": "import asyncio",
    "AsyncIterator": "from collections.abc import AsyncIterator",
}


@dataclass
class Known:
    """What the rewriting of one class knows of coroutines: its own (blocking names) and, for
    its delegate attribute, the twin's (blocking names, and the twin's renames)."""

    own: set[str]
    renames: dict[str, str]
    delegate: str | None = None
    delegate_coroutines: frozenset[str] = frozenset()
    delegate_renames: dict[str, str] = field(default_factory=dict)


def _awaited(node: ast.expr) -> ast.Await:
    return ast.Await(value=node)


def _dotted(node: ast.expr) -> str:
    """`self._client` for that attribute chain, '' for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


class Rewrite(ast.NodeTransformer):
    """The rules, on one method's body, signature and decorators."""

    def __init__(self, known: Known, names: dict[str, str]) -> None:
        self.known, self.names = known, names
        self.responses: set[str] = set()  # names bound by `with self._client.stream(...) as r`

    def _httpx(self, call: ast.Call) -> tuple[str, str] | None:
        func = call.func
        if not isinstance(func, ast.Attribute) or func.attr not in HTTPX:
            return None
        receiver = _dotted(func.value)
        if receiver == HTTPX_CLIENT or receiver in self.responses:
            return HTTPX[func.attr]
        return None

    def _entered(self, expr: ast.expr) -> bool:
        use = self._httpx(expr) if isinstance(expr, ast.Call) else None
        return use is not None and use[1] == "with"

    def visit_Name(self, node: ast.Name) -> ast.Name:
        node.id = self.names.get(node.id, node.id)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.Attribute:
        self.generic_visit(node)
        if _dotted(node) == "httpx.Client":
            node.attr = "AsyncClient"
        return node

    def visit_Call(self, node: ast.Call) -> ast.expr:
        httpx_use = self._httpx(node)
        self.generic_visit(node)
        func, known = node.func, self.known
        if httpx_use is not None and isinstance(func, ast.Attribute):
            func.attr = httpx_use[0]
            return _awaited(node) if httpx_use[1] == "await" else node
        if _dotted(func) == "time.sleep":
            node.func = ast.Attribute(value=ast.Name("asyncio", ast.Load()), attr="sleep")
            return _awaited(node)
        if not isinstance(func, ast.Attribute):
            return node
        receiver, method = _dotted(func.value), func.attr
        if receiver == "self":
            func.attr = known.renames.get(method, method)
            return _awaited(node) if method in known.own else node
        if known.delegate is not None and receiver == f"self.{known.delegate}":
            func.attr = known.delegate_renames.get(method, method)
            return _awaited(node) if method in known.delegate_coroutines else node
        return node

    def visit_With(self, node: ast.With) -> ast.stmt:
        entered = [item for item in node.items if self._entered(item.context_expr)]
        for item in entered:
            if isinstance(item.optional_vars, ast.Name):
                self.responses.add(item.optional_vars.id)
        self.generic_visit(node)
        if not entered:
            return node
        return ast.AsyncWith(items=node.items, body=node.body, type_comment=None)

    def visit_For(self, node: ast.For) -> ast.stmt:
        use = self._httpx(node.iter) if isinstance(node.iter, ast.Call) else None
        iterated = use is not None and use[1] == "for"
        self.generic_visit(node)
        if not iterated:
            return node
        return ast.AsyncFor(target=node.target, iter=node.iter, body=node.body, orelse=node.orelse)


def _own_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function's body, not those of functions or lambdas inside it."""
    for child in ast.iter_child_nodes(node):
        yield child
        if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield from _own_nodes(child)


def _kind(method: ast.FunctionDef) -> str:
    """'coroutine', 'generator' (an async one), or 'plain', once rewritten."""
    nodes = list(_own_nodes(method))
    waits = any(isinstance(n, ast.Await | ast.AsyncFor | ast.AsyncWith) for n in nodes)
    if any(isinstance(n, ast.Yield | ast.YieldFrom) for n in nodes):
        return "generator" if waits else "plain"
    return "coroutine" if waits or method.name in CONTEXT else "plain"


def _methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}


def _rewritten(method: ast.FunctionDef, known: Known, names: dict[str, str]) -> ast.FunctionDef:
    copy = deepcopy(method)
    rewrite = Rewrite(known, names)
    copy.body = [rewrite.visit(stmt) for stmt in copy.body]
    copy.args = rewrite.visit(copy.args)
    copy.decorator_list = [rewrite.visit(d) for d in copy.decorator_list]
    copy.returns = rewrite.visit(copy.returns) if copy.returns is not None else None
    return copy


def _coroutines(cls: ast.ClassDef, known: Known, names: dict[str, str]) -> set[str]:
    """The methods that are coroutines once rewritten: to a fixed point, as awaiting one of
    its own class's coroutines makes a method one."""
    known.own = set()
    while True:
        found = {
            name
            for name, method in _methods(cls).items()
            if _kind(_rewritten(method, known, names)) == "coroutine"
        }
        if found == known.own:
            return found
        known.own = found


def _wrapped(text: str, indent: int) -> str:
    """One paragraph as a docstring's text, wrapped to the line length at this indent (the
    opening quotes on the first line, the closing ones on the last)."""
    width = LINE_LENGTH - indent - 3
    kept = re.sub(r"`[^`]*`", lambda m: m.group(0).replace(" ", CODE_SPACE), text)  # code unbroken
    lines = textwrap.wrap(
        kept, width=width, initial_indent='"""', break_long_words=False, break_on_hyphens=False
    )
    lines[0] = lines[0].removeprefix('"""')
    return ("\n" + " " * indent).join(lines).replace(CODE_SPACE, " ")


def _docstring(text: str, indent: int) -> ast.Expr:
    return ast.Expr(ast.Constant(_wrapped(text, indent)))


def _summary(doc: str) -> str:
    """The first paragraph of a docstring on one line, its first word in lower case (an
    acronym kept)."""
    first = inspect.cleandoc(doc).split("\n\n")[0]
    text = " ".join(first.split())
    if len(text) > 1 and text[0].isupper() and text[1].islower():
        text = text[0].lower() + text[1:]
    return text


def _method_doc(twin: Twin, blocking: ast.FunctionDef, kind: str) -> ast.Expr | None:
    """The twin's docstring of a method: overridden, or by the rules."""
    name = blocking.name
    if name in twin.docstrings:
        return _docstring(twin.docstrings[name], 8)
    doc = ast.get_docstring(blocking, clean=False)
    if doc is None:
        return None
    if name.startswith("_"):
        return ast.Expr(ast.Constant(doc))
    returns = ast.unparse(blocking.returns) if blocking.returns is not None else ""
    if kind == "coroutine":
        return _docstring(f"`{twin.blocking}.{name}`, awaited: {_summary(doc)}", 8)
    if kind == "generator" or returns.startswith("Iterator["):
        return _docstring(f"`{twin.blocking}.{name}` as an async iterator: {_summary(doc)}", 8)
    return ast.Expr(ast.Constant(doc))


def _with_doc(method: ast.FunctionDef | ast.AsyncFunctionDef, doc: ast.Expr | None) -> None:
    body = method.body
    if ast.get_docstring(method, clean=False) is not None:
        body = body[1:]
    method.body = ([doc] if doc is not None else []) + (body or [ast.Pass()])


def _twin_class(twin: Twin, cls: ast.ClassDef, known: Known, names: dict[str, str]) -> ast.ClassDef:
    body: list[ast.stmt] = [_docstring_block(twin.class_doc)]
    for stmt in cls.body:
        if not isinstance(stmt, ast.FunctionDef):
            if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
                body.append(Rewrite(known, names).visit(stmt))
            continue
        if stmt.name in twin.omit:
            continue
        if stmt.name in twin.replace:
            replaced = ast.parse(textwrap.dedent(twin.replace[stmt.name])).body[0]
            assert isinstance(replaced, ast.FunctionDef | ast.AsyncFunctionDef)
            body.append(replaced)
            continue
        method = _rewritten(stmt, known, names)
        kind = _kind(method)
        name = CONTEXT.get(stmt.name, twin.renames.get(stmt.name, stmt.name))
        out: ast.FunctionDef | ast.AsyncFunctionDef = method
        if kind != "plain":
            # the same fields in every Python version (type_params from 3.12)
            out = ast.AsyncFunctionDef(**{f: getattr(method, f) for f in method._fields})
        out.name = name
        _with_doc(out, _method_doc(twin, stmt, kind))
        body.append(out)
    bases = [Rewrite(known, names).visit(b) for b in cls.bases]
    generated = deepcopy(cls)
    generated.name, generated.bases, generated.body = twin.name, bases, body
    generated.keywords, generated.decorator_list = [], []
    return generated


def _docstring_block(text: str) -> ast.Expr:
    """A class docstring written out (its own line breaks), or one paragraph wrapped."""
    return ast.Expr(ast.Constant(text)) if "\n" in text else _docstring(text, 4)


# ---- imports -----------------------------------------------------------------------------
def _module_name(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def _free_names(cls: ast.ClassDef) -> set[str]:
    """The names the class reads that none of its methods binds (its imports)."""
    free: set[str] = set()
    for stmt in cls.body:
        nodes = list(ast.walk(stmt))
        bound = {a.arg for n in nodes if isinstance(n, ast.arguments) for a in _args(n)}
        names = [n for n in nodes if isinstance(n, ast.Name)]
        bound |= {n.id for n in names if not isinstance(n.ctx, ast.Load)}
        bound |= {n.name for n in nodes if isinstance(n, ast.ExceptHandler) and n.name}
        free |= {n.id for n in names if isinstance(n.ctx, ast.Load)} - bound
    free |= {n.id for b in cls.bases for n in ast.walk(b) if isinstance(n, ast.Name)}
    return free - set(dir(builtins))


def _args(args: ast.arguments) -> list[ast.arg]:
    extra = [a for a in (args.vararg, args.kwarg) if a is not None]
    return [*args.posonlyargs, *args.args, *args.kwonlyargs, *extra]


def _imports(tree: ast.Module) -> dict[str, str]:
    """Each name a module imports at its top -> the import statement of that name alone."""
    found: dict[str, str] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                found[alias.asname or alias.name.split(".")[0]] = f"import {alias.name}" + (
                    f" as {alias.asname}" if alias.asname else ""
                )
        elif isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.module != "__future__":
            for alias in stmt.names:
                alias_part = f" as {alias.asname}" if alias.asname else ""
                found[alias.asname or alias.name] = (
                    f"from {'.' * stmt.level}{stmt.module} import {alias.name}{alias_part}"
                )
    return found


def _defined(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(stmt.name)
        elif isinstance(stmt, ast.Assign | ast.AnnAssign):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def _import_block(twin: Twin, cls: ast.ClassDef, tree: ast.Module) -> list[str]:
    imported, defined = _imports(tree), _defined(tree)
    generated = {t.name: f"from {_module_name(t.target)} import {t.name}" for t in TWINS}
    lines = {"from __future__ import annotations"}
    for name in sorted(_free_names(cls)):
        if name in NEW_IMPORTS:
            lines.add(NEW_IMPORTS[name])
        elif name == twin.name:
            continue
        elif name in generated:
            lines.add(generated[name])
        elif name in imported:
            lines.add(imported[name])
        elif name in defined:
            raise SystemExit(
                f"{twin.source} defines {name!r}, which {twin.blocking} uses: importing it into "
                f"{twin.target} would be an import cycle ({twin.source} exports {twin.name}); "
                "move it to a module both import"
            )
        else:
            raise SystemExit(f"{twin.blocking} uses {name!r}: no import of it found")
    return sorted(lines)


# ---- the output --------------------------------------------------------------------------
def _ruff(args: list[str], text: str, target: str) -> str:
    command = [sys.executable, "-m", "ruff", *args, "--quiet"]
    done = subprocess.run(
        [*command, "--stdin-filename", str(REPO / target), "-"],
        input=text,
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    if done.returncode != 0:
        raise SystemExit(f"ruff {' '.join(args)} failed on {target}:\n{done.stderr}{done.stdout}")
    return done.stdout


def render() -> dict[str, str]:
    """Each generated file (path relative to the repository) -> its text."""
    names = {t.blocking: t.name for t in TWINS} | NAMES
    coroutines: dict[str, frozenset[str]] = {}
    out: dict[str, str] = {}
    for twin in TWINS:
        tree = ast.parse((REPO / twin.source).read_text(encoding="utf-8"))
        cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == twin.blocking)
        known = Known(own=set(), renames=twin.renames)
        if twin.delegate is not None:
            attribute, other = twin.delegate
            source = next(t for t in TWINS if t.blocking == other)
            known.delegate, known.delegate_renames = attribute, source.renames
            known.delegate_coroutines = coroutines[other]
        coroutines[twin.blocking] = frozenset(_coroutines(cls, known, names))
        generated = _twin_class(twin, cls, known, names)
        module = ast.Module(body=[generated], type_ignores=[])
        ast.fix_missing_locations(module)
        header = (
            f"# Generated from {twin.source} by `{COMMAND}` (tools/generate_async.py).\n"
            f"# Do not edit: edit {twin.blocking} in {twin.source}, then run `{COMMAND}`.\n"
        )
        doc = f'"""{_wrapped(twin.module_doc, 0)}"""'
        imports = "\n".join(_import_block(twin, generated, tree))
        text = f"{header}{doc}\n\n{imports}\n\n\n{ast.unparse(module)}\n"
        text = _ruff(["check", "--select", "I", "--fix", "--exit-zero"], text, twin.target)
        out[twin.target] = _ruff(["format"], text, twin.target)
    return out


def stale() -> list[str]:
    """The generated files whose text on disk is not what `render` makes now."""
    return [
        path
        for path, text in render().items()
        if not (REPO / path).is_file() or (REPO / path).read_text(encoding="utf-8") != text
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say which files are stale")
    args = parser.parse_args(argv)
    if args.check:
        old = stale()
        for path in old:
            print(f"{path} is stale: run `{COMMAND}`", file=sys.stderr)
        return 1 if old else 0
    for path, text in render().items():
        target = REPO / path
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
        else:
            print(f"{path} is up to date")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
