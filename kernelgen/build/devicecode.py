"""What a built library runs on the GPU, kernel by kernel (pure): digests of each kernel's machine code.

A tuning record holds for the device code it timed, not for the text it was generated from. A library
(or a device-only fatbin) embeds one cubin per arch: an ELF whose sections `.text.<kernel>`, `.nv.info.<kernel>`,
`.nv.constant0.<kernel>`, `.nv.shared.<kernel>` and `.rela.text.<kernel>` are everything the driver loads for
that kernel. A kernel's digest hashes them with every name left out (symbol indices become the names they
point at, and the generated structs' names in those become their place in the configuration), together with
its register count and stack sizes from the file-wide `.nv.info`. So a comment, a moved function, a renamed
variant or a configuration's index in its library leave the digest as it is; a changed instruction, register
count, parameter block or shared allocation changes it.

`instance_keys` adds the launch geometry the host gives the kernel (block shape, tokens per block, whether one
wave walks the tokens): the key a record stores per timed instance. kernelgen builds fatbins uncompressed
(nvcc -compress-mode=none) so that both are read here without CUDA's tools."""
from __future__ import annotations

import hashlib
import json
import re
import struct
from dataclasses import dataclass

from ..spec.variant import Launch

FATBIN_MAGIC = bytes.fromhex("50ed55ba")  # 0xBA55ED50, little-endian
EM_CUDA = 190
_COMPRESSED = 0x2000 | 0x8000  # fatbin entry flags of an LZ4 or ZSTD compressed payload
# .nv.info attributes whose value starts with a symbol index (the rest of the value is kept as it is)
_SYMBOL_FIRST = {0x0A: "PARAM_CBANK", 0x11: "FRAME_SIZE", 0x12: "MIN_STACK_SIZE", 0x23: "MAX_STACK_SIZE",
                 0x2F: "REGCOUNT"}
_LENGTH = re.compile(r"(?<!\d)\d+")  # where a mangled identifier's length may start
_CONFIG_STRUCT = re.compile(r"[A-Za-z_]\w*_cfg\d+")  # a generated configuration struct (codegen/render.py)


class DeviceCodeError(ValueError):
    """A library whose device code cannot be read (a compressed or malformed fatbin)."""


@dataclass(frozen=True)
class Section:
    name: str
    kind: int
    flags: int
    info: int
    link: int
    data: bytes  # empty for NOBITS sections (their size is `size`)
    size: int


@dataclass(frozen=True)
class Cubin:
    sm: int  # the SM number its code is for (90 for sm_90 and sm_90a)
    flags: int  # e_flags
    sections: tuple[Section, ...]
    symbols: tuple[str, ...]  # symbol names by index


def fatbin_payloads(blob: bytes) -> list[bytes]:
    """Every ELF payload of every fatbin in blob (a host library, an object or a .fatbin file)."""
    out, at = [], blob.find(FATBIN_MAGIC)
    while at >= 0:
        _, _, header, size = struct.unpack_from("<IHHQ", blob, at)
        entry, end = at + header, at + header + size
        while entry < end:
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", blob, entry)
            flags = struct.unpack_from("<Q", blob, entry + 40)[0] if entry_header >= 48 else 0
            body = blob[entry + entry_header:entry + entry_header + payload]
            if kind == 2:  # an ELF (1 is PTX)
                if flags & _COMPRESSED:
                    raise DeviceCodeError("the fatbin is compressed (build with nvcc -compress-mode=none)")
                out.append(body)
            entry += entry_header + payload
        at = blob.find(FATBIN_MAGIC, end)
    return out


def read_cubin(elf: bytes) -> Cubin:
    if elf[:4] != b"\x7fELF" or elf[4] != 2:
        raise DeviceCodeError("not a 64-bit ELF")
    machine, flags = struct.unpack_from("<H", elf, 18)[0], struct.unpack_from("<I", elf, 48)[0]
    if machine != EM_CUDA:
        raise DeviceCodeError(f"ELF machine {machine} is not CUDA ({EM_CUDA})")
    shoff, shentsize, shnum, shstrndx = (struct.unpack_from("<Q", elf, 40)[0], *struct.unpack_from("<HHH", elf, 58))
    raw = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + k * shentsize) for k in range(shnum)]
    names_at = raw[shstrndx][4]

    def text(base: int, offset: int) -> str:
        return elf[base + offset:elf.index(b"\0", base + offset)].decode()

    sections = tuple(Section(text(names_at, r[0]), r[1], r[2], r[7], r[6],
                             b"" if r[1] == 8 else elf[r[4]:r[4] + r[5]], r[5]) for r in raw)
    symbols: tuple[str, ...] = ()
    for s in sections:
        if s.kind == 2:  # SHT_SYMTAB: 24-byte entries, names in the linked string table
            strtab = raw[s.link][4]
            symbols = tuple(text(strtab, struct.unpack_from("<I", s.data, i)[0]) for i in range(0, len(s.data), 24))
    return Cubin((flags >> 8) & 0xFF, flags, sections, symbols)


def neutral(name: str) -> str:
    """A symbol or section name with each generated configuration struct's name (`<length><name>_cfg<i>` in the
    mangled name, whether under its namespace or after a substitution such as `NS1_`) replaced by `CFG`: what
    stays the same when a variant or group is renamed or a configuration takes another place in its library."""
    out, at = [], 0
    for m in _LENGTH.finditer(name):
        if m.start() < at:
            continue
        end = m.end() + int(m.group())
        if _CONFIG_STRUCT.fullmatch(name[m.end():end]):
            out.append(name[at:m.start()] + "CFG")
            at = end
    return "".join(out) + name[at:]


