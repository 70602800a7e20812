"""Topologies from what users already have: NCCL topology XML, ``nvidia-smi topo -m``, TACCL
profiles, TE-CCL inputs (and networkx graphs: :func:`tacos.from_networkx`).

Each format's reader lives in ``frontends/`` and writes TDL text (:func:`to_tdl`), so an import
can be read, edited and versioned like any hand-written file; :func:`import_spec` parses it.
``tacosc import FORMAT FILE -o system.tdl`` does the same from the command line, and the other
commands accept these files where they take a TDL file (the format is told from the content).

>>> sniff_format('<system version="1"><cpu/></system>')
'nccl-topo'
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tacos.errors import TacosError
from tacos.spec import Spec

FORMATS: dict[str, tuple[str, str]] = {
    "nccl-topo": ("tacos.frontends.nccl_topo", "NCCL topology XML (NCCL_TOPO_FILE); options: "
                  "node (preset), nvlink_matrix, nodes, nic, nic_alpha, nvlink, nvlink_alpha"),
    "nvidia-smi": ("tacos.frontends.nvidia_smi", "nvidia-smi topo -m output; options: nodes, "
                   "nvlink, nvlink_alpha, nic, nic_alpha, pcie, pcie_alpha"),
    "taccl": ("tacos.frontends.taccl_topo", "TACCL topology profile JSON; options: kind, "
              "size, nodes, nic_gpus"),
    "teccl": ("tacos.frontends.teccl_topo", "TE-CCL input JSON (TopologyParams); no options"),
}


def sniff_format(text: str) -> str | None:
    """The import format of ``text``, or None for TDL (or anything else)."""
    head = text.lstrip("\ufeff \t\r\n")
    if head.startswith("<"):
        return "nccl-topo" if "<system" in head[:2000] else None
    if head.startswith("{"):
        try:
            doc = json.loads(text)
        except (json.JSONDecodeError, RecursionError):  # too deep for any import format
            return None
        if isinstance(doc, dict) and "TopologyParams" in doc:
            return "teccl"
        if isinstance(doc, dict) and "gpus_per_node" in doc:
            return "taccl"
        return None
    if "GPU0" in head[:4000] and ("NV" in head or "PIX" in head or "SYS" in head
                                  or "NODE" in head or "PHB" in head):
        return "nvidia-smi"
    return None


def to_tdl(source: str | Path, format: str | None = None, **options: Any) -> str:
    """TDL text for a file (path, or its text) in one of :data:`FORMATS`."""
    if format is None:
        is_text = isinstance(source, str) and (
            "\n" in source or source.lstrip().startswith(("{", "<")))
        format = sniff_format(source if is_text else _peek(source))  # type: ignore[arg-type]
        if format is None:
            what = "the text" if is_text else str(source)
            raise TacosError(f"cannot tell the import format of {what}",
                             hint=f"name it: one of {', '.join(FORMATS)}")
    if format not in FORMATS:
        import difflib

        close = difflib.get_close_matches(format, FORMATS, n=1)
        raise TacosError(f"unknown import format {format!r}",
                         hint=f"did you mean {close[0]!r}?" if close
                         else f"formats: {', '.join(FORMATS)}")
    module = importlib.import_module(FORMATS[format][0])
    try:
        return module.to_tdl(source, **options)
    except TypeError as exc:
        if "unexpected keyword" not in str(exc):
            raise
        raise TacosError(f"{format}: {exc}".replace("to_tdl() ", ""),
                         hint=FORMATS[format][1]) from None


def import_spec(source: str | Path, format: str | None = None, **options: Any) -> Spec:
    """Import a file as a :class:`~tacos.spec.Spec` (via its TDL text)."""
    from tacos.frontends.tdl import parse_tdl

    text = to_tdl(source, format, **options)
    text_given = isinstance(source, str) and ("\n" in source
                                              or source.lstrip().startswith(("{", "<")))
    name = f"<{format or 'import'}>" if text_given else str(source)
    return parse_tdl(text, f"{name} (imported)")


def import_topology(source: str | Path, format: str | None = None, **options: Any):
    """Import a file as a :class:`~tacos.model.topology.Topology` (see :func:`import_spec`)."""
    return import_spec(source, format, **options).topology


def _peek(path: str | Path) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(65536)
    except OSError:
        return ""


def load_any(path: str | Path, params: dict[str, Any] | None = None, *,
             include_dirs: Iterable[str | Path] | None = None, **options: Any) -> Spec:
    """A TDL file (``params`` set its parameters; ``use "path"`` may also read from
    ``include_dirs``), or any file :func:`sniff_format` recognizes (``options`` go to its
    importer)."""
    from tacos.frontends.tdl import load_tdl

    if str(path) == "-" and not isinstance(path, Path):  # standard input, asked for explicitly
        return _load_stdin(params, include_dirs, options)
    fmt = sniff_format(_peek(path)) if Path(path).is_file() else None
    if fmt is None:
        if options:
            raise TacosError(f"{path} is read as TDL; import options "
                             f"({', '.join(sorted(options))}) do not apply",
                             hint="TDL parameters go in params={...}")
        return load_tdl(path, params, include_dirs)
    if params:
        raise TacosError(f"{path} is {fmt}, not TDL: TDL parameters do not apply",
                         hint=f"convert it with  tacosc import {fmt} {path} -o system.tdl")
    return import_spec(path, fmt, **options)


def _load_stdin(params: dict[str, Any] | None, include_dirs: Iterable[str | Path] | None,
                options: dict[str, Any]) -> Spec:
    """:func:`load_any` of standard input (``-``): read once, capped like a TDL file."""
    from tacos.frontends.tdl import parse_tdl
    from tacos.inputs import decode_text, read_capped

    text = decode_text(read_capped("-", limit="tdl_bytes", what="TDL file"), "<stdin>",
                       "TDL file")
    fmt = sniff_format(text)
    if fmt is None:
        return parse_tdl(text, "<stdin>", params, include_dirs)
    return import_spec(text, fmt, **options)
