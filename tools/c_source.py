"""Reading C/C++ sources for log calls: comments out, call arguments split, format strings found.

Pure functions over text, used by ``tools/nccl_messages.py``. Nothing here knows NCCL: the macro
names and the position of the format argument come from the caller.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = [
    "LogCall", "format_to_regex", "literal_length", "log_calls", "result_names", "strip_comments",
]

_SPECIAL = re.compile(r"[\"'/]")
# the <inttypes.h> macros that format strings concatenate ("%" PRIu64): their expansion on
# Linux x86-64/aarch64, where NCCL runs
_PRI = {
    "PRId64": "ld", "PRIi64": "li", "PRIu64": "lu", "PRIx64": "lx", "PRIX64": "lX",
    "PRId32": "d", "PRIi32": "i", "PRIu32": "u", "PRIx32": "x", "PRIX32": "X",
    "PRIu16": "hu", "PRIx16": "hx", "PRIu8": "hhu", "PRIx8": "hhx",
    "PRIuPTR": "lu", "PRIxPTR": "lx", "PRIdPTR": "ld",
}
_TOKEN = re.compile(
    r"\s+|(?:u8|L|u|U)?\"((?:[^\"\\\n]|\\.)*)\"|([A-Za-z_]\w*)|(.)", re.S
)
_ESCAPE = re.compile(r"\\(x[0-9A-Fa-f]{1,2}|[0-7]{1,3}|.)", re.S)
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f",
                   "v": "\v", "\\": "\\", '"': '"', "'": "'", "?": "?", "e": "\x1b"}
#: printf conversion: flags, width, precision, length, conversion
CONVERSION = re.compile(
    r"%([-+ #0']*)(\*|[0-9]+)?(?:\.(\*|[0-9]*))?(hh|h|ll|l|L|q|j|z|Z|t)?([diouxXeEfFgGaAcspnm%])"
)
# The text a conversion prints, as a regular expression. Numbers may be padded with spaces
# (a width); strings are anything, matched lazily so that the literal after them anchors them.
_CONVERSION_REGEX = {
    "d": r"\s*[-+]?[0-9]+", "i": r"\s*[-+]?[0-9]+", "u": r"\s*[0-9]+", "o": r"\s*[0-7]+",
    "x": r"\s*(?:0x)?[0-9a-fA-F]+", "X": r"\s*(?:0X)?[0-9a-fA-F]+",
    "e": r"\s*[-+]?(?:[0-9.]+(?:[eE][-+]?[0-9]+)?|nan|inf)",
    "f": r"\s*[-+]?(?:[0-9.]+|nan|inf)", "g": r"\s*[-+]?(?:[0-9.]+(?:[eE][-+]?[0-9]+)?|nan|inf)",
    "c": r".", "p": r"(?:0x[0-9a-fA-F]+|\(nil\)|0)",
}


def strip_comments(text: str) -> str:
    """``text`` with its ``//`` and ``/* */`` comments blanked (newlines kept, so line numbers
    stay), string and character literals untouched."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        match = _SPECIAL.search(text, i)
        j = match.start() if match else n
        out.append(text[i:j])
        if j >= n:
            break
        c = text[j]
        if c in "\"'":
            k = j + 1
            while k < n and text[k] != c and text[k] != "\n":
                k += 2 if text[k] == "\\" else 1
            out.append(text[j : k + 1])
            i = k + 1
        elif text.startswith("//", j):
            k = text.find("\n", j)
            k = n if k < 0 else k
            out.append(" " * (k - j))
            i = k
        elif text.startswith("/*", j):
            k = text.find("*/", j + 2)
            k = n if k < 0 else k + 2
            out.append(re.sub(r"[^\n]", " ", text[j:k]))
            i = k
        else:
            out.append(c)
            i = j + 1
    return "".join(out)


