"""The checks MSCCL++'s executor makes when it loads a JSON execution plan (v0.9).

A reimplementation of what ``src/core/executor/execution_plan.cc`` (``ExecutionPlan::Impl``:
``loadExecutionPlan``, ``parseChannels``, ``setupChannels``, ``setupRemoteBuffers``,
``setupSemaphores``, ``setupOperation``, ``checkMessageSize``, ``getSizeAndChunks``) and the
device limits of ``execution_common.hpp`` (``MAX_CHANNEL`` 16 per thread block and type,
``MAX_CHANNEL_PER_OPERATION`` 8, ``MAX_OPERATION`` 64) reject or leave undefined, so that a
plan tacos writes is known to load without an MSCCL++ build.  :func:`loader_problems` is what
the executor meets for every rank; :func:`size_problems` the per-call size check
(``checkMessageSize``: the executor throws "Input or output size is not aligned with buffer
alignment or chunks" or "... not within the valid range").
"""

from __future__ import annotations

from typing import Any

__all__ = ["OP_NAMES", "buffer_sizes", "loader_problems", "size_problems"]

#: Operation names ``getOpType`` accepts (any other name throws "Invalid operation type").
OP_NAMES = frozenset({
    "nop", "barrier", "put", "pws", "pwsf", "get", "copy", "signal", "wait", "flush", "re",
    "res", "rre", "rres", "ppkt", "rppkt", "respkt", "cpkt", "upkt", "repkt", "recpkt",
    "recspkt", "glres", "gstore", "gstorepkt", "rlxsignal", "rlxwait", "pipeline",
    "sem_acquire", "sem_release"})
CHANNEL_TYPES = ("memory", "port", "none", "switch")
BUFFER_TYPES = ("i", "o", "s")
PROTOCOLS = ("Simple", "LL")
MAX_CHANNEL = 16
MAX_CHANNEL_PER_OPERATION = 8
MAX_OPERATION = 64


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def loader_problems(doc: Any) -> list[str]:
    """What the executor would throw on (or index out of bounds with) loading ``doc`` (a
    decoded plan) on each of its ranks; empty when every rank loads it."""
    out: list[str] = []
    if not isinstance(doc, dict):
        return ["the plan is not a JSON object"]
    for key, kind in (("name", str), ("collective", str), ("inplace", bool),
                      ("protocol", str), ("gpus", list)):
        if not isinstance(doc.get(key), kind):
            out.append(f"top level: {key!r} is missing or not a {kind.__name__}")
    if out:
        return out
    if doc["protocol"] not in PROTOCOLS:
        out.append(f"protocol {doc['protocol']!r} is not Simple or LL")
    for key in ("min_message_size", "max_message_size", "buffer_alignment",
                "num_threads_per_block"):
        if key in doc and not (_is_int(doc[key]) and doc[key] >= 0):
            out.append(f"top level: {key!r} is not a non-negative integer")
    if not _is_int(doc.get("buffer_alignment", 16)) or doc.get("buffer_alignment", 16) < 1:
        out.append("buffer_alignment must be at least 1")
    gpus = doc["gpus"]
    nranks = len(gpus)
    for rank, gpu in enumerate(gpus):
        out += _gpu_problems(gpu, rank, nranks)
    out += _pairing_problems(gpus)
    out += _switch_group_problems(gpus)
    return out


