"""Connection rules (``docs/msccl-xml.md`` §2.1 rules 8-9): symmetry and send/receive pairing.

A connection is ``(A -> B, channel c)``: the tb on A with ``send=B chan=c`` pushes, the tb on B
with ``recv=A chan=c`` pops, purely in order.  Both ends must be declared, and the k-th sending
step must match the k-th receiving step in ``cnt`` (both sides split large counts identically
only then).  The informational fields (sender's ``dst``, receiver's ``src``) should mirror each
other for a plain ``s``/``r`` pair (fused ops use the fields for their local operands); the
runtime ignores them, so a mismatch is a warning.
"""

from __future__ import annotations

from tacos.msccl.verify_model import Model
from tacos.msccl.verify_report import Violation


def check_connections(model: Model) -> list[Violation]:
    """Symmetry of declared connections and the pairing of their transfers."""
    out: list[Violation] = []
    for conn, key in sorted(model.sender.items()):
        if conn not in model.receiver:
            a, b, c = conn
            tb = model.tbs[key]
            out.append(Violation(
                "connection-symmetry", f"sends to rank {b} on channel {c} but rank {b} has no "
                f"tb with recv={a} chan={c}: the connection is one-sided and any transfer "
                "over it hangs", a, key[1], None, tb.line or None,
                hint=f"add a tb on rank {b} with recv=\"{a}\" chan=\"{c}\""))
    for conn, key in sorted(model.receiver.items()):
        if conn not in model.sender:
            a, b, c = conn
            tb = model.tbs[key]
            out.append(Violation(
                "connection-symmetry", f"receives from rank {a} on channel {c} but rank {a} "
                f"has no tb with send={b} chan={c}", b, key[1], None, tb.line or None,
                hint=f"add a tb on rank {a} with send=\"{b}\" chan=\"{c}\""))
    for conn in sorted(set(model.sends) | set(model.recvs)):
        out.extend(_pair(model, conn))
    return out


def _pair(model: Model, conn: tuple[int, int, int]) -> list[Violation]:
    a, b, c = conn
    sends = model.sends.get(conn, [])
    recvs = model.recvs.get(conn, [])
    if conn not in model.sender or conn not in model.receiver:
        return []  # reported as asymmetric
    out: list[Violation] = []
    name = f"connection {a}->{b} chan {c}"
    for k, (s, r) in enumerate(zip(sends, recvs, strict=False)):
        if s.step.cnt != r.step.cnt:
            out.append(Violation(
                "pairing", f"transfer #{k} on {name}: receives cnt={r.step.cnt} but the "
                f"matching send ({s.label()}) has cnt={s.step.cnt}", hint="the k-th send and "
                "the k-th receive of a connection must have the same cnt", **r.where()))
            continue
        ss, rs = s.step, r.step
        if (ss.type, rs.type) == ("s", "r") and (ss.srcbuf, ss.srcoff, ss.dstbuf, ss.dstoff) != \
                (rs.srcbuf, rs.srcoff, rs.dstbuf, rs.dstoff):
            out.append(Violation(
                "mirror", f"transfer #{k} on {name}: the receive describes "
                f"{rs.srcbuf}[{rs.srcoff}]->{rs.dstbuf}[{rs.dstoff}] but the send ("
                f"{s.label()}) describes {ss.srcbuf}[{ss.srcoff}]->{ss.dstbuf}[{ss.dstoff}]",
                severity="warning", hint="both sides should carry the full transfer "
                "description (other verifiers require it)", **r.where()))
    if len(recvs) > len(sends):
        r = recvs[len(sends)]
        out.append(Violation(
            "pairing", f"receive #{len(sends)} on {name} has no matching send: rank {a} tb "
            f"{model.sender[conn][1]} sends only {len(sends)} time(s) on it, rank {b} "
            f"receives {len(recvs)} time(s)", hint="a send was lost, or the receive belongs on "
            "another channel", **r.where()))
    elif len(sends) > len(recvs):
        s = sends[len(recvs)]
        out.append(Violation(
            "pairing", f"send #{len(recvs)} on {name} is never received: rank {b} tb "
            f"{model.receiver[conn][1]} receives only {len(recvs)} time(s), rank {a} sends "
            f"{len(sends)} time(s)", hint="add the matching receive or drop the send",
            **s.where()))
    return out
