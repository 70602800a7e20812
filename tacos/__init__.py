"""tacos: topology-aware collective algorithm synthesis.

Typical use::

    import tacos
    spec = tacos.load("examples/mesh4x4.tdl")
    schedule = tacos.synthesize(spec.topology, spec.collective, solver="greedy", seed=0)
    tacos.verify(schedule).raise_if_failed()
    xml = tacos.emit(schedule, "msccl-xml", max_bytes="64MiB")

Names are imported on first use (``import tacos`` stays fast: the command line starts in a
fraction of a second); ``tacos.synthesize``, ``tacos.verify`` and ``tacos.emit`` are always
the functions, never the submodules of the same names.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tacos.errors import InfeasibleError, Span, TacosError, VerificationError

__version__ = "0.1.0"

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from tacos.emit import emit
    from tacos.frontends.networkx_graph import topology_from_networkx as from_networkx
    from tacos.model.collective import Chunk, Collective, combine
    from tacos.model.patterns import build as collective
    from tacos.model.patterns import custom as custom_collective
    from tacos.model.schedule import Schedule, Transfer
    from tacos.model.topology import Link, Npu, Switch, Topology
    from tacos.spec import Spec
    from tacos.synthesize import solve, synthesize
    from tacos.verify_plan import verify

_LAZY: dict[str, tuple[str, str]] = {
    "Chunk": ("tacos.model.collective", "Chunk"),
    "Collective": ("tacos.model.collective", "Collective"),
    "combine": ("tacos.model.collective", "combine"),
    "collective": ("tacos.model.patterns", "build"),
    "custom_collective": ("tacos.model.patterns", "custom"),
    "Schedule": ("tacos.model.schedule", "Schedule"),
    "Transfer": ("tacos.model.schedule", "Transfer"),
    "Spec": ("tacos.spec", "Spec"),
    "Link": ("tacos.model.topology", "Link"),
    "Npu": ("tacos.model.topology", "Npu"),
    "Switch": ("tacos.model.topology", "Switch"),
    "Topology": ("tacos.model.topology", "Topology"),
    "solve": ("tacos.synthesize", "solve"),
    "synthesize": ("tacos.synthesize", "synthesize"),
    "verify": ("tacos.verify_plan", "verify"),
    "emit": ("tacos.emit", "emit"),
    "from_networkx": ("tacos.frontends.networkx_graph", "topology_from_networkx"),
    "parse_size": ("tacos.model.units", "parse_size"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    try:
        return importlib.import_module(f"tacos.{name}")  # a submodule: tacos.builders, ...
    except ModuleNotFoundError as exc:
        if exc.name != f"tacos.{name}":
            raise
        raise AttributeError(f"module 'tacos' has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


class _Package(types.ModuleType):
    """Keeps ``tacos.synthesize``, ``tacos.verify``, ``tacos.emit`` and ``tacos.collective``
    bound to the functions when the submodules of the same names are imported (the import
    system sets the parent's attribute to the submodule; it stays in ``sys.modules``)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def load(path: str | Path, params: dict[str, Any] | None = None, *,
         include_dirs: Iterable[str | Path] | None = None, **import_options: Any) -> Spec:
    """Load a TDL file (``params`` override its ``param`` defaults), or a file
    :mod:`tacos.importers` reads (NCCL topology XML, ``nvidia-smi topo -m`` output, TACCL or
    TE-CCL JSON; ``import_options`` such as ``node="dgx_a100_node"`` go to its importer).

    ``include_dirs``: folders ``use "path"`` may read from besides the file's own folder and
    the presets.  Input limits (:mod:`tacos.limits`) apply; raise them with
    ``tacos.limits.raised(...)``.
    """
    from tacos.importers import load_any

    return load_any(path, params, include_dirs=include_dirs, **import_options)


def preset(name: str, **params: Any) -> Spec:
    """Load the shipped preset ``name`` (``tacos presets`` lists them) with its ``param``
    values overridden by ``params``: ``tacos.preset("dgx_a100", nodes=2).topology``.
    An unknown name or parameter is a :class:`~tacos.errors.UsageError`."""
    import difflib

    from tacos.errors import UsageError
    from tacos.frontends.tdl_includes import preset_folder

    folder = preset_folder()
    path = folder / f"{name}.tdl"
    if not path.is_file():
        names = sorted(p.stem for p in folder.glob("*.tdl"))
        close = difflib.get_close_matches(name, names, n=1)
        raise UsageError(f"no preset called {name!r}",
                         hint=f"did you mean {close[0]!r}?" if close else
                         f"one of {', '.join(names)}")
    try:
        return load(path, dict(params))
    except UsageError:
        raise
    except TacosError as exc:  # the shipped file is sound: the parameters given are not
        raise UsageError(f"preset {name}: {exc.message}", hint=exc.hint) from None


def parse(text: str, source: str = "<string>", params: dict[str, Any] | None = None, *,
          include_dirs: Iterable[str | Path] | None = None) -> Spec:
    """Parse TDL text (``use "path"`` is relative to the working directory)."""
    from tacos.frontends.tdl import parse_tdl

    return parse_tdl(text, source, params, include_dirs)


def solver_options(solver: str) -> dict[str, Any]:
    """The options ``solver`` accepts (name -> :class:`tacos.solvers.options.Option` with a
    one-line ``doc``), the common ones first.

    >>> sorted(solver_options("ilp"))[:4]
    ['backend', 'cluster', 'cluster_first', 'cluster_steps']
    """
    from tacos.solvers.options import describe

    return describe(solver)


__all__ = [
    "Chunk",
    "Collective",
    "InfeasibleError",
    "Link",
    "Npu",
    "Schedule",
    "Span",
    "Spec",
    "Switch",
    "TacosError",
    "Topology",
    "Transfer",
    "VerificationError",
    "collective",
    "combine",
    "custom_collective",
    "emit",
    "from_networkx",
    "limits",
    "load",
    "parse",
    "parse_size",
    "solve",
    "solver_options",
    "synthesize",
    "verify",
]