def _arguments(text: str, open_paren: int, limit: int = 8000) -> tuple[list[str], int] | None:
    """The top-level arguments of the call whose ``(`` is at ``open_paren``, and the index after
    its ``)``; None when it does not close within ``limit`` characters."""
    depth = 0
    start = open_paren + 1
    args: list[str] = []
    i, end = open_paren, min(len(text), open_paren + limit)
    while i < end:
        c = text[i]
        if c in "\"'":
            k = i + 1
            while k < end and text[k] != c and text[k] != "\n":
                k += 2 if text[k] == "\\" else 1
            i = k + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                args.append(text[start:i])
                return args, i + 1
        elif c == "," and depth == 1:
            args.append(text[start:i])
            start = i + 1
        i += 1
    return None


def _unescape(body: str) -> str:
    def one(match: re.Match[str]) -> str:
        code = match.group(1)
        if code[0] == "x":
            return chr(int(code[1:], 16))
        if code[0] in "01234567":
            return chr(int(code, 8))
        return _SIMPLE_ESCAPES.get(code, code)

    return _ESCAPE.sub(one, body)


def format_string(expression: str) -> str | None:
    """The format a C expression of adjacent string literals spells (``"Call to " name
    " failed"`` -> ``"Call to %s failed"``: a macro parameter or other identifier between
    literals stands for a string); None when it is not such an expression (a variable, a
    ternary, a function call)."""
    parts: list[str] = []
    literal = False
    for match in _TOKEN.finditer(expression.strip()):
        body, name, other = match.groups()
        if body is not None:
            parts.append(_unescape(body))
            literal = True
        elif name is not None:
            # "%" PRIu64 -> "%lu"; any other name is a macro parameter or a constant string
            parts.append(_PRI.get(name, "%s"))
        elif other is not None:
            return None
    if not literal:
        return None
    return "".join(parts)


@dataclass(frozen=True, slots=True)
class LogCall:
    """One log call found in a source file.

    Attributes:
        macro: The macro called, e.g. ``"WARN"``.
        line: 1-based line of the call.
        format: Its format string, e.g. ``"Call to %s failed: %s"``.
        returns: What the code does right after it, within the same block: the ``ncclResult_t``
            it returns or assigns (``"ncclSystemError"``), ``"continues"`` when it returns
            success or carries on, ``"abort"`` when it ends the process, ``"stops"`` when it
            jumps out of a function that returns a pointer (a thread's start routine gives up),
            ``""`` when that cannot be told from the text.
    """

    macro: str
    line: int
    format: str
    returns: str


_RESULT = re.compile(
    r"\breturn\b\s*([^;{}]*);|\b\w+\s*=\s*(nccl[A-Z]\w*)\s*;|\b(continue|break)\s*;"
    r"|\bgoto\s+(\w+)\s*;|\b(abort|exit|_exit)\s*\("
)
_NAME = re.compile(r"\b(nccl[A-Z]\w*)\b(\s*\()?")
_RESULT_ENUM = re.compile(r"typedef\s+enum\s*\{([^}]*)\}\s*ncclResult_t\s*;")


def result_names(header: str) -> frozenset[str]:
    """The values of ``ncclResult_t`` that NCCL's header (``src/nccl.h.in``) declares, e.g.
    ``ncclInvalidUsage``; empty when it declares none."""
    match = _RESULT_ENUM.search(strip_comments(header))
    if match is None:
        return frozenset()
    names = (item.split("=")[0].strip() for item in match.group(1).split(","))
    return frozenset(name for name in names if name and name != "ncclNumResults")


def _returned(expression: str, results: frozenset[str]) -> str:
    """What ``return <expression>;`` returns: ``"continues"`` for nothing or success, the first
    error among the results it names (``cond ? ncclInvalidUsage : ncclInternalError``), ``""``
    for a variable or a call whose value the text does not show."""
    if not expression:
        return "continues"  # `return;` from a void function
    named = [m.group(1) for m in _NAME.finditer(expression) if not m.group(2)
             and (m.group(1) in results if results else True)]
    errors = [name for name in named if name != "ncclSuccess"]
    if errors:
        return errors[0]
    return "continues" if named else ""