def _gpu_problems(gpu: Any, rank: int, nranks: int) -> list[str]:
    at = f"gpus[{rank}]"
    if not isinstance(gpu, dict) or gpu.get("id") != rank:
        return [f"{at}: id must be {rank} (the executor throws 'GPU rank does not match')"]
    out: list[str] = []
    for key in ("input_chunks", "output_chunks", "scratch_chunks"):
        if not (_is_int(gpu.get(key)) and gpu[key] >= 0):
            out.append(f"{at}.{key} is missing or negative")
    if not out and gpu["input_chunks"] == 0 and gpu["output_chunks"] == 0:
        out.append(f"{at}: input_chunks and output_chunks are both 0 ('Output or Input chunks "
                   "must be greater than 0')")
    count = {"memory": 0, "port": 0, "switch": 0}
    for c, ch in enumerate(gpu.get("channels", [])):
        cat = f"{at}.channels[{c}]"
        ctype = ch.get("channel_type") if isinstance(ch, dict) else None
        if ctype not in CHANNEL_TYPES or ctype == "none":
            out.append(f"{cat}: channel_type {ctype!r} is not memory, port or switch")
            continue
        if ctype == "switch":
            if ch.get("buffer_type") not in BUFFER_TYPES:
                out.append(f"{cat}: switch channel buffer_type must be i, o or s")
            for k, grp in enumerate(ch.get("rank_groups", [])):
                ranks = grp.get("ranks") if isinstance(grp, dict) else None
                if not _is_int(grp.get("size") if isinstance(grp, dict) else None) \
                        or not isinstance(ranks, list) \
                        or not all(_is_int(r) and 0 <= r < nranks for r in ranks) \
                        or rank not in ranks:
                    out.append(f"{cat}.rank_groups[{k}]: needs an integer size and the ranks "
                               "of the plan, this rank among them")
                count["switch"] += 1
            continue
        peers = ch.get("connected_to")
        if not isinstance(peers, list) or not all(_is_int(p) and 0 <= p < nranks and p != rank
                                                  for p in peers):
            out.append(f"{cat}: connected_to must list other ranks of the plan")
            continue
        count[ctype] += len(peers)
    remote: list[str] = []
    for b, rb in enumerate(gpu.get("remote_buffers", [])):
        cat = f"{at}.remote_buffers[{b}]"
        types = rb.get("access_channel_types") if isinstance(rb, dict) else None
        if not isinstance(rb, dict) or not (_is_int(rb.get("rank")) and 0 <= rb["rank"] < nranks) \
                or rb.get("type") not in BUFFER_TYPES or not isinstance(types, list) \
                or any(t not in ("memory", "port") for t in types):
            out.append(f"{cat}: needs a rank, a type i/o/s and access_channel_types memory/port")
            remote.append("")
            continue
        remote.append(",".join(types))
    for s, sem in enumerate(gpu.get("semaphores", [])):
        if not isinstance(sem, dict) or not _is_int(sem.get("init_value")):
            out.append(f"{at}.semaphores[{s}]: needs an integer init_value")
    nsem = len(gpu.get("semaphores", []))
    tbs = gpu.get("threadblocks")
    if not isinstance(tbs, list):
        return out + [f"{at}.threadblocks is missing"]
    for t, tb in enumerate(tbs):
        out += _tb_problems(tb, f"{at}.threadblocks[{t}]", t, count, remote, nsem)
    return out


def _tb_problems(tb: Any, at: str, t: int, count: dict[str, int], remote: list[str],
                 nsem: int) -> list[str]:
    if not isinstance(tb, dict) or tb.get("id") != t:
        return [f"{at}: id must be {t}"]
    out: list[str] = []
    local: dict[str, int] = {}
    for c, ch in enumerate(tb.get("channels", [])):
        ctype = ch.get("channel_type") if isinstance(ch, dict) else None
        ids = ch.get("channel_ids") if isinstance(ch, dict) else None
        if ctype not in count or not isinstance(ids, list) \
                or not all(_is_int(i) and 0 <= i < count[ctype] for i in ids):
            out.append(f"{at}.channels[{c}]: {ctype!r} channel_ids must index this GPU's "
                       f"{ctype} channels")
            continue
        local[ctype] = local.get(ctype, 0) + len(ids)
    for ctype, n in local.items():
        if n > MAX_CHANNEL:
            out.append(f"{at}: {n} {ctype} channels; the executor holds {MAX_CHANNEL} "
                       "per thread block (MAX_CHANNEL)")
    refs: dict[str, int] = {}
    for c, ref in enumerate(tb.get("remote_buffer_refs", [])):
        ctype = ref.get("access_channel_type") if isinstance(ref, dict) else None
        ids = ref.get("remote_buffer_ids") if isinstance(ref, dict) else None
        if ctype not in ("memory", "port") or not isinstance(ids, list) \
                or not all(_is_int(i) and 0 <= i < len(remote) and ctype in remote[i].split(",")
                           for i in ids):
            out.append(f"{at}.remote_buffer_refs[{c}]: ids must name remote buffers this GPU "
                       f"reaches over {ctype!r}")
            continue
        refs[ctype] = refs.get(ctype, 0) + len(ids)
        if refs[ctype] > MAX_CHANNEL:
            out.append(f"{at}: more than {MAX_CHANNEL} {ctype} remote buffers")
    ops = tb.get("ops")
    if not isinstance(ops, list):
        return out + [f"{at}.ops is missing"]
    if len(ops) > MAX_OPERATION:
        out.append(f"{at}: {len(ops)} operations; the executor holds {MAX_OPERATION}")
    for k, op in enumerate(ops):
        out += _op_problems(op, f"{at}.ops[{k}]", local, refs, nsem)
    return out


