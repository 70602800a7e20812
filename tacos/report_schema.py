"""The one versioned schema of every ``--json`` report (``tacos/schemas/report-v1.json``,
documented in ``docs/report-json.md``): an envelope ``{"schema": "tacos-report/1", "kind":
..., "ok": ...}`` around the fields of each kind (``compile``, ``verify``, ``verify-folder``,
``sweep``, ``cost``, ``explore``, ``allocate``, ``reshard``, ``jobs``).  Times are seconds, sizes
bytes, bandwidths bytes/s."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

SCHEMA_ID = "tacos-report/1"
KINDS = ("compile", "verify", "verify-folder", "sweep", "cost", "explore", "allocate", "reshard",
         "jobs")


def envelope(kind: str, doc: dict[str, Any], ok: bool) -> dict[str, Any]:
    """``doc`` with the schema version, its ``kind`` and verdict ``ok`` in front."""
    if kind not in KINDS:
        raise ValueError(f"unknown report kind {kind!r}")
    rest = {k: v for k, v in doc.items() if k not in ("schema", "kind", "ok")}
    return {"schema": SCHEMA_ID, "kind": kind, "ok": bool(ok), **rest}


def report_schema() -> dict[str, Any]:
    """The JSON schema (draft 2020-12) every report validates against."""
    text = resources.files("tacos").joinpath("schemas/report-v1.json").read_text("utf-8")
    return json.loads(text)
