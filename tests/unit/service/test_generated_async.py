"""The asyncio twins are generated: `AsyncRemoteIndex` and `AsyncClient` on disk are what
tools/generate_async.py makes of `RemoteIndex` and `Client` now, each twin has its blocking
class's public methods (under the generator's renames), awaited where the blocking one blocks,
and the blocking modules export their twins."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
GENERATOR = REPO / "tools" / "generate_async.py"


@functools.cache
def _generator() -> ModuleType:
    """tools/generate_async.py, loaded once (it is no package: `tools` has no __init__)."""
    spec = importlib.util.spec_from_file_location("generate_async", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _twins() -> list[Any]:
    return list(_generator().TWINS)


def _class(path: str, name: str) -> type:
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    cls = getattr(module, name)
    assert isinstance(cls, type)
    return cls


def _public(cls: type) -> set[str]:
    return {name for name in vars(cls) if not name.startswith("_")}


def test_the_generated_files_are_what_the_generator_makes_now() -> None:
    generator = _generator()
    rendered = generator.render()
    assert set(rendered) == {twin.target for twin in generator.TWINS}
    stale = [
        path
        for path, text in rendered.items()
        if not (REPO / path).is_file() or (REPO / path).read_text(encoding="utf-8") != text
    ]
    assert stale == [], (
        f"{stale} differ from what tools/generate_async.py makes of their blocking classes: "
        "edit the blocking class (or the generator's override table), never the output, "
        "then run `make generate`"
    )


@pytest.mark.parametrize("twin", _twins(), ids=lambda twin: twin.name)
def test_each_twin_has_its_blocking_classs_public_methods(twin: Any) -> None:
    blocking, twin_cls = _class(twin.source, twin.blocking), _class(twin.target, twin.name)
    expected = {twin.renames.get(n, n) for n in _public(blocking) - twin.omit}
    missing, extra = expected - _public(twin_cls), _public(twin_cls) - expected
    assert (missing, extra) == (set(), set()), (
        f"{twin.name} lacks {sorted(missing)} and has {sorted(extra)} beyond {twin.blocking}: "
        "run `make generate`"
    )


@pytest.mark.parametrize("twin", _twins(), ids=lambda twin: twin.name)
def test_a_twin_awaits_where_its_blocking_class_blocks(twin: Any) -> None:
    """Properties stay properties, a method returning an iterator returns an async one (a
    plain `def`), every other public method is a coroutine."""
    blocking, twin_cls = _class(twin.source, twin.blocking), _class(twin.target, twin.name)
    for name in sorted(_public(blocking) - twin.omit):
        member = inspect.getattr_static(blocking, name)
        counterpart = inspect.getattr_static(twin_cls, twin.renames.get(name, name))
        if isinstance(member, property):
            assert isinstance(counterpart, property), name
        elif str(inspect.signature(member).return_annotation).startswith("Iterator["):
            assert not inspect.iscoroutinefunction(counterpart), name
            returns = str(inspect.signature(counterpart).return_annotation)
            assert returns.startswith("AsyncIterator["), name
        else:
            assert inspect.iscoroutinefunction(counterpart), name


def test_the_blocking_modules_export_their_twins() -> None:
    from ragstream import AsyncClient
    from ragstream.client import AsyncClient as from_client
    from ragstream.service.client_async import AsyncClient as generated_client
    from ragstream.service.remote import AsyncRemoteIndex
    from ragstream.service.remote_async import AsyncRemoteIndex as generated_index

    assert AsyncClient is from_client is generated_client
    assert AsyncRemoteIndex is generated_index