# A string or character literal, or a brace: what the scan for function bodies reads.
_BRACES = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|[{}]')
# What makes the statement after it run only maybe: ``if (x) goto fail;``, ``else return ...``.
_CONDITION = re.compile(r"\b(?:if|while|for)\s*\(|\belse\b|\?")
# A block that holds definitions rather than code: ``namespace x {``, ``extern "C" {``.
_SCOPE = re.compile(r'\s*(?:namespace\b|extern\s*"C")')
# The return type of a thread's start routine (or of any function returning a pointer):
# ``static void *bootstrapRoot(void* rargs)``.
_POINTER_FUNCTION = re.compile(r"\bvoid\s*\*\s*[\w:]+\s*\(")


@dataclass(frozen=True, slots=True)
class _Function:
    """A function body in a source file: where its braces are and the text before them."""

    start: int
    end: int
    signature: str


def _functions(code: str) -> list[_Function]:
    """The function bodies of ``code`` (comments stripped), in order: every top-level block
    (inside namespaces and ``extern "C"``) that follows a signature with parentheses."""
    found: list[_Function] = []
    stack: list[tuple[bool, int, str]] = []  # per open brace: counts, where, its signature
    depth = 0
    for match in _BRACES.finditer(code):
        brace, pos = match.group(), match.start()
        if brace == "{":
            head_start = max(code.rfind(";", 0, pos), code.rfind("}", 0, pos),
                             code.rfind("{", 0, pos)) + 1
            head = "\n".join(line for line in code[head_start:pos].splitlines()
                             if not line.lstrip().startswith("#"))
            counts = depth > 0 or not _SCOPE.match(head)
            stack.append((counts, pos, head))
            depth += counts
        elif brace == "}" and stack:
            counts, opened, head = stack.pop()
            depth -= counts
            if counts and depth == 0 and "(" in head:
                found.append(_Function(opened, pos, head.strip()))
    return found


def _jump(code: str, at: int, label: str, function: _Function | None,
          results: frozenset[str]) -> str:
    """What ``goto label;`` at ``at`` leads to: ``"stops"`` when it leaves a function that
    returns a pointer (a thread's start routine, such as the bootstrap root's: it gives up what
    it was serving), the error the code after the label returns when that is a constant, ``""``
    when it returns a variable set before (which the text does not show) or the label is not
    found after the jump."""
    if function is None:
        return ""
    body = code[at : function.end]
    target = re.search(rf"(?<![\w:]){re.escape(label)}\s*:(?!:)", body)
    if target is None:
        return ""  # a jump backwards (a retry), or out of sight
    if _POINTER_FUNCTION.search(function.signature):
        return "stops"
    returned = re.search(r"\breturn\b\s*([^;{}]*);", body[target.end() :])
    if returned is None:
        return ""
    value = _returned(returned.group(1).strip(), results)
    return value if value.startswith("nccl") else ""


def _after(text: str, start: int, results: frozenset[str], limit: int = 600,
           function: _Function | None = None) -> str:
    """What the code does after a call: the first result (one of ``results``) it returns or
    assigns in its own block, before that ends (not in a nested block or under an ``if``
    without braces, which may not run); ``"abort"`` when it ends the process (``abort()``,
    ``exit()``); where it jumps away first (``goto fail;``), what :func:`_jump` finds after
    the label in ``function``, the function the call is in."""
    depth = 0
    end = min(len(text), start + limit)
    i = start
    kept: list[str] = []  # the text of the call's own block: a nested block runs only maybe
    while i < end:
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth < 0:
                break
        elif depth == 0:
            kept.append(c)
        i += 1
    window = "".join(kept)
    for match in _RESULT.finditer(window):
        statement = window[max(window.rfind(";", 0, match.start()), 0) : match.start()]
        if _CONDITION.search(statement):
            continue  # `if (handle == NULL) goto teardown;`: it runs only maybe
        returned, assigned, loop, ends = match.group(1, 2, 3, 5)
        if ends:
            return "abort"  # abort(), exit(): the process ends there
        if assigned is not None:
            if assigned not in results:
                continue  # another enum's value (`info->protocol = ncclProtoLL;`)
            return "continues" if assigned == "ncclSuccess" else assigned
        if returned is not None:
            return _returned(returned.strip(), results)
        if loop:
            return "continues"
        return _jump(text, start, match.group(4), function, results)
    return "continues" if i < end else ""


