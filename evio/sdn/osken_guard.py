"""Guard os-ken's OpenFlow 1.3 parser against lengths that never advance.

os-ken reads a message's lists (instructions, actions, multipart bodies, queues,
buckets, properties) by ``offset += element.len`` until the declared length is
used up. An element that declares a length of 0 (or 1-3: shorter than any
OpenFlow TLV header), or one of an unknown type that a loop skips without
moving on, leaves the offset where it was, and the switch's receive
thread loops forever, with the app's other switches starved of the GIL.
benchmarks/fuzz.py (the openflow target) found a dozen such loops, in flow
stats and port descriptions replies among others.

`guard_os_ken_parsers()` wraps every element parser of ofproto_v1_3_parser (a
``parser(buf, offset)`` classmethod, or a ``parse(buf)`` one returning the element
and the rest) to refuse such an element with ValueError;
os-ken's ``ofproto_parser.msg`` catches it, logs the message as malformed and
drops it, and the connection stays. ``OFPMatch`` is left alone: its own loop
always advances, and it is on the packet-in path.
"""

from __future__ import annotations

import functools
import inspect
import struct
from typing import Any

MIN_ELEMENT_LEN = 4  # the smallest OpenFlow TLV: type and length
_GUARDED = "_evio_length_guard"


def _guarded(parse: Any) -> Any:
    @functools.wraps(parse)
    def parser(cls: type, buf: Any, offset: int, *args: Any, **kwargs: Any) -> Any:
        element = parse(cls, buf, offset, *args, **kwargs)
        if element is None:
            # An unknown type: some loops skip it without advancing (OFPFlowMod's instructions).
            raise ValueError(f"{cls.__name__}: unknown element type at offset {offset}")
        length = getattr(element, "length", None)
        if length is None:
            length = getattr(element, "len", None)
        if isinstance(length, int) and length < MIN_ELEMENT_LEN:
            raise ValueError(f"{type(element).__name__} of length {length} at offset {offset}")
        return element

    setattr(parser, _GUARDED, True)
    return parser


def _guarded_hello(parse: Any) -> Any:
    """OFPHello reads its elements' headers itself (no element parser to wrap)."""

    @functools.wraps(parse)
    def parser(cls: type, datapath: Any, version: int, msg_type: int, msg_len: int, xid: int, buf: Any) -> Any:
        offset = 8  # OFP_HELLO_HEADER_SIZE
        while offset + 4 <= min(msg_len, len(buf)):
            length = struct.unpack_from("!H", buf, offset + 2)[0]
            if length < MIN_ELEMENT_LEN:
                raise ValueError(f"hello element of length {length} at offset {offset}")
            offset += length
        return parse(cls, datapath, version, msg_type, msg_len, xid, buf)

    setattr(parser, _GUARDED, True)
    return parser


def _guarded_parse(parse: Any) -> Any:
    """A ``parse(buf) -> (element, rest)`` classmethod (properties, instruction and action ids): the
    rest must be shorter than what it was given."""

    @functools.wraps(parse)
    def wrapper(cls: type, buf: Any, *args: Any, **kwargs: Any) -> Any:
        result = parse(cls, buf, *args, **kwargs)
        if isinstance(result, tuple) and len(result) == 2 and len(result[1]) >= len(buf):
            raise ValueError(f"{cls.__name__}: an element that does not advance")
        return result

    setattr(wrapper, _GUARDED, True)
    return wrapper


def guard_os_ken_parsers() -> int:
    """Install the guard (once); returns how many parsers it wraps."""
    from os_ken.ofproto import ofproto_v1_3_parser as parsers

    count = 0
    for cls in vars(parsers).values():
        if not inspect.isclass(cls) or cls is parsers.OFPMatch:
            continue
        parse = vars(cls).get("parse")
        if isinstance(parse, classmethod) and not getattr(parse.__func__, _GUARDED, False):
            params = list(inspect.signature(parse.__func__).parameters)
            if params[1:] == ["buf"]:
                setattr(cls, "parse", classmethod(_guarded_parse(parse.__func__)))  # noqa: B010 - as below
                count += 1
        method = vars(cls).get("parser")
        if not isinstance(method, classmethod) or getattr(method.__func__, _GUARDED, False):
            continue
        params = list(inspect.signature(method.__func__).parameters)
        if params[1:3] != ["buf", "offset"]:
            continue  # a message parser (datapath, version, ...): its elements are guarded
        setattr(cls, "parser", classmethod(_guarded(method.__func__)))  # noqa: B010 - a class found at run time
        count += 1
    hello = vars(parsers.OFPHello)["parser"]
    if not getattr(hello.__func__, _GUARDED, False):
        parsers.OFPHello.parser = classmethod(_guarded_hello(hello.__func__))
        # The registry of message parsers holds the method bound when the class was made.
        parsers._MSG_PARSERS[parsers.OFPHello.cls_msg_type] = parsers.OFPHello.parser
        count += 1
    return count
