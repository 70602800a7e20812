"""Chakra execution traces of a plan, for ASTRA-sim (one ``PREFIX.<npu>.et`` per NPU).

Chakra (mlcommons/chakra, ``schema/protobuf/et_def.proto``) is the trace format ASTRA-sim
executes.  A trace file is a ``GlobalMetadata`` message followed by ``Node`` messages, each
preceded by its length as a varint (Chakra's ``protolib.encodeMessage``).  tacos writes, for
every transfer ``src -> dst`` of the schedule:

* a ``COMM_SEND_NODE`` in ``src``'s trace and a ``COMM_RECV_NODE`` in ``dst``'s, with the
  attributes ASTRA-sim reads: ``is_cpu_op`` (false), ``comm_src``/``comm_dst`` (int32),
  ``comm_size`` (bytes, int64) and ``comm_tag`` (int32, the transfer's index, which pairs the
  send with its receive);
* ``data_deps`` from a send to every receive on the same NPU that brought one of its chunks
  (a copy, or a partial of a reduction) and ended before the send starts in the schedule, so
  the simulator keeps the plan's data flow but times it with its own network model.

The message classes are built at run time from the schema's field numbers with the
``protobuf`` package (an optional dependency: ``pip install 'tacos[astra]'``); the ``chakra``
package itself is not on PyPI.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from tacos.atomic import write_bytes
from tacos.errors import TacosError
from tacos.model.schedule import Schedule

SCHEMA_VERSION = "0.0.4"
COMM_SEND_NODE, COMM_RECV_NODE = 5, 6


def _classes() -> tuple[Any, Any, Any]:
    """(GlobalMetadata, Node, AttributeProto) message classes of the Chakra ET schema."""
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError:
        raise TacosError("Chakra traces need the protobuf package",
                         hint="pip install 'tacos[astra]'") from None
    f = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="tacos_chakra_et_def.proto",
                                             package="ChakraProtoMsg", syntax="proto3")
    attr = fdp.message_type.add(name="AttributeProto")
    attr.oneof_decl.add(name="value")
    for name, number, kind in (("name", 1, f.TYPE_STRING), ("doc_string", 2, f.TYPE_STRING)):
        attr.field.add(name=name, number=number, type=kind, label=f.LABEL_OPTIONAL)
    for name, number, kind in (("int32_val", 7, f.TYPE_INT32), ("int64_val", 9, f.TYPE_INT64),
                               ("uint64_val", 13, f.TYPE_UINT64), ("bool_val", 27, f.TYPE_BOOL),
                               ("string_val", 29, f.TYPE_STRING)):
        attr.field.add(name=name, number=number, type=kind, label=f.LABEL_OPTIONAL,
                       oneof_index=0)
    meta = fdp.message_type.add(name="GlobalMetadata")
    meta.field.add(name="version", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    meta.field.add(name="attr", number=2, type=f.TYPE_MESSAGE, label=f.LABEL_REPEATED,
                   type_name=".ChakraProtoMsg.AttributeProto")
    enum = fdp.enum_type.add(name="NodeType")
    for i, name in enumerate(("INVALID_NODE", "METADATA_NODE", "MEM_LOAD_NODE",
                              "MEM_STORE_NODE", "COMP_NODE", "COMM_SEND_NODE",
                              "COMM_RECV_NODE", "COMM_COLL_NODE")):
        enum.value.add(name=name, number=i)
    node = fdp.message_type.add(name="Node")
    for name, number, kind, label in (
            ("id", 1, f.TYPE_UINT64, f.LABEL_OPTIONAL), ("name", 2, f.TYPE_STRING,
                                                         f.LABEL_OPTIONAL),
            ("ctrl_deps", 4, f.TYPE_UINT64, f.LABEL_REPEATED),
            ("data_deps", 5, f.TYPE_UINT64, f.LABEL_REPEATED),
            ("start_time_micros", 6, f.TYPE_UINT64, f.LABEL_OPTIONAL),
            ("duration_micros", 7, f.TYPE_UINT64, f.LABEL_OPTIONAL)):
        node.field.add(name=name, number=number, type=kind, label=label)
    node.field.add(name="type", number=3, type=f.TYPE_ENUM, label=f.LABEL_OPTIONAL,
                   type_name=".ChakraProtoMsg.NodeType")
    node.field.add(name="attr", number=10, type=f.TYPE_MESSAGE, label=f.LABEL_REPEATED,
                   type_name=".ChakraProtoMsg.AttributeProto")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    get = message_factory.GetMessageClass
    return (get(pool.FindMessageTypeByName("ChakraProtoMsg.GlobalMetadata")),
            get(pool.FindMessageTypeByName("ChakraProtoMsg.Node")),
            get(pool.FindMessageTypeByName("ChakraProtoMsg.AttributeProto")))


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def encode_traces(schedule: Schedule) -> dict[int, bytes]:
    """The Chakra trace bytes of every NPU of the schedule's topology (see the module
    docstring); NPUs without transfers get a trace with the metadata only."""
    meta_cls, node_cls, attr_cls = _classes()
    by_npu: dict[int, list[Any]] = defaultdict(list)
    recvs: dict[int, list[tuple[float, frozenset[int], int]]] = defaultdict(list)
    order = sorted(range(len(schedule.transfers)),
                   key=lambda i: (schedule.transfers[i].start, schedule.transfers[i].end, i))
    events = sorted([(schedule.transfers[i].start, 1, i) for i in order]
                    + [(schedule.transfers[i].end, 0, i) for i in order])
    next_id: dict[int, int] = defaultdict(int)
    send_deps: dict[int, list[int]] = {}
    for _time, kind, i in events:  # receives that end at a send's start come first
        t = schedule.transfers[i]
        if kind == 1:
            need = set(t.chunks)
            send_deps[i] = sorted(nid for end, chunks, nid in recvs[t.src]
                                  if end <= t.start and chunks & need)
            continue
        nid = next_id[t.dst]
        next_id[t.dst] += 1
        recvs[t.dst].append((t.end, frozenset(t.chunks), nid))
        by_npu[t.dst].append(_node(node_cls, attr_cls, nid, COMM_RECV_NODE, t, i, schedule,
                                   []))
    for i in order:
        t = schedule.transfers[i]
        nid = next_id[t.src]
        next_id[t.src] += 1
        by_npu[t.src].append(_node(node_cls, attr_cls, nid, COMM_SEND_NODE, t, i, schedule,
                                   send_deps[i]))
    out: dict[int, bytes] = {}
    for npu in range(schedule.topology.n_npus):
        header = meta_cls(version=SCHEMA_VERSION).SerializeToString()
        parts = [_varint(len(header)), header]
        for msg in sorted(by_npu.get(npu, []), key=lambda m: m.id):
            data = msg.SerializeToString()
            parts += [_varint(len(data)), data]
        out[npu] = b"".join(parts)
    return out


def _node(node_cls: Any, attr_cls: Any, nid: int, kind: int, t: Any, index: int,
          schedule: Schedule, deps: list[int]) -> Any:
    role = "send" if kind == COMM_SEND_NODE else "recv"
    node = node_cls(id=nid, name=f"{role}_{index}_{t.op}_{t.src}_to_{t.dst}", type=kind,
                    data_deps=deps, start_time_micros=int(t.start * 1e6),
                    duration_micros=int(round(t.duration * 1e6)))
    node.attr.extend([
        attr_cls(name="is_cpu_op", bool_val=False),
        attr_cls(name="comm_src", int32_val=t.src),
        attr_cls(name="comm_dst", int32_val=t.dst),
        attr_cls(name="comm_size", int64_val=schedule.transfer_bytes(t)),
        attr_cls(name="comm_tag", int32_val=index),
    ])
    return node


def write_traces(schedule: Schedule, prefix: str | Path) -> list[Path]:
    """Write ``PREFIX.<npu>.et`` for every NPU; returns the paths."""
    paths = []
    for npu, data in encode_traces(schedule).items():
        path = Path(f"{prefix}.{npu}.et")
        write_bytes(path, data)  # atomically: a trace is whole or the previous one
        paths.append(path)
    return paths


def decode_trace(data: bytes) -> tuple[Any, list[Any]]:
    """(metadata, nodes) of one trace's bytes (for checks and tests)."""
    meta_cls, node_cls, _attr = _classes()
    pos, msgs = 0, []
    while pos < len(data):
        length, shift = 0, 0
        while True:
            byte = data[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        msgs.append(data[pos:pos + length])
        pos += length
    if not msgs:
        raise TacosError("an empty Chakra trace")
    meta = meta_cls.FromString(msgs[0])
    return meta, [node_cls.FromString(m) for m in msgs[1:]]