def _entries(data: bytes) -> list[tuple[int, int, bytes]]:
    """The (format, attribute, value) records of an .nv.info section."""
    out, at = [], 0
    while at + 4 <= len(data):
        fmt, attr = data[at], data[at + 1]
        if fmt == 4:  # EIFMT_SVAL: a 16-bit size, then the value
            size = struct.unpack_from("<H", data, at + 2)[0]
            out.append((fmt, attr, data[at + 4:at + 4 + size]))
            at += 4 + size
        else:
            out.append((fmt, attr, data[at + 2:at + 4]))
            at += 4
    return out


def _info(data: bytes, symbols: tuple[str, ...], own: int | None = None) -> list[list[object]]:
    """An .nv.info section's records with symbol indices named; with `own`, only the records about symbol own."""
    out: list[list[object]] = []
    for fmt, attr, value in _entries(data):
        if attr in _SYMBOL_FIRST and fmt == 4 and len(value) >= 4:
            index = struct.unpack_from("<I", value)[0]
            if own is not None and index != own:
                continue
            named = neutral(symbols[index]) if index < len(symbols) else f"#{index}"
            out.append([fmt, attr, named, value[4:].hex()])
        elif own is None:
            out.append([fmt, attr, value.hex()])
    return out


def _relocations(data: bytes, symbols: tuple[str, ...]) -> list[list[object]]:
    out: list[list[object]] = []
    for at in range(0, len(data) - 23, 24):
        offset, info, addend = struct.unpack_from("<QQq", data, at)
        index = info >> 32
        out.append([offset, info & 0xFFFFFFFF, neutral(symbols[index]) if index < len(symbols) else index, addend])
    return out


def kernels(cubin: Cubin) -> dict[str, str]:
    """Each kernel's digest (sha256, 16 hex) by its mangled name."""
    by_name = {s.name: s for s in cubin.sections}
    file_info = by_name.get(".nv.info")
    out = {}
    for text in cubin.sections:
        if not text.name.startswith(".text."):
            continue
        name = text.name[len(".text."):]
        parts: dict[str, object] = {"sm": cubin.sm, "flags": cubin.flags, "text": text.data.hex(),
                                    "text_flags": text.flags}
        for s in cubin.sections:
            if s.name.endswith("." + name) and s is not text:
                prefix = s.name[:-len(name) - 1]
                if prefix == ".nv.info":
                    parts[prefix] = _info(s.data, cubin.symbols)
                elif s.kind == 4:  # SHT_RELA
                    parts[prefix] = _relocations(s.data, cubin.symbols)
                else:
                    parts[prefix] = [s.kind, s.flags, s.size, s.data.hex()]
        if file_info is not None:
            parts["file_info"] = _info(file_info.data, cubin.symbols, own=text.info)
        out[name] = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]
    return out


def config_of(kernel: str) -> int | None:
    """The configuration index of a generated kernel (`..._cfg3` in its template arguments), None if none.
    A launch group's kernel names one struct per member, all of the same configuration."""
    found = {int(m) for m in re.findall(r"_cfg(\d+)E", kernel)}
    if len(found) > 1:
        raise DeviceCodeError(f"kernel {kernel} mixes configurations {sorted(found)}")
    return found.pop() if found else None


def by_config(blob: bytes) -> dict[int, dict[int, str]]:
    """{sm: {configuration index: digest}} of every generated kernel in a library's or fatbin's bytes."""
    out: dict[int, dict[int, str]] = {}
    for payload in fatbin_payloads(blob):
        cubin = read_cubin(payload)
        for kernel, digest in kernels(cubin).items():
            config = config_of(kernel)
            if config is not None:
                out.setdefault(cubin.sm, {})[config] = digest
    return out


def geometry(launch: Launch) -> dict[str, object]:
    """How the host launches an instance (templates/kernelgen: run and run_group): blocks of
    threads_per_token x tokens_per_block threads, one per tokens_per_block tokens, or (loop) one wave of
    resident blocks that walks them. PDL is a per-launch attribute, kept in a route, not here."""
    return {"block": launch.threads_per_token * launch.tokens_per_block, "tokens_per_block": launch.tokens_per_block,
            "grid": "wave" if launch.loop else "token blocks"}


def instance_key(digest: str, launch: Launch) -> str:
    """The key a tuning record keeps for a timed instance: its kernel's digest and its launch geometry."""
    payload = json.dumps({"kernel": digest, "launch": geometry(launch)}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def instance_keys(blob: bytes, configs: tuple[Launch, ...], archs: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """{arch: {instance id: key}} for a library built from a plan with these configurations for these archs."""
    found = by_config(blob)
    out: dict[str, dict[str, str]] = {}
    for arch in archs:
        digests = found.get(int(re.sub(r"\D", "", arch)), {})
        missing = [i for i in range(len(configs)) if i not in digests]
        if missing:
            raise DeviceCodeError(f"no {arch} kernel of configuration(s) {missing} in the library")
        out[arch] = {configs[i].instance.id: instance_key(digests[i], configs[i]) for i in range(len(configs))}
    return out
