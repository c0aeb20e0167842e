"""Flux postBuild variable substitution: a faithful Python port of fluxcd/pkg `envsubst` semantics.

Which layer does what (kustomize-controller, fluxcd/pkg `kustomize/kustomize_varsub.go`):

1. Resources labelled or annotated `kustomize.toolkit.fluxcd.io/substitute: disabled` are skipped.
2. Variables are merged: `substituteFrom` entries in list order, then the inline `substitute` map wins.
   While merging, **every "\\n" is stripped from every value** (`strings.ReplaceAll(v, "\\n", "")`).
   That is the loader's job, not envsubst's: `substitute()` below inserts values verbatim, so the
   caller must strip newlines first.
3. Every variable name must match `VAR_NAME`, else the build fails ("var name is invalid"):
   `check_variable_names()`; the caller runs it before `substitute()`, as varSubstitution does.
4. Substitution runs only when at least one variable was loaded (`len(vars) > 0`); with none, even
   `${x:=default}` reaches the cluster unexpanded. Newer controllers add
   `postBuild.substituteStrategy: Always` to lift this. That decision belongs to the caller.
5. envsubst runs on the resource's YAML text (`substitute()` here), lenient or strict
   (feature gate `StrictPostBuildSubstitutions`), then the output is parsed back with YAMLToJSON.

Semantics of envsubst itself (fluxcd/pkg `envsubst/parse/scan.go`, `parse/parse.go`, `funcs.go`,
`template.go`, and drone/envsubst `path/match.go`), including its quirks, which we reproduce on purpose:

* Only `${` opens a reference; bare `$var` is text. Outside references `$$` collapses to `$`, so
  `$${var}` gives a literal `${var}` and `$$var` gives `$var`. A backslash is plain text there.
  This collapsing happens even in a resource without any `${`, so call `substitute()` on every
  resource that goes through substitution, not only on those containing `${`.
* A NUL character ends the input: the Go scanner uses rune 0 as its EOF marker, so the rest is dropped.
* Names are scanned as Unicode letters, digits and `_` (`${héllo}` and `${1x}` are references), but
  only ASCII names can ever be defined (`VAR_NAME`), so the others always read as undefined.
* `${v=d}` `${v:=d}` `${v:-d}` and also `${v:?d}` `${v:+d}` all mean "d when v is empty or unset".
  Nothing is assigned (`:=` does not persist). `:?` does not raise and `:+` is not bash's
  alternate value. `${v-d}`, `${v+d}` and `${v?d}` fail to parse ("missing closing brace").
* Inside a default `$$` is not an escape (`${v:-$$}` gives `$$`); only replace arguments have escapes.
* `${v:-3}` is the default operator, so a negative offset can only come from a nested reference.
* All argument references are evaluated eagerly, so a `${...}` inside an unused default is still
  looked up (and fails in strict mode).
* `${#v}`, `${v:n}` and `${v:n:len}` count UTF-8 **bytes**, as Go's `len(s)` and `s[i:j]` do.
* Trims use drone's `path.Match` fork on byte prefixes: `*` and `?` also match `/`, the empty prefix
  is never tried (so `${v#*}` drops one byte), and a malformed pattern leaves the value unchanged.
* `${v/#p/}` and `${v/%p/}` (empty replacement) leave the value unchanged (the function wants 2 args),
  while `${v/p/}` and `${v//p/}` delete. Inside replace arguments `\\/`, `\\\\` and `$$` are escapes.
* In strict mode an undefined name fails unless its operator supplies a default (newest envsubst,
  fix for fluxcd/flux2#5836; older releases only failed the bare `${v}` form).
* Parse errors (unclosed `${`, `${}`, `${a b}`, `${v-d}`...) fail the build in both modes, so
  both `substitute()` and `find_references()` raise SubstitutionError for them.
* A byte-based cut through a multi-byte character gives invalid UTF-8, which the controller's
  YAMLToJSON rejects, so we raise for it too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping, Union

from bot.engine.core.errors import SubstitutionError

# kustomize_varsub.go: varsubRegex = "^[_[:alpha:]][_[:alpha:][:digit:]]*$". RE2's classes are ASCII.
# Go's `$` only matches at the very end, so always test with VAR_NAME.fullmatch (`.match` accepts "A\n").
VAR_NAME = re.compile(r"^[_a-zA-Z][_a-zA-Z0-9]*$")


@dataclass(frozen=True)
class VarRef:
    """One `${...}` reference found in text."""

    name: str
    has_default: bool  # ${v:=d} ${v:-d} ${v=d}, also ${v:?d} ${v:+d}; `${v-d}` does not parse in Flux
    expression: str  # the full "${...}" text as written
    offset: int  # character offset of the "$" in the text


@dataclass(frozen=True)
class SubstitutionResult:
    """The expanded text and the names that expanded to "" because they were undefined."""

    text: str
    undefined: tuple[str, ...]  # names referenced without default and not defined, sorted, unique


# template.go isDefaultOp: operators that tolerate an unset variable. The single-character forms
# other than "=" cannot be produced by the parser but are listed by Go, so we keep them too.
_DEFAULT_OPS = frozenset({"-", "+", "=", "?", ":-", ":+", ":=", ":?"})

# parse.go error texts, kept verbatim so messages match what kustomize-controller reports.
_ERR_BAD = "bad substitution"
_ERR_BRACE = "missing closing brace"
_ERR_NAME = "unable to parse variable name"
_ERR_FUNC = "unable to parse substitution within function"
_ERR_DEFAULT = "unable to parse default function"

# Invalid UTF-8 bytes are carried through Python strings as surrogate escapes (U+DC80..U+DCFF).
_INVALID_BYTE = re.compile("[\udc80-\udcff]")
_SNIPPET = 40


class _ParseError(Exception):
    """A parse.go error; the caller adds the position."""


class _Func:
    """A parsed reference (parse.go FuncNode) with its span in the source text."""

    __slots__ = ("param", "op", "args", "start", "end")

    def __init__(self, param: str, op: str, args: list[_Node], start: int, end: int) -> None:
        self.param = param
        self.op = op
        self.args = args
        self.start = start
        self.end = end


_Node = Union[str, _Func]  # a str is a TextNode

# Token kinds of scan.go.
_EOF, _IDENT, _LBRACK, _RBRACK, _ILLEGAL = range(5)

_Accept = Callable[[str, int], bool]


# scan.go accept functions. `i` is the length of the token including `r`; Go counts bytes, but every
# function that looks at `i` only accepts ASCII, so counting characters is equivalent.
def _acc_rune(r: str, i: int) -> bool:
    return True


def _acc_ident(r: str, i: int) -> bool:
    # unicode.IsLetter (category L*) / unicode.IsDigit (category Nd).
    return r == "_" or r.isalpha() or r.isdecimal()


def _acc_colon(r: str, i: int) -> bool:
    return r == ":"


def _acc_one_hash(r: str, i: int) -> bool:
    return r == "#" and i == 1


def _acc_not_closing(r: str, i: int) -> bool:
    return r != "}"


def _acc_hash_func(r: str, i: int) -> bool:
    return r == "#" and i < 3


def _acc_percent_func(r: str, i: int) -> bool:
    return r == "%" and i < 3


def _acc_default_func(r: str, i: int) -> bool:
    return (i == 1 and r == ":") or (i == 2 and r in "=-?+")


def _acc_replace_func(r: str, i: int) -> bool:
    return (i == 1 and r == "/") or (i == 2 and r in "/#%")


def _acc_one_equal(r: str, i: int) -> bool:
    return i == 1 and r == "="


def _acc_one_colon(r: str, i: int) -> bool:
    return i == 1 and r == ":"


def _reject_colon_close(r: str, i: int) -> bool:
    return r != ":" and r != "}"


def _acc_slash(r: str, i: int) -> bool:
    return r == "/"


def _acc_not_slash(r: str, i: int) -> bool:
    return r != "/"


def _acc_casing_func(r: str, i: int) -> bool:
    return r in ",^" and i < 3


class _Parser:
    """Recursive-descent parser mirroring parse.go, driven by a scanner that mirrors scan.go."""

    def __init__(self, src: str) -> None:
        self.src = src
        self.n = len(src)
        self.pos = 0

    # -- scanner (scan.go) ------------------------------------------------------------------------
    # The Go scanner deletes an escape character from its buffer (skip); we leave the source intact
    # and build the token value instead, so positions stay offsets into the original text.

    def _peek(self) -> str:
        return self.src[self.pos] if self.pos < self.n else ""

    def _escaped(self, p: int) -> bool:
        # Only replace arguments scan with escapes, and parseFunc has switched the scanner to
        # escapeAll by then: `$$`, `\/` and `\\`. (Top-level `$$` is handled by parse_top.)
        if p + 1 >= self.n:
            return False
        r, nxt = self.src[p], self.src[p + 1]
        if r == "$":
            return nxt == "$"
        return r == "\\" and (nxt == "/" or nxt == "\\")

    def _scan(
        self,
        accept: _Accept,
        *,
        ident: bool = True,
        lbrack: bool = False,
        rbrack: bool = False,
        escape: bool = False,
    ) -> tuple[int, str]:
        src, p, n = self.src, self.pos, self.n
        if p >= n:
            return _EOF, ""
        r = src[p]
        if lbrack and r == "$" and p + 1 < n and src[p + 1] == "{":
            self.pos = p + 2
            return _LBRACK, ""
        if rbrack and r == "}":
            self.pos = p + 1
            return _RBRACK, "}"
        if not ident:
            return _ILLEGAL, ""
        out: list[str] = []
        # scanIdent: an escaped first character skips the accept check, like every escaped one.
        if escape and self._escaped(p):
            out.append(src[p + 1])
            p += 2
        elif accept(r, 1):
            out.append(r)
            p += 1
        else:
            return _ILLEGAL, ""
        while p < n:
            r = src[p]
            if lbrack and r == "$" and p + 1 < n and src[p + 1] == "{":
                break
            if escape and self._escaped(p):
                out.append(src[p + 1])
                p += 2
                continue
            if not accept(r, len(out) + 1):
                break
            out.append(r)
            p += 1
        self.pos = p
        return _IDENT, "".join(out)

    # -- parser (parse.go) ------------------------------------------------------------------------

    def parse_top(self) -> list[_Node]:
        """parseAny, flattened into a loop: text with `$$` collapsed, and `${...}` functions."""
        src, n = self.src, self.n
        nodes: list[_Node] = []
        text: list[str] = []
        i = 0
        while True:
            j = src.find("$", i)
            if j < 0:
                text.append(src[i:])
                break
            text.append(src[i:j])
            nxt = src[j + 1] if j + 1 < n else ""
            if nxt == "{":
                if text:
                    nodes.append("".join(text))
                    text = []
                self.pos = j + 2
                try:
                    nodes.append(self._parse_func(j))
                except _ParseError as exc:
                    snippet = src[j : j + _SNIPPET] + ("..." if n - j > _SNIPPET else "")
                    raise SubstitutionError(f"{exc}: {snippet!r} at offset {j}") from None
                except RecursionError:
                    # Deviation: Go's growable stacks parse any depth; Python's recursion limit does not.
                    raise SubstitutionError(f"references nested too deeply at offset {j}") from None
                i = self.pos
            elif nxt == "$":
                # scanEscaped: the first `$` is dropped and the second kept without further checks.
                text.append("$")
                i = j + 2
            else:
                text.append("$")
                i = j + 1
        tail = "".join(text)
        if tail:
            nodes.append(tail)
        return nodes

    def _parse_func(self, start: int) -> _Func:
        # Called with pos just past "${"; `start` is the offset of the "$".
        if self._peek() == "#":
            return self._parse_len(start)
        tok, name = self._scan(_acc_ident)
        if tok != _IDENT:
            raise _ParseError(_ERR_NAME)
        nxt = self._peek()
        if nxt == ":":
            return self._parse_default_or_substr(name, start)
        if nxt == "=":
            return self._parse_default(name, start)
        if nxt in (",", "^"):
            return self._parse_casing(name, start)
        if nxt == "/":
            return self._parse_replace(name, start)
        if nxt == "#":
            return self._parse_remove(name, _acc_hash_func, start)
        if nxt == "%":
            return self._parse_remove(name, _acc_percent_func, start)
        # Anything else ("-", "+", "?", " ", ".", EOF...) must be the closing brace.
        tok, _ = self._scan(_acc_ident, ident=False, rbrack=True)
        if tok != _RBRACK:
            raise _ParseError(_ERR_BRACE)
        return _Func(name, "", [], start, self.pos)

    def _parse_param(self, accept: _Accept, escape: bool = False) -> _Node:
        tok, value = self._scan(accept, lbrack=True, escape=escape)
        if tok == _LBRACK:
            return self._parse_func(self.pos - 2)
        if tok == _IDENT:
            return value
        raise _ParseError(_ERR_FUNC)

    def _consume_rbrack(self) -> None:
        tok, _ = self._scan(_acc_rune, ident=False, rbrack=True)
        if tok != _RBRACK:
            raise _ParseError(_ERR_BAD)

    def _parse_default_or_substr(self, name: str, start: int) -> _Func:
        nxt = self.src[self.pos + 1] if self.pos + 1 < self.n else ""
        if nxt != "" and nxt in "=-?+":
            return self._parse_default(name, start)
        if nxt and not nxt.isascii():
            # parse.go reads ":", peeks the next rune and unreads by the *peeked* rune's byte width;
            # a multi-byte rune moves the scanner back into the name and parseSubstrFunc then fails.
            raise _ParseError(_ERR_BAD)
        return self._parse_substr(name, start)

    def _parse_substr(self, name: str, start: int) -> _Func:
        tok, op = self._scan(_acc_one_colon)
        if tok != _IDENT:
            raise _ParseError(_ERR_BAD)
        args = [self._parse_param(_reject_colon_close)]
        # acceptColon has no length limit, so `${v:1::2}` reads like `${v:1:2}`.
        tok, _ = self._scan(_acc_colon, rbrack=True)
        if tok == _RBRACK:
            return _Func(name, op, args, start, self.pos)
        if tok != _IDENT:
            raise _ParseError(_ERR_BAD)
        args.append(self._parse_param(_acc_not_closing))
        self._consume_rbrack()
        return _Func(name, op, args, start, self.pos)

    def _parse_remove(self, name: str, accept: _Accept, start: int) -> _Func:
        tok, op = self._scan(accept)
        if tok != _IDENT:
            raise _ParseError(_ERR_BAD)
        # An empty pattern (`${v#}`) is an error: "}" is not a valid first parameter character.
        args = [self._parse_param(_acc_not_closing)]
        self._consume_rbrack()
        return _Func(name, op, args, start, self.pos)

    def _parse_replace(self, name: str, start: int) -> _Func:
        tok, op = self._scan(_acc_replace_func)
        if tok != _IDENT:
            raise _ParseError(_ERR_BAD)
        args: list[_Node]
        if self._peek() == "/":
            # Newest parse.go: `${v/#/x}` has an empty pattern (older releases failed to parse it).
            args = [""]
        else:
            # acceptNotSlash accepts "}", so an unterminated pattern runs on to the next "/".
            args = [self._parse_param(_acc_not_slash, escape=True)]
        tok, _ = self._scan(_acc_slash)
        if tok != _IDENT:
            raise _ParseError(_ERR_BAD)
        if self._peek() == "}":
            self._consume_rbrack()
            return _Func(name, op, args, start, self.pos)
        args.append(self._parse_param(_acc_not_closing, escape=True))
        self._consume_rbrack()
        return _Func(name, op, args, start, self.pos)

    def _parse_default(self, name: str, start: int) -> _Func:
        accept = _acc_one_equal if self._peek() == "=" else _acc_default_func
        tok, op = self._scan(accept)
        if tok != _IDENT:
            raise _ParseError(_ERR_DEFAULT)
        args: list[_Node] = []
        while True:
            if self._peek() == "}":
                self._consume_rbrack()
                return _Func(name, op, args, start, self.pos)
            # No escapes here: `$$` stays `$$` inside a default, and `$${x}` is "$" + ${x}.
            args.append(self._parse_param(_acc_not_closing))

    def _parse_casing(self, name: str, start: int) -> _Func:
        tok, op = self._scan(_acc_casing_func)
        if tok != _IDENT:
            raise _ParseError(_ERR_BAD)
        self._consume_rbrack()
        return _Func(name, op, [], start, self.pos)

    def _parse_len(self, start: int) -> _Func:
        tok, op = self._scan(_acc_one_hash)
        if tok != _IDENT:
            raise _ParseError(_ERR_BAD)
        tok, name = self._scan(_acc_ident)
        if tok != _IDENT:
            raise _ParseError(_ERR_BAD)
        self._consume_rbrack()
        return _Func(name, op, [], start, self.pos)


def _parse(text: str) -> list[_Node]:
    # scan.go returns rune 0 as its EOF marker, so a NUL character ends the input.
    nul = text.find("\x00")
    if nul >= 0:
        text = text[:nul]
    return _Parser(text).parse_top()


def _walk(nodes: list[_Node]) -> Iterator[_Func]:
    for node in nodes:
        if isinstance(node, _Func):
            yield node
            yield from _walk(node.args)


# -- string functions (funcs.go) ------------------------------------------------------------------
# Values are Go strings, i.e. bytes. We hold them as str; invalid UTF-8 bytes (only produced by the
# byte-based functions) are surrogate escapes, so `_b`/`_s` round-trip them exactly.


def _b(s: str) -> bytes:
    return s.encode("utf-8", "surrogateescape")


def _s(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


def _is_bad(c: str) -> bool:
    return "\udc80" <= c <= "\udcff"


# Go's unicode.ToUpper/ToLower use the simple one-rune mappings of UnicodeData.txt; Python's str
# methods use the full mappings (ß -> SS). Where Python gives several characters, the simple mapping
# is the character itself except for these (generated from UnicodeData.txt 15.0).
_SIMPLE_UPPER = {
    **{chr(0x1F80 + k): chr(0x1F88 + k) for k in range(8)},
    **{chr(0x1F90 + k): chr(0x1F98 + k) for k in range(8)},
    **{chr(0x1FA0 + k): chr(0x1FA8 + k) for k in range(8)},
    "\u1fb3": "\u1fbc",
    "\u1fc3": "\u1fcc",
    "\u1ff3": "\u1ffc",
}
_SIMPLE_LOWER = {"\u0130": "i"}


def _upper_rune(c: str) -> str:
    if _is_bad(c):
        return "\ufffd"  # strings.Map and DecodeRune turn an invalid byte into RuneError
    u = c.upper()
    return u if len(u) == 1 else _SIMPLE_UPPER.get(c, c)


def _lower_rune(c: str) -> str:
    if _is_bad(c):
        return "\ufffd"
    low = c.lower()
    return low if len(low) == 1 else _SIMPLE_LOWER.get(c, c)


def _to_upper(s: str, args: list[str]) -> str:
    # Mapped one character at a time, as strings.ToUpper does (no context rules such as final sigma).
    return s.upper() if s.isascii() else "".join(map(_upper_rune, s))


def _to_lower(s: str, args: list[str]) -> str:
    return s.lower() if s.isascii() else "".join(map(_lower_rune, s))


def _to_upper_first(s: str, args: list[str]) -> str:
    return _upper_rune(s[0]) + s[1:] if s else s


def _to_lower_first(s: str, args: list[str]) -> str:
    return _lower_rune(s[0]) + s[1:] if s else s


def _to_len(s: str, args: list[str]) -> str:
    return str(len(s) if s.isascii() else len(_b(s)))  # len(s) of a Go string counts bytes


def _to_default(s: str, args: list[str]) -> str:
    # Empty counts as unset for every default operator: the function only sees the value.
    return "".join(args) if s == "" and args else s


_GO_INT = re.compile(r"[+-]?[0-9]+")


def _atoi(text: str) -> int | None:
    # strconv.Atoi: optional sign, ASCII digits, no spaces or underscores, must fit in int64.
    if not _GO_INT.fullmatch(text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


def _to_substr(s: str, args: list[str]) -> str:
    if not args:
        return s
    pos = _atoi(args[0])
    if pos is None:
        return s  # like bash, an unparsable offset returns the whole value
    b = _b(s)
    size = len(b)
    if pos < 0:
        pos = max(size + pos, 0)
    if len(args) == 1:
        return _s(b[pos:]) if pos < size else ""
    length = _atoi(args[1])
    if length is None:
        return s
    if length < 0:
        # Newest funcs.go: a negative length counts back from the end (older releases panicked).
        end = size + length
        return "" if end < pos else _s(b[pos:end])
    if pos + length >= size:
        return _s(b[pos:]) if pos < size else ""
    return _s(b[pos : pos + length])


def _go_replace(s: str, old: str, new: str, count: int) -> str:
    if old == "":
        # strings.Replace inserts at every rune boundary; one surrogate escape is one Go rune.
        return s.replace("", new, count)
    if _INVALID_BYTE.search(s) or _INVALID_BYTE.search(old):
        return _s(_b(s).replace(_b(old), _b(new), count))
    return s.replace(old, new, count)


def _replace_all(s: str, args: list[str]) -> str:
    if not args:
        return s
    return _go_replace(s, args[0], args[1] if len(args) > 1 else "", -1)


def _replace_first(s: str, args: list[str]) -> str:
    if not args:
        return s
    return _go_replace(s, args[0], args[1] if len(args) > 1 else "", 1)


def _replace_prefix(s: str, args: list[str]) -> str:
    if len(args) != 2:
        return s  # `${v/#p/}` keeps v unchanged: the Go function insists on two arguments
    if _b(s).startswith(_b(args[0])):
        return _go_replace(s, args[0], args[1], 1)
    return s


def _replace_suffix(s: str, args: list[str]) -> str:
    if len(args) != 2:
        return s
    b, old = _b(s), _b(args[0])
    if b.endswith(old):
        return _s(b[: len(b) - len(old)]) + args[1]
    return s


# -- drone/envsubst path.Match fork, on bytes --------------------------------------------------------
# Differs from Go's path.Match: `*` and `?` also match "/" and a trailing `*` matches everything.
_STAR, _QMARK, _LSQ, _RSQ, _BSL, _CARET, _DASH = b"*?[]\\^-"


def _decode_rune(b: bytes, i: int) -> tuple[int, int]:
    """utf8.DecodeRune: the rune at b[i] and its width, or (U+FFFD, 1) for an invalid byte."""
    c = b[i]
    if c < 0x80:
        return c, 1
    width = 2 if 0xC2 <= c <= 0xDF else 3 if 0xE0 <= c <= 0xEF else 4 if 0xF0 <= c <= 0xF4 else 0
    if width:
        try:
            return ord(b[i : i + width].decode("utf-8")), width
        except UnicodeDecodeError:
            pass
    return 0xFFFD, 1


def _scan_chunk(pattern: bytes) -> tuple[bool, bytes, bytes]:
    star = False
    while pattern and pattern[0] == _STAR:
        pattern = pattern[1:]
        star = True
    in_range = False
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == _BSL:
            if i + 1 < len(pattern):
                i += 1
        elif c == _LSQ:
            in_range = True
        elif c == _RSQ:
            in_range = False
        elif c == _STAR and not in_range:
            break
        i += 1
    return star, pattern[:i], pattern[i:]


def _get_esc(chunk: bytes) -> tuple[int, bytes, bool]:
    if not chunk or chunk[0] == _DASH or chunk[0] == _RSQ:
        return 0, b"", True
    if chunk[0] == _BSL:
        chunk = chunk[1:]
        if not chunk:
            return 0, b"", True
    r, width = _decode_rune(chunk, 0)
    rest = chunk[width:]
    return r, rest, (r == 0xFFFD and width == 1) or not rest


def _match_chunk(chunk: bytes, s: bytes) -> tuple[bytes, bool, bool]:
    """Match chunk against the start of s: (rest of s, ok, bad pattern)."""
    while chunk:
        if not s:
            return b"", False, False
        c = chunk[0]
        if c == _LSQ:
            r, width = _decode_rune(s, 0)
            s = s[width:]
            chunk = chunk[1:]
            positive = True
            if chunk and chunk[0] == _CARET:
                positive = False
                chunk = chunk[1:]
            matched = False
            nrange = 0
            while True:
                if chunk and chunk[0] == _RSQ and nrange > 0:
                    chunk = chunk[1:]
                    break
                lo, chunk, bad = _get_esc(chunk)
                if bad:
                    return b"", False, True
                hi = lo
                if chunk[0] == _DASH:
                    hi, chunk, bad = _get_esc(chunk[1:])
                    if bad:
                        return b"", False, True
                if lo <= r <= hi:
                    matched = True
                nrange += 1
            if matched != positive:
                return b"", False, False
        elif c == _QMARK:
            s = s[_decode_rune(s, 0)[1] :]
            chunk = chunk[1:]
        else:
            if c == _BSL:
                chunk = chunk[1:]
                if not chunk:
                    return b"", False, True
            if chunk[0] != s[0]:
                return b"", False, False
            s = s[1:]
            chunk = chunk[1:]
    return s, True, False


def _match(pattern: bytes, name: bytes) -> tuple[bool, bool]:
    """path.Match of the drone fork: (matched, bad pattern)."""
    while pattern:
        star, chunk, pattern = _scan_chunk(pattern)
        if star and not chunk:
            return True, False
        rest, ok, bad = _match_chunk(chunk, name)
        if ok and (not rest or pattern):
            name = rest
            continue
        if bad:
            return False, True
        if not star:
            return False, False
        for i in range(len(name)):
            rest, ok, bad = _match_chunk(chunk, name[i + 1 :])
            if ok:
                if not pattern and rest:
                    continue
                name = rest
                break
            if bad:
                return False, True
        else:
            return False, False
    return not name, False


def _trim_shortest(s: str, pattern: str) -> str:
    b, p = _b(s), _b(pattern)
    shortest = 0
    # funcs.go tries prefixes from the longest down to one byte (never the empty one) and keeps the
    # last match; any bad-pattern error returns the value unchanged.
    for end in range(len(b), 0, -1):
        matched, bad = _match(p, b[:end])
        if bad:
            return s
        if matched:
            shortest = end
    return _s(b[shortest:]) if shortest else s


def _trim_longest(s: str, pattern: str) -> str:
    b, p = _b(s), _b(pattern)
    for end in range(len(b), 0, -1):
        matched, bad = _match(p, b[:end])
        if bad:
            return s
        if matched:
            return _s(b[end:])
    return s


def _reverse(s: str) -> str:
    # reverse() goes through []rune, which turns every invalid byte into U+FFFD.
    return "".join("\ufffd" if _is_bad(c) else c for c in reversed(s))


def _trim_shortest_prefix(s: str, args: list[str]) -> str:
    return _trim_shortest(s, args[0]) if args else s


def _trim_longest_prefix(s: str, args: list[str]) -> str:
    return _trim_longest(s, args[0]) if args else s


def _trim_shortest_suffix(s: str, args: list[str]) -> str:
    # Suffix trims reverse value and pattern (so `[a-z]` becomes the malformed `]z-a[`, as in Go).
    return _reverse(_trim_shortest(_reverse(s), _reverse(args[0]))) if args else s


def _trim_longest_suffix(s: str, args: list[str]) -> str:
    return _reverse(_trim_longest(_reverse(s), _reverse(args[0]))) if args else s


_Fn = Callable[[str, list[str]], str]

# template.go lookupFunc; every other operator name (",^", ":=", ...) is toDefault.
_FUNCS: dict[str, _Fn] = {
    ",": _to_lower_first,
    ",,": _to_lower,
    "^": _to_upper_first,
    "^^": _to_upper,
    "##": _trim_longest_prefix,
    "%": _trim_shortest_suffix,
    "%%": _trim_longest_suffix,
    ":": _to_substr,
    "/#": _replace_prefix,
    "/%": _replace_suffix,
    "/": _replace_first,
    "//": _replace_all,
}
# Functions that cut Go strings at byte offsets and so may leave invalid UTF-8 behind.
_BYTE_CUTTERS = frozenset({"#", "##", "%", "%%", ":"})


class _Evaluator:
    """template.go Execute: evaluates arguments first, then looks the variable up."""

    def __init__(self, variables: Mapping[str, str], strict: bool) -> None:
        self.variables = variables
        self.strict = strict
        self.undefined: set[str] = set()
        self.cut_bytes = False

    def eval(self, node: _Node) -> str:
        if isinstance(node, str):
            return node
        args = [self.eval(arg) for arg in node.args]
        try:
            value = self.variables[node.param]
        except KeyError:
            value = ""
            if node.op not in _DEFAULT_OPS:
                if self.strict:
                    raise SubstitutionError(f"variable not set (strict mode): \"{node.param}\"") from None
                self.undefined.add(node.param)
        op = node.op
        if op == "#":
            fn: _Fn = _to_len if not args else _trim_shortest_prefix
        else:
            fn = _FUNCS.get(op, _to_default)
        if op in _BYTE_CUTTERS:
            self.cut_bytes = True
        return fn(value, args)


def find_references(text: str) -> list[VarRef]:
    """Every `${...}` reference Flux would expand ($${...} escapes and bare $var excluded)."""
    if "${" not in text:
        return []
    # Nested references (inside defaults or arguments) are listed too: Flux evaluates them all.
    # Raises SubstitutionError where Flux would fail to parse the text at all.
    return [
        VarRef(
            name=func.param,
            has_default=func.op in _DEFAULT_OPS,
            expression=text[func.start : func.end],
            offset=func.start,
        )
        for func in _walk(_parse(text))
    ]


def substitute(text: str, variables: Mapping[str, str], *, strict: bool = False) -> SubstitutionResult:
    """Expand `${...}` in text exactly as Flux's envsubst does; undefined -> "" (strict: raise SubstitutionError)."""
    # Values are inserted verbatim: kustomize-controller strips "\n" from them while loading, before
    # envsubst runs, so the caller does that (see the module docstring), as it checks the names.
    if "${" not in text:
        # Fast path for the common object without references: only `$$` collapsing (and NUL) apply.
        nul = text.find("\x00")
        if nul >= 0:
            text = text[:nul]
        return SubstitutionResult(text.replace("$$", "$") if "$$" in text else text, ())
    nodes = _parse(text)
    evaluator = _Evaluator(variables, strict)
    try:
        out = "".join([evaluator.eval(node) for node in nodes])
    except RecursionError:
        raise SubstitutionError("references nested too deeply") from None
    if evaluator.cut_bytes and _INVALID_BYTE.search(out):
        raise SubstitutionError(
            "substitution cut a multi-byte UTF-8 character (Flux counts bytes); "
            "kustomize-controller fails to parse the resulting YAML"
        )
    return SubstitutionResult(out, tuple(sorted(evaluator.undefined)))


def check_variable_names(variables: Mapping[str, str]) -> list[str]:
    """Keys that fail Flux's variable-name rule (kustomize-controller fails the build on them)."""
    return sorted(name for name in variables if not VAR_NAME.fullmatch(name))
