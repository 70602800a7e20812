"""``--format nccl-tuner``: the runtime model's best NCCL algorithm, protocol and channel count
per size window, as the CSV NCCL's example tuner plugin reads.

The format is NVIDIA/nccl ``plugins/tuner/example/plugin.c`` (NCCL 2.2x-2.30): one line per
rule, ``collective,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks[,numPipeOps
[,regBuff]]``, fields split at commas (``strtok``) with blanks trimmed, lines starting with
``#`` or empty skipped; collectives ``broadcast reduce allgather reducescatter allreduce``,
algorithms ``tree ring collnet_direct collnet_chain nvls nvls_tree pat``, protocols ``ll ll128
simple``; ``-1`` matches any value (channels: keep NCCL's).  The plugin applies the first rule
whose collective matches and ``min_bytes <= nBytes <= max_bytes``, where ``nBytes`` is the
larger of the send and receive buffers (``ncclFuncMaxSendRecvCount``: all-gather's output,
reduce-scatter's input), which is tacos' collective size.  The plugin is loaded with
``NCCL_TUNER_PLUGIN=/path/libnccl-tuner-example.so NCCL_TUNER_CONFIG_FILE=tuner.csv``
(``docs/running.md``).

Rows are written for this topology's node and rank counts, so the file only steers
communicators of that shape.  The plugin forces ring/simple on a call no rule matches, so
``tacosc --format nccl-tuner`` writes rules for every collective it tunes, over all sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tacos.errors import TacosError
from tacos.model.topology import Topology

__all__ = ["TunerRow", "best_nccl", "parse_tuner_csv", "tuner_csv", "tuner_rows"]

#: tacos' NCCL algorithm names -> the plugin's.
ALGO_NAMES = {"ring": "ring", "tree": "tree", "nvls": "nvls", "nvls_tree": "nvls_tree",
              "collnet": "collnet_direct", "pat": "pat"}
PROTO_NAMES = {"LL": "ll", "LL128": "ll128", "Simple": "simple"}
COLLECTIVES = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce")
SIZE_MAX = 2**64 - 1
#: Sizes sampled: powers of two from 1 KiB to 16 GiB; window k holds [2^k, 2^(k+1) - 1].
SMALLEST, LARGEST = 10, 34


@dataclass(frozen=True)
class TunerRow:
    """One rule of the tuner file."""

    collective: str
    min_bytes: int
    max_bytes: int
    algorithm: str
    protocol: str
    channels: int
    nnodes: int
    nranks: int

    def line(self) -> str:
        """The CSV line."""
        return (f"{self.collective},{self.min_bytes},{self.max_bytes},{self.algorithm},"
                f"{self.protocol},{self.channels},{self.nnodes},{self.nranks}")


def best_nccl(topology: Topology, kind: str, nbytes: int,
              group: Sequence[int] | None = None) -> tuple[str, str, int, float]:
    """The runtime model's fastest NCCL (algorithm, protocol, channels, seconds) for ``kind``
    of ``nbytes`` among the algorithm/protocol pairs NCCL can run on this group."""
    from tacos.runtime.hardware import resolve
    from tacos.runtime.nccl_model import estimate_nccl
    from tacos.runtime.nccl_tuner import candidates, nccl_system

    s = nccl_system(topology, group, resolve(topology, None))
    best = None
    for algo, proto in candidates(s, kind):
        est = estimate_nccl(topology, kind, nbytes, group=group, algorithm=algo,
                            protocol=proto)
        key = (est.time, algo, proto)
        if best is None or key < best[0]:
            best = (key, est)
    if best is None:
        raise TacosError(f"NCCL has no algorithm for {kind} on this group")
    (time, algo, proto), est = best
    return algo, proto, int(est.detail.get("channels") or 1), time


def tuner_rows(topology: Topology, kind: str,
               group: Sequence[int] | None = None) -> list[TunerRow]:
    """Rules for ``kind`` from 0 bytes to the largest size: one per window of sampled sizes
    with the same best choice (windows of equal choice merged)."""
    from tacos.runtime.hardware import resolve
    from tacos.runtime.nccl_tuner import nccl_system

    kind = kind.replace("_", "").replace("-", "").lower()
    if kind not in COLLECTIVES:
        raise TacosError(f"NCCL's tuner plugin has no {kind!r} (it tunes "
                         f"{', '.join(COLLECTIVES)})", hint="all-to-all runs NCCL's "
                         "send/recv; there is nothing to tune")
    s = nccl_system(topology, group, resolve(topology, None))
    rows: list[TunerRow] = []
    for k in range(SMALLEST, LARGEST + 1):
        algo, proto, channels, _ = best_nccl(topology, kind, 1 << k, group)
        lo = 0 if k == SMALLEST else 1 << k
        hi = SIZE_MAX if k == LARGEST else (1 << (k + 1)) - 1
        row = TunerRow(kind, lo, hi, ALGO_NAMES[algo], PROTO_NAMES[proto], channels,
                       s.nodes, s.n)
        last = rows[-1] if rows else None
        if last and (last.algorithm, last.protocol, last.channels) == \
                (row.algorithm, row.protocol, row.channels):
            rows[-1] = TunerRow(kind, last.min_bytes, hi, row.algorithm, row.protocol,
                                row.channels, s.nodes, s.n)
        else:
            rows.append(row)
    return rows


def tuner_csv(topology: Topology, kinds: Sequence[str],
              group: Sequence[int] | None = None, *, source: str = "") -> str:
    """The tuner file text for ``kinds`` on ``group`` of ``topology`` (deterministic)."""
    lines = ["# NCCL tuner rules written by tacos from its NCCL runtime model"
             + (f" for {source}" if source else ""),
             "# collective,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks",
             "# load: NCCL_TUNER_PLUGIN=libnccl-tuner-example.so NCCL_TUNER_CONFIG_FILE=<this>"]
    for kind in kinds:
        lines += [r.line() for r in tuner_rows(topology, kind, group)]
    return "\n".join(lines) + "\n"


def parse_tuner_csv(text: str) -> list[TunerRow]:
    """Read a tuner file by the example plugin's rules (``plugin.c``): ``#``/empty lines
    skipped, fields split at commas and trimmed, 8 to 10 fields, names as the plugin knows
    them; anything the plugin would drop or misread is a :class:`TacosError` with its line."""
    algos = set(ALGO_NAMES.values()) | {"collnet_chain"}
    out: list[TunerRow] = []
    for n, raw in enumerate(text.split("\n"), 1):
        if not raw or raw[0] in "#\n":
            continue
        if len(raw) >= 256:
            raise TacosError(f"line {n}: longer than the plugin's 256-byte line buffer")
        fields = [f.strip(" \t") for f in raw.split(",") if f.strip(" \t") != ""]
        if not 8 <= len(fields) <= 10:
            raise TacosError(f"line {n}: {len(fields)} fields; the plugin reads 8 to 10")
        coll, lo, hi, algo, proto = fields[:5]
        if coll not in COLLECTIVES or algo not in algos or proto not in PROTO_NAMES.values():
            raise TacosError(f"line {n}: unknown collective, algorithm or protocol in {raw!r}")
        try:
            nums = [int(f) for f in (lo, hi, *fields[5:])]
        except ValueError:
            raise TacosError(f"line {n}: a number field is not an integer: {raw!r}") from None
        if not 0 <= nums[0] <= nums[1] <= SIZE_MAX:
            raise TacosError(f"line {n}: min_bytes..max_bytes is not a range of size_t")
        out.append(TunerRow(coll, nums[0], nums[1], algo, proto, nums[2], nums[3], nums[4]))
    return out