def log_calls(text: str, macros: dict[str, int],
              results: frozenset[str] = frozenset()) -> Iterator[LogCall]:
    """Every call of ``macros`` (name -> index of the format argument) in a source file whose
    format is a string literal (calls with a computed format are skipped); what follows each is
    read with ``results``, the values of the result type (:func:`result_names`): an assignment
    of any other name is not a result."""
    code = strip_comments(text)
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, macros)) + r")\s*\(")
    functions = _functions(code)
    starts = [function.start for function in functions]
    for match in pattern.finditer(code):
        line_start = code.rfind("\n", 0, match.start()) + 1
        if code[line_start : match.start()].lstrip().startswith("#define"):
            continue  # the macro's own definition
        parsed = _arguments(code, match.end() - 1)
        if parsed is None:
            continue
        args, end = parsed
        index = macros[match.group(1)]
        if len(args) <= index:
            continue
        fmt = format_string(args[index])
        if fmt is None:
            continue
        at = bisect_right(starts, match.start()) - 1
        function = functions[at] if at >= 0 and match.start() < functions[at].end else None
        yield LogCall(match.group(1), code.count("\n", 0, match.start()) + 1, fmt,
                      _after(code, end, results, function=function))


def first_line(fmt: str) -> str:
    """The part of a format that starts its log line: NCCL prints the rest (after ``\\n``) on
    lines of their own, without a prefix."""
    return fmt.strip("\n").split("\n", 1)[0].strip()


def literal_length(fmt: str) -> int:
    """Characters of ``fmt`` that are fixed text (letters and digits only), e.g. 12 for
    ``"Call to %s failed: %s"``; what makes a format recognisable."""
    return sum(ch.isalnum() for ch in CONVERSION.sub("", fmt))


_SPECIAL_CHARS = re.compile(r"([.^$*+?{}\[\]\\|()])")


def _escape(text: str) -> str:
    """``re.escape`` without escaping spaces and punctuation that mean nothing to ``re``."""
    return _SPECIAL_CHARS.sub(r"\\\1", text)


def format_to_regex(fmt: str) -> str:
    """A regular expression for the text that ``fmt`` prints, one group per conversion.

    ``"Connect to %s failed : %s"`` -> ``r"Connect\\ to\\ (.*?)\\ failed\\ :\\ (.*?)"``; numbers
    become digit groups, ``%p`` a pointer, ``%s``/``%m``/``%.*s`` any text.
    """
    out: list[str] = []
    pos = 0
    for match in CONVERSION.finditer(fmt):
        out.append(_escape(fmt[pos : match.start()]))
        pos = match.end()
        flags, conversion = match.group(1), match.group(5)
        if conversion == "%":
            out.append("%")
        elif conversion == "n":
            continue
        elif conversion in "sm":
            out.append("(.*?)")
        else:
            regex = _CONVERSION_REGEX.get(conversion.lower() if conversion in "EFGA" else
                                          conversion, ".*?")
            if "#" in flags and conversion in "xX":
                regex = regex.replace("(?:0x)?", "0x").replace("(?:0X)?", "0X")
            out.append(f"({regex})")
    out.append(_escape(fmt[pos:]))
    return "".join(out)
