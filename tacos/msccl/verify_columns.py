"""Verify a large, correct MSCCL XML text without building its steps.

Reading a million ``<step>`` lines into :class:`~tacos.msccl.program.Step` objects costs more
than every compiled check after it (:mod:`tacos.msccl.verify_jit`).  For a file whose steps are
all canonical (the exact form tacos and the production files write, see
:mod:`tacos.msccl.xml_lexer`) this path reads them as text spans
(:func:`tacos.msccl.xml_reader.parse_xml_runs`), takes their values out of the text with
a compiled scan (:func:`step_columns`), checks the per-step structural rules on those columns
(:func:`steps_clean`: the test :func:`tacos.msccl.verify_structure.check_structure` applies
before it builds any message), the rest of the structure on the step-less program, and then
runs the compiled checks.

It answers only "the file is correct, with nothing to warn about": any lexical or structural
problem, any non-canonical step, any pass that may report something makes :func:`vouch`
return None (the verifier does not ask it with a topology to time on or a rank-mapping
problem), and the caller verifies the file the usual way (exact report, same result).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tacos.msccl import verify_jit
from tacos.msccl.program import (
    MAX_CHILDREN,
    MAX_COUNT,
    MAX_NODES,
    STEP_TYPES,
    Program,
)
from tacos.msccl.verify_structure import check_structure
from tacos.msccl.xml_lexer import StepRun
from tacos.msccl.xml_reader import parse_xml_runs

MIN_BYTES = 4 << 20
"""Texts below this size take the usual path (the compiled checks' loading time would
dominate)."""

def _type_keys() -> np.ndarray:
    return np.asarray([sum(c << (8 * j) for j, c in enumerate(name.encode("ascii")))
                       for name in STEP_TYPES], dtype=np.int64)


_TYPE_KEYS = _type_keys()
_BUF_CODE = np.full(256, -1, dtype=np.int64)
for _code, _letter in enumerate("ios"):
    _BUF_CODE[ord(_letter)] = _code
_NAMES = ("s", "typ", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep")


def step_columns(text: str, runs: list[StepRun]) -> dict[str, np.ndarray] | None:
    """The values of the canonical steps in ``runs`` (document order) as columns: the step
    fields of :class:`tacos.msccl.verify_jit.Arrays` plus ``s``; None when the text is not
    ASCII (offsets would not be byte offsets) or a type is unknown (the usual path reports
    it)."""
    if not text.isascii():
        return None
    b = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    starts = np.fromiter((r.start for r in runs), dtype=np.int64, count=len(runs))
    counts = np.fromiter((r.count for r in runs), dtype=np.int64, count=len(runs))
    ok, values = verify_jit.kernels().parse_steps(b, starts, counts, _TYPE_KEYS,
                                                  np.arange(len(STEP_TYPES), dtype=np.int64),
                                                  _BUF_CODE)
    if not ok:
        return None
    return dict(zip(_NAMES, values, strict=True))


def steps_clean(program: Program, lens: np.ndarray, cols: dict[str, np.ndarray],
                max_steps: int) -> bool:
    """True when :func:`~tacos.msccl.verify_structure.check_structure` would find nothing in
    the steps: per tb the step limit and the parser's children and node limits, per step the
    common case of ``_check_steps`` (numbering, buffers, hasdep, count, peers, bounds)."""
    p = program
    if len(lens) and (lens.max() > max_steps or lens.max() > MAX_CHILDREN):
        return False
    per_gpu = np.fromiter((len(g.tbs) for g in p.gpus), dtype=np.int64, count=len(p.gpus))
    upto = np.concatenate(([0], np.cumsum(lens)))
    bounds = np.concatenate(([0], np.cumsum(per_gpu)))
    gpu_steps = upto[bounds[1:]] - upto[bounds[:-1]]
    if (1 + len(p.gpus) + per_gpu + gpu_steps > MAX_NODES).any():
        return False
    nt = len(lens)
    tb_of = np.repeat(np.arange(nt, dtype=np.int64), lens)
    start = np.zeros(nt + 1, dtype=np.int64)
    np.cumsum(lens, out=start[1:])
    pos = np.arange(int(start[-1]), dtype=np.int64) - start[tb_of]
    sizes = np.asarray([(g.i_chunks, g.o_chunks, g.s_chunks) for g in p.gpus
                        for _ in g.tbs], dtype=np.int64).reshape(-1, 3)[tb_of]
    tbs = [tb for g in p.gpus for tb in g.tbs]
    can_send = np.fromiter((tb.send >= 0 for tb in tbs), dtype=bool, count=nt)[tb_of]
    can_recv = np.fromiter((tb.recv >= 0 for tb in tbs), dtype=bool, count=nt)[tb_of]
    typ, cnt = cols["typ"], cols["cnt"]
    srcbuf, dstbuf = cols["srcbuf"], cols["dstbuf"]
    if (cols["s"] != pos).any() or (srcbuf < 0).any() or (dstbuf < 0).any() \
            or ((cols["hasdep"] != 0) & (cols["hasdep"] != 1)).any():
        return False
    real = typ != STEP_TYPES.index("nop")
    if ((cnt <= 0) | (cnt > MAX_COUNT))[real].any():
        return False
    codes = {t: i for i, t in enumerate(STEP_TYPES)}
    sends = np.isin(typ, [codes[t] for t in ("s", "rcs", "rrs", "rrcs")])
    recvs = np.isin(typ, [codes[t] for t in ("r", "rcs", "rrs", "rrc", "rrcs")])
    reads_src = np.isin(typ, [codes[t] for t in ("s", "rrs", "rrc", "rrcs", "cpy", "re")])
    dst = np.isin(typ, [codes[t] for t in ("r", "rcs", "rrc", "rrcs", "cpy", "re")])
    if (sends & ~can_send).any() or (recvs & ~can_recv).any():
        return False
    rows = np.arange(len(typ))
    src_ok = (cols["srcoff"] >= 0) & (cols["srcoff"] + cnt <= sizes[rows, np.maximum(srcbuf, 0)])
    dst_ok = (cols["dstoff"] >= 0) & (cols["dstoff"] + cnt <= sizes[rows, np.maximum(dstbuf, 0)])
    return not (reads_src & ~src_ok).any() and not (dst & ~dst_ok).any()


def vouch(text: str, *, source: str, strict: bool, max_steps: int, sms: int, capacity: int,
          modes: Callable[[Program], list[bool]]) -> tuple[Program, np.ndarray] | None:
    """``(program, steps per tb)`` when ``text`` is correct with nothing to report (every check
    of the verifier passes under each in-place mode of ``modes(program)``; the program's tbs
    hold no steps), else None: the caller then verifies it the usual way."""
    if len(text) < MIN_BYTES or not verify_jit.available():
        return None
    parsed = parse_xml_runs(text, source=source, strict=strict)
    if parsed is None:
        return None
    outcome, tb_runs = parsed
    p = outcome.program
    if p is None or not verify_jit.supported(p):
        return None
    found, _ = check_structure(p, max_steps=max_steps, sms=sms)
    if found:
        return None
    lens = np.fromiter((sum(r.count for r in runs) for runs in tb_runs), dtype=np.int64,
                       count=len(tb_runs))
    cols = step_columns(text, [r for runs in tb_runs for r in runs])
    if cols is None or not steps_clean(p, lens, cols, max_steps):
        return None
    a = verify_jit.assemble(p, lens, cols)
    if a is None or verify_jit.clean(p, capacity=capacity, modes=modes(p), a=a) is not None:
        return None
    return p, lens