def _op_problems(op: Any, at: str, local: dict[str, int], refs: dict[str, int],
                 nsem: int) -> list[str]:
    if not isinstance(op, dict) or op.get("name") not in OP_NAMES:
        return [f"{at}: invalid operation type {op.get('name') if isinstance(op, dict) else op!r}"]
    out: list[str] = []
    ctype = op.get("channel_type", "none")
    if ctype not in CHANNEL_TYPES:
        return [f"{at}: invalid channel type {ctype!r}"]
    ids = op.get("channel_ids", [])
    if len(ids) > MAX_CHANNEL_PER_OPERATION:
        out.append(f"{at}: {len(ids)} channels; at most {MAX_CHANNEL_PER_OPERATION} per operation")
    if not all(_is_int(i) and 0 <= i < local.get(ctype, 0) for i in ids):
        out.append(f"{at}: channel_ids {ids} are not {ctype} channels of this thread block")
    for side in ("src_buff", "dst_buff"):
        for j, ref in enumerate(op.get(side, [])):
            rat = f"{at}.{side}[{j}]"
            if not isinstance(ref, dict) or not _is_int(ref.get("index")) \
                    or not _is_int(ref.get("size")):
                out.append(f"{rat}: needs integer index and size")
            elif "type" in ref and ref["type"] not in BUFFER_TYPES:
                out.append(f"{rat}: invalid buffer type {ref['type']!r}")
            elif "buffer_id" in ref and not (_is_int(ref["buffer_id"])
                                             and 0 <= ref["buffer_id"] < refs.get(ctype, 0)):
                out.append(f"{rat}: buffer_id {ref['buffer_id']!r} is not a {ctype} remote "
                           "buffer of this thread block")
            elif "switch_channel_id" in ref and not (
                    _is_int(ref["switch_channel_id"])
                    and 0 <= ref["switch_channel_id"] < local.get("switch", 0)):
                out.append(f"{rat}: switch_channel_id is not a switch channel of this thread "
                           "block")
            elif not {"type", "buffer_id", "switch_channel_id"} & set(ref):
                out.append(f"{rat}: names no buffer (type, buffer_id or switch_channel_id)")
    if not all(_is_int(s) and 0 <= s < nsem for s in op.get("semaphore_ids", [])):
        out.append(f"{at}: semaphore_ids must name this GPU's semaphores")
    if op["name"] == "barrier" and not (_is_int(op.get("barrier_id"))
                                        and _is_int(op.get("num_threadblocks"))):
        out.append(f"{at}: a barrier needs barrier_id and num_threadblocks")
    return out


def _pairing_problems(gpus: list[Any]) -> list[str]:
    """Per (rank, peer, type): as many channels each way (else the executor adds unpaired
    filler connections whose signals nobody waits for)."""
    have: dict[tuple[int, int, str], int] = {}
    for rank, gpu in enumerate(gpus):
        for ch in gpu.get("channels", []) if isinstance(gpu, dict) else []:
            if isinstance(ch, dict) and ch.get("channel_type") in ("memory", "port"):
                for p in ch.get("connected_to", []) or []:
                    key = (rank, p, ch["channel_type"])
                    have[key] = have.get(key, 0) + 1
    return [f"rank {a} lists {n} {t} channel(s) to rank {b}, which lists "
            f"{have.get((b, a, t), 0)} back" for (a, b, t), n in sorted(have.items())
            if have.get((b, a, t), 0) != n]


