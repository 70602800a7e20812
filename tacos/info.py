"""Facts about a parsed spec, for ``tacosc info``: counts, degrees, diameter, bandwidth."""

from __future__ import annotations

import statistics
from typing import Any

from tacos.model.units import format_bandwidth, format_size
from tacos.spec import Spec

PER_NPU_TABLE_LIMIT = 32


def describe(spec: Spec) -> dict[str, Any]:
    """Summarize a spec as plain data (what ``tacosc info --json`` prints)."""
    t = spec.topology
    live = t.live_npus
    out_deg = [t.out_degree(v) for v in live]
    in_deg = [t.in_degree(v) for v in live]
    npus = [
        {
            "id": v,
            "name": t.npus[v].name,
            "ingress_GBps": t.ingress_bandwidth(v) / 1e9,
            "egress_GBps": t.egress_bandwidth(v) / 1e9,
            "out_degree": t.out_degree(v),
            "in_degree": t.in_degree(v),
        }
        for v in live
    ]
    collectives = []
    for c in spec.collectives:
        sizes = sorted({ch.size for ch in c.chunks})
        collectives.append(
            {
                "name": c.name,
                "kind": c.kind,
                "root": t.npus[c.root].name if c.root is not None else None,
                "group_size": len(c.group),
                "size_bytes": c.size,
                "chunks": c.n_chunks,
                "chunk_bytes": sizes,
                "reduce": c.combining,
                "volume_bytes": c.volume,
            }
        )
    return {
        "name": t.name,
        "source": spec.source,
        "npus": t.n_npus,
        "failed_npus": [n.name for n in t.npus if n.failed],
        "switches": [
            {"name": s.name, "policy": s.policy, "degree": s.degree,
             "ports": len(t.out_links[s.id]), "capabilities": sorted(s.capabilities)}
            for s in t.switches
        ],
        "links": len(t.links),
        "physical_links": sum(lk.multiplicity for lk in t.links),
        "failed_links": len(t.failed_links),
        "out_degree": {"min": min(out_deg, default=0), "max": max(out_deg, default=0)},
        "in_degree": {"min": min(in_deg, default=0), "max": max(in_deg, default=0)},
        **_diameter(t),
        "per_npu": npus,
        "collectives": collectives,
        "reshards": [
            {"name": r.label, "tensor": list(r.shape), "element_bytes": r.element_bytes,
             "size_bytes": r.nbytes, "src_spec": str(r.src_spec), "src_shape": list(r.src.shape),
             "dst_spec": str(r.dst_spec), "dst_shape": list(r.dst.shape),
             "unit_tasks": len(r.tasks)}
            for r in spec.reshards],
        "jobs": [
            {"name": j.name, "group_size": len(j.group), "priority": j.priority,
             "collectives": [f"{c.name or c.kind} {format_size(c.size)}" for c in j.collectives]}
            for j in spec.jobs],
        "params": {k: _plain(v) for k, v in spec.params.items()},
    }


def _diameter(t: Any) -> dict[str, Any]:
    """``diameter`` (None when disconnected or not computed exactly) and its bounds."""
    from tacos.model.hops import diameter

    d = diameter(t)
    return {"diameter": d.exact, "diameter_bounds": [d.low, d.high] if d.connected else None,
            "connected": d.connected}


def _plain(value: Any) -> Any:
    if isinstance(value, int | float | str):
        return value
    return getattr(value, "value", str(value))


def format_info(spec: Spec, per_npu: bool | None = None) -> str:
    """Human-readable ``tacosc info`` text."""
    d = describe(spec)
    lines = [f"topology: {d['name'] or '(unnamed)'}  ({d['source']})"]
    failed = d["failed_npus"]
    lines.append(f"npus: {d['npus']}" + (f" ({len(failed)} failed: {', '.join(failed)})"
                                         if failed else ""))
    sw = d["switches"]
    lines.append(f"switches: {len(sw)}")
    for s in sw[:16]:
        pol = (f"{s['policy']}({s['degree']})" if s["policy"] in ("degree", "stride")
               else s["policy"])
        caps = f", {' + '.join(s['capabilities'])}" if s["capabilities"] else ""
        lines.append(f"  {s['name']}: {s['ports']} ports, unwind {pol}{caps}")
    if len(sw) > 16:
        lines.append(f"  ... {len(sw) - 16} more")
    lines.append(f"links: {d['links']} directed ({d['physical_links']} counting parallel links)"
                 + (f", {d['failed_links']} failed" if d["failed_links"] else ""))
    od, idg = d["out_degree"], d["in_degree"]
    lines.append(f"degree: out {od['min']}..{od['max']}, in {idg['min']}..{idg['max']}"
                 " (physical links per live NPU)")
    diameter = d["diameter"]
    if not d["connected"]:
        lines.append("diameter: infinite (some NPUs cannot reach each other)")
    elif diameter is not None:
        lines.append(f"diameter: {diameter} hops")
    else:
        low, high = d["diameter_bounds"]
        lines.append(f"diameter: {low}..{high} hops (bounds: the exact value would take long "
                     f"on {d['npus']} NPUs)")
    rows = d["per_npu"]
    show_all = per_npu if per_npu is not None else len(rows) <= PER_NPU_TABLE_LIMIT
    if show_all:
        width = max((len(r["name"]) for r in rows), default=4)
        lines.append("per-NPU bandwidth:")
        lines.append(f"  {'npu':<{width}}  {'ingress':>12}  {'egress':>12}")
        for r in rows:
            lines.append(f"  {r['name']:<{width}}  {format_bandwidth(r['ingress_GBps'] * 1e9):>12}"
                         f"  {format_bandwidth(r['egress_GBps'] * 1e9):>12}")
    elif rows:
        ing = [r["ingress_GBps"] * 1e9 for r in rows]
        egr = [r["egress_GBps"] * 1e9 for r in rows]
        lines.append(
            f"per-NPU bandwidth: ingress min {format_bandwidth(min(ing))} median "
            f"{format_bandwidth(statistics.median(ing))} max {format_bandwidth(max(ing))}; "
            f"egress min {format_bandwidth(min(egr))} median "
            f"{format_bandwidth(statistics.median(egr))} max {format_bandwidth(max(egr))}"
            "  (--per-npu for the table)")
    colls = d["collectives"]
    lines.append(f"collectives: {len(colls)}")
    for c in colls:
        root = f" root {c['root']}" if c["root"] else ""
        chunk = "/".join(format_size(b) for b in c["chunk_bytes"])
        lines.append(
            f"  {c['name']}: {c['kind']}{root}, {c['group_size']} NPUs, size "
            f"{format_size(c['size_bytes'])}, {c['chunks']} chunks of {chunk}, "
            f"volume {format_size(c['volume_bytes'])}")
    if d["reshards"]:
        lines.append(f"reshards: {len(d['reshards'])}")
        for r in d["reshards"]:
            lines.append(
                f"  {r['name']}: tensor {r['tensor']} ({format_size(r['size_bytes'])}), "
                f"{r['src_spec']} on {'x'.join(map(str, r['src_shape']))} -> {r['dst_spec']} "
                f"on {'x'.join(map(str, r['dst_shape']))}, {r['unit_tasks']} unit tasks")
    if d["jobs"]:
        lines.append(f"jobs: {len(d['jobs'])}")
        for j in d["jobs"]:
            lines.append(f"  {j['name']}: {j['group_size']} NPUs, priority {j['priority']}, "
                         + ", ".join(j["collectives"]))
    return "\n".join(lines)
