"""Reading a shared object's dynamic section and exported symbols, without loading it.

Which ``libnccl-net.so`` NCCL would accept, and where the loader looks for ``libnccl.so.2``, are
facts of ELF files: the ``ncclNetPlugin_vN`` symbols a plugin exports, and the ``DT_NEEDED``,
``DT_RPATH`` and ``DT_RUNPATH`` entries of the library that links NCCL. They are read here from
the file's section headers (no ``dlopen``: a plugin's constructors never run in our process,
and no ``nm`` or ``readelf`` is needed at run time). Reads are bounded; a file that is not a
well-formed ELF object gives :class:`ElfError`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import BinaryIO

__all__ = ["ElfDynamic", "ElfError", "exported_symbols", "read_dynamic"]

_SHT_DYNSYM = 11
_SHT_DYNAMIC = 6
_DT_NEEDED, _DT_SONAME, _DT_RPATH, _DT_RUNPATH = 1, 14, 15, 29
_SHN_UNDEF = 0
_MAX_SECTIONS = 4096
_MAX_TABLE = 64 * 1024 * 1024  # a symbol or string table larger than this is not believed


class ElfError(ValueError):
    """The file is not a shared object this module can read; the message says why."""


@dataclass(frozen=True, slots=True)
class ElfDynamic:
    """What a shared object asks of the dynamic loader.

    Attributes:
        soname: ``DT_SONAME``, e.g. ``"libnccl.so.2"``; None without one.
        needed: ``DT_NEEDED`` in order, e.g. ``("libnccl.so.2", "libc.so.6")``.
        rpath: ``DT_RPATH`` entries as written, e.g. ``("$ORIGIN/../lib",)``.
        runpath: ``DT_RUNPATH`` entries as written, e.g.
            ``("$ORIGIN/../../nvidia/nccl/lib", "$ORIGIN")``.
    """

    soname: str | None
    needed: tuple[str, ...]
    rpath: tuple[str, ...]
    runpath: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Section:
    kind: int
    offset: int
    size: int
    link: int
    entry_size: int


def _sections(f: BinaryIO) -> tuple[str, list[_Section]]:
    ident = f.read(16)
    if len(ident) < 16 or ident[:4] != b"\x7fELF":
        raise ElfError("not an ELF file")
    wide = {1: False, 2: True}.get(ident[4])
    order = {1: "<", 2: ">"}.get(ident[5])
    if wide is None or order is None:
        raise ElfError("unknown ELF class or byte order")
    header = struct.Struct(order + ("HHIQQQIHHHHHH" if wide else "HHIIIIIHHHHHH"))
    fields = header.unpack(f.read(header.size))
    shoff, shentsize, shnum = fields[5], fields[10], fields[11]
    entry = struct.Struct(order + ("IIQQQQIIQQ" if wide else "IIIIIIIIII"))
    if not 0 < shnum <= _MAX_SECTIONS or shentsize < entry.size:
        raise ElfError(f"implausible section table ({shnum} sections of {shentsize} bytes)")
    f.seek(shoff)
    table = f.read(shnum * shentsize)
    if len(table) < shnum * shentsize:
        raise ElfError("section table past the end of the file")
    sections = []
    for index in range(shnum):
        values = entry.unpack_from(table, index * shentsize)
        # (name, type, flags, addr, offset, size, link, info, addralign, entsize)
        sections.append(_Section(values[1], values[4], values[5], values[6], values[9]))
    return order + ("Q" if wide else "I"), sections


def _read(f: BinaryIO, section: _Section) -> bytes:
    if section.size > _MAX_TABLE:
        raise ElfError(f"a table of {section.size} bytes")
    f.seek(section.offset)
    data = f.read(section.size)
    if len(data) < section.size:
        raise ElfError("a table past the end of the file")
    return data


def _string(table: bytes, offset: int) -> str:
    if not 0 <= offset < len(table):
        raise ElfError("a string offset outside its table")
    end = table.find(b"\0", offset)
    return table[offset:end if end >= 0 else len(table)].decode("utf-8", "surrogateescape")


def read_dynamic(path: str) -> ElfDynamic:
    """The dynamic section of the shared object at ``path``.

    Raises:
        ElfError: Not an ELF file, or one without a readable dynamic section.
        OSError: The file cannot be read.
    """
    with open(path, "rb") as f:
        word, sections = _sections(f)
        dynamic = next((s for s in sections if s.kind == _SHT_DYNAMIC), None)
        if dynamic is None or not 0 <= dynamic.link < len(sections):
            raise ElfError("no dynamic section")
        strings = _read(f, sections[dynamic.link])
        pair = struct.Struct(word[0] + word[1] * 2)
        data = _read(f, dynamic)
        found: dict[int, list[str]] = {}
        for offset in range(0, len(data) - pair.size + 1, pair.size):
            tag, value = pair.unpack_from(data, offset)
            if tag == 0:
                break
            if tag in (_DT_NEEDED, _DT_SONAME, _DT_RPATH, _DT_RUNPATH):
                found.setdefault(tag, []).append(_string(strings, value))
    def paths(tag: int) -> tuple[str, ...]:
        return tuple(p for entry in found.get(tag, ()) for p in entry.split(":") if p)

    soname = found.get(_DT_SONAME, [None])[0]
    return ElfDynamic(soname, tuple(found.get(_DT_NEEDED, ())), paths(_DT_RPATH),
                      paths(_DT_RUNPATH))


def exported_symbols(path: str, prefix: str = "") -> frozenset[str]:
    """Names of the symbols ``path`` defines and exports (its dynamic symbol table, undefined
    ones left out) that start with ``prefix``, e.g.
    ``exported_symbols(plugin, "ncclNetPlugin_")`` -> ``frozenset({"ncclNetPlugin_v8"})``.

    Raises:
        ElfError: Not an ELF file, or one without a dynamic symbol table.
        OSError: The file cannot be read.
    """
    with open(path, "rb") as f:
        word, sections = _sections(f)
        table = next((s for s in sections if s.kind == _SHT_DYNSYM), None)
        if table is None or not 0 <= table.link < len(sections):
            raise ElfError("no dynamic symbol table")
        strings = _read(f, sections[table.link])
        data = _read(f, table)
    wide = word[1] == "Q"
    # Elf64_Sym: name(I) info(B) other(B) shndx(H) value(Q) size(Q); Elf32_Sym: name(I)
    # value(I) size(I) info(B) other(B) shndx(H).
    symbol = struct.Struct(word[0] + ("IBBHQQ" if wide else "IIIBBH"))
    size = table.entry_size or symbol.size
    wanted = prefix.encode()
    names = set()
    for offset in range(0, len(data) - symbol.size + 1, max(size, symbol.size)):
        values = symbol.unpack_from(data, offset)
        name, shndx = values[0], values[3] if wide else values[5]
        if shndx == _SHN_UNDEF or not name:
            continue
        if wanted and not strings.startswith(wanted, name):
            continue
        names.add(_string(strings, name))
    return frozenset(names)