def _switch_group_problems(gpus: list[Any]) -> list[str]:
    """Every rank of a switch channel's rank group lists that group, and two ranks list the
    groups they share in one order: the executor connects each group collectively
    (``connectNvlsCollective`` over its ranks, in each rank's channel order), so a rank that
    skips a group or lists it elsewhere leaves the others waiting."""
    lists: list[list[tuple[int, ...]]] = []
    for gpu in gpus:
        seq: list[tuple[int, ...]] = []
        for ch in gpu.get("channels", []) if isinstance(gpu, dict) else []:
            if isinstance(ch, dict) and ch.get("channel_type") == "switch":
                for grp in ch.get("rank_groups", []) or []:
                    ranks = grp.get("ranks") if isinstance(grp, dict) else None
                    if isinstance(ranks, list) and all(_is_int(r) for r in ranks):
                        seq.append(tuple(ranks))
        lists.append(seq)
    out: list[str] = []
    for a, seq in enumerate(lists):
        for b in sorted({m for grp in seq for m in grp if m != a and 0 <= m < len(lists)}):
            mine = [g for g in seq if b in g]
            theirs = [g for g in lists[b] if a in g]
            if mine != theirs and (a < b or not theirs):  # each pair reported once
                out.append(f"ranks {a} and {b} list the switch channel groups they share "
                           f"differently ({[list(g) for g in mine]} against "
                           f"{[list(g) for g in theirs]}): the NVLS connection setup would "
                           "hang")
    return out


def buffer_sizes(collective: str, nbytes: int, nranks: int) -> tuple[int, int]:
    """The (input, output) bytes per rank an executor call passes for a collective of
    ``nbytes`` (tacos' size: all-gather's output, reduce-scatter's input, all-reduce's and
    all-to-all's buffer)."""
    if collective == "allgather":
        return nbytes // nranks, nbytes
    if collective == "reducescatter":
        return nbytes, nbytes // nranks
    return nbytes, nbytes


def size_problems(doc: dict[str, Any], nbytes: int) -> list[str]:
    """Why the executor would refuse ``doc`` for a collective of ``nbytes`` (``checkMessageSize``
    and ``getSizeAndChunks``), or why it would not pick it (outside its size range)."""
    gpus = doc.get("gpus", [])
    if not gpus:
        return ["the plan has no ranks"]
    coll = doc.get("collective", "")
    align = int(doc.get("buffer_alignment", 16) or 16)
    in_b, out_b = buffer_sizes(coll, nbytes, len(gpus))
    if coll in ("allgather", "reducescatter") and nbytes % len(gpus):
        return [f"{nbytes} bytes do not split over {len(gpus)} ranks"]
    gpu = gpus[0]
    ic, oc = int(gpu.get("input_chunks", 0)), int(gpu.get("output_chunks", 0))
    out: list[str] = []
    if in_b % align or out_b % align or (ic and (in_b // align) % ic) \
            or (oc and (out_b // align) % oc):
        out.append(f"at {nbytes} bytes the input ({in_b} B) and output ({out_b} B) are not "
                   f"multiples of {align}-byte units times {ic} input / {oc} output chunks: the "
                   "executor throws 'Input or output size is not aligned with buffer alignment "
                   "or chunks'")
    elif ic and oc and in_b // ic != out_b // oc:
        out.append(f"at {nbytes} bytes input chunks ({in_b}/{ic}) and output chunks "
                   f"({out_b}/{oc}) differ in size: 'Size per chunks inconsistent'")
    size = out_b if coll == "allgather" else in_b
    lo = int(doc.get("min_message_size", 0) or 0)
    hi = int(doc.get("max_message_size", 2**64 - 1))
    if not lo <= size <= hi:
        out.append(f"{size} bytes is outside the plan's range {lo}..{hi}: 'Input or output size "
                   "is not within the valid range'")
    return out
