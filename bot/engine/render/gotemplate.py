"""The Go text/template subset the Flux Operator's ResourceSets use (`<< >>` delimiters, slim-sprig functions), pure and bounded.

flux-operator internal/builder/resourceset.go `newTemplate`: `Delims("<<", ">>")`, slim-sprig's
`HermeticTxtFuncMap`, `slugify`, `inputs` (a niladic function returning the input set), `toYaml`,
`mustToYaml`, and `missingkey=error`; it executes with a nil dot. What is not here is refused with
`Unsupported` (never guessed): the caller reports it and does not render.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import yaml

MAX_OUTPUT = 4 * 1024 * 1024  # characters one execution may write
MAX_STEPS = 200_000  # nodes evaluated in one execution (ranges included)
MAX_NESTING = 64  # nested if/range/with blocks and parentheses


class TemplateError(ValueError):
    """The template fails as Go's would: a parse or execution error (the operator stalls the ResourceSet)."""


class Unsupported(ValueError):
    """The template uses what this subset does not implement (a function, an action); `what` names it."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


class LimitExceeded(ValueError):
    """The template's execution passed one of this module's bounds."""


# -- lexing -------------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<raw>`[^`]*`)
    | (?P<str>"(?:[^"\\\n]|\\.)*")
    | (?P<char>'(?:[^'\\\n]|\\.)+')
    | (?P<num>[-+]?(?:0[xX][0-9a-fA-F_]+|(?:\d[\d_]*)?\.?\d[\d_]*(?:[eE][-+]?\d+)?))
    | (?P<decl>:=)
    | (?P<assign>=)
    | (?P<var>\$[A-Za-z0-9_]*)
    | (?P<field>(?:\.[A-Za-z_][A-Za-z0-9_]*)+)
    | (?P<dot>\.)
    | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<pipe>\|)
    | (?P<lparen>\()
    | (?P<rparen>\))
    | (?P<comma>,)
    )""",
    re.VERBOSE | re.DOTALL,
)


@dataclass(frozen=True)
class _Tok:
    kind: str
    text: str


def _lex_action(text: str) -> list[_Tok]:
    """The tokens of one action's body; a field chain right after an operand is its own token."""
    out: list[_Tok] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise TemplateError(f"unexpected {text[pos:].strip()[:20]!r} in action")
        kind = match.lastgroup or ""
        value = match.group(kind)
        # `x.y` after an operand without a space is a chain (`inputs.tenant`, `$v.name`, `(…).a`).
        if kind == "field" and out and match.start(kind) == pos and out[-1].kind in ("ident", "var", "rparen", "field"):
            kind = "chain"
        if kind == "num" and out and match.start(kind) == pos and value[:1] == "." and out[-1].kind in ("ident", "var", "rparen"):
            raise TemplateError(f"unexpected {value!r}")
        out.append(_Tok(kind, value))
        pos = match.end()
    return out


# -- the tree -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Text:
    text: str


@dataclass(frozen=True)
class _Pipe:
    decl: tuple[str, ...]  # variables declared (`$x :=`, `$i, $v :=`)
    assign: bool  # `$x = …`
    cmds: tuple[tuple[Any, ...], ...]  # each command: its operands


@dataclass(frozen=True)
class _Action:
    pipe: _Pipe


@dataclass(frozen=True)
class _Block:
    kind: str  # if | range | with
    pipe: _Pipe
    body: tuple[Any, ...]
    orelse: tuple[Any, ...]


# Operands: ("field", names) for `.a.b`, ("var", name, names), ("ident", name, names) for a function
# (with a chain, e.g. `inputs.tenant`), ("lit", value), ("dot",), ("pipe", _Pipe, names).


class _Parser:
    def __init__(self, source: str, left: str, right: str) -> None:
        self.items = _split(source, left, right)
        self.pos = 0

    def parse(self) -> tuple[Any, ...]:
        body, end = self._list(0)
        if end is not None:
            raise TemplateError(f"unexpected {{{{{end[0]}}}}}")
        return body

    def _list(self, depth: int) -> tuple[tuple[Any, ...], tuple[str, list[_Tok]] | None]:
        if depth > MAX_NESTING:
            raise LimitExceeded(f"blocks nested more than {MAX_NESTING} deep")
        nodes: list[Any] = []
        while self.pos < len(self.items):
            item = self.items[self.pos]
            self.pos += 1
            if isinstance(item, str):
                nodes.append(_Text(item))
                continue
            toks = item
            if not toks:
                raise TemplateError("missing value for command")
            head = toks[0]
            if head.kind == "ident" and head.text in ("end", "else"):
                return tuple(nodes), (head.text, toks[1:])
            if head.kind == "ident" and head.text in ("if", "range", "with"):
                nodes.append(self._block(head.text, toks[1:], depth))
                continue
            if head.kind == "ident" and head.text in ("define", "template", "block", "break", "continue"):
                raise Unsupported(f"template action {head.text}")
            nodes.append(_Action(_pipe(toks)))
        return tuple(nodes), None

    def _block(self, kind: str, toks: list[_Tok], depth: int) -> _Block:
        pipe = _pipe(toks)
        body, end = self._list(depth + 1)
        if end is None:
            raise TemplateError(f"unexpected EOF in {kind}")
        orelse: tuple[Any, ...] = ()
        if end[0] == "else":
            rest = end[1]
            if rest and rest[0].kind == "ident" and rest[0].text in ("if", "with") and kind in ("if", "with"):
                # `else if` / `else with`: the rest is a block of its own sharing this one's `end`.
                orelse = (self._block(rest[0].text, rest[1:], depth + 1),)
                return _Block(kind, pipe, body, orelse)
            if rest:
                raise TemplateError(f"unexpected {rest[0].text!r} after else")
            orelse, end = self._list(depth + 1)
            if end is None or end[0] != "end":
                raise TemplateError(f"expected end in {kind}")
        if end[1]:
            raise TemplateError("unexpected tokens after end")
        return _Block(kind, pipe, body, orelse)


def _split(source: str, left: str, right: str) -> list[Any]:
    """Text and action token lists, with `<<-`/`->>` trimming the whitespace beside them and comments dropped."""
    items: list[Any] = []
    pos = 0
    trim_next = False
    while True:
        start = source.find(left, pos)
        text = source[pos:] if start < 0 else source[pos:start]
        if trim_next:
            text = text.lstrip(" \t\r\n")
        if start < 0:
            if text:
                items.append(text)
            return items
        inner = start + len(left)
        if source.startswith("- ", inner) or source.startswith("-\t", inner) or source.startswith("-\n", inner) or source.startswith("-\r", inner):
            text = text.rstrip(" \t\r\n")
            inner += 1
        if text:
            items.append(text)
        stripped = source[inner:].lstrip(" \t\r\n")
        if stripped.startswith("/*"):
            close = source.find("*/", inner)
            if close < 0:
                raise TemplateError("unclosed comment")
            after = close + 2
            rest = source[after:].lstrip(" \t\r\n") if source[after:].lstrip(" \t\r\n").startswith("-" + right) else source[after:]
            if rest.startswith("-" + right):
                trim_next, pos = True, len(source) - len(rest) + 1 + len(right)
            elif rest.startswith(right):
                trim_next, pos = False, len(source) - len(rest) + len(right)
            else:
                raise TemplateError("comment ends before closing delimiter")
            continue
        end = _action_end(source, inner, right)
        body = source[inner:end]
        trim_next = False
        close = end + len(right)
        if body.endswith("-") and len(body) >= 2 and body[-2] in " \t\r\n":
            body, trim_next = body[:-1], True
        items.append(_lex_action(body))
        pos = close


def _action_end(source: str, start: int, right: str) -> int:
    """Where the action starting at `start` closes, skipping quoted strings."""
    i = start
    while i < len(source):
        ch = source[i]
        if source.startswith(right, i):
            return i
        if ch in "\"'`":
            close = i + 1
            while close < len(source) and source[close] != ch:
                if source[close] == "\\" and ch != "`":
                    close += 1
                if ch != "`" and source[close] == "\n":
                    raise TemplateError("unterminated quoted string")
                close += 1
            i = close + 1
            continue
        i += 1
    raise TemplateError("unclosed action")


def _pipe(toks: list[_Tok]) -> _Pipe:
    decl: tuple[str, ...] = ()
    assign = False
    for i, tok in enumerate(toks):
        if tok.kind in ("decl", "assign"):
            names = [t for t in toks[:i] if t.kind != "comma"]
            if names and all(t.kind == "var" for t in names) and len(names) <= 2:
                decl, assign, toks = tuple(t.text for t in names), tok.kind == "assign", toks[i + 1:]
            break
        if tok.kind not in ("var", "comma"):
            break
    cmds: list[tuple[Any, ...]] = []
    current: list[Any] = []
    i = 0
    while i < len(toks):
        tok = toks[i]
        if tok.kind == "pipe":
            if not current:
                raise TemplateError("missing command before |")
            cmds.append(tuple(current))
            current = []
            i += 1
            continue
        operand, i = _operand(toks, i)
        current.append(operand)
    if not current:
        raise TemplateError("missing value for command")
    cmds.append(tuple(current))
    return _Pipe(decl, assign, tuple(cmds))


def _chain(toks: list[_Tok], i: int) -> tuple[tuple[str, ...], int]:
    names: list[str] = []
    while i < len(toks) and toks[i].kind == "chain":
        names += toks[i].text.split(".")[1:]
        i += 1
    return tuple(names), i


def _operand(toks: list[_Tok], i: int) -> tuple[Any, int]:
    tok = toks[i]
    i += 1
    if tok.kind == "field":
        names, i = _chain(toks, i)
        return ("field", (*tok.text.split(".")[1:], *names)), i
    if tok.kind == "dot":
        return ("dot",), i
    if tok.kind == "var":
        names, i = _chain(toks, i)
        return ("var", tok.text, names), i
    if tok.kind == "ident":
        if tok.text in ("true", "false"):
            return ("lit", tok.text == "true"), i
        if tok.text == "nil":
            return ("lit", None), i
        names, i = _chain(toks, i)
        return ("ident", tok.text, names), i
    if tok.kind in ("str", "raw", "char"):
        return ("lit", _string(tok)), i
    if tok.kind == "num":
        return ("lit", _number(tok.text)), i
    if tok.kind == "lparen":
        depth, j = 1, i
        while j < len(toks) and depth:
            depth += {"lparen": 1, "rparen": -1}.get(toks[j].kind, 0)
            j += 1
        if depth:
            raise TemplateError("unclosed left paren")
        inner = _pipe(toks[i:j - 1])
        names, j = _chain(toks, j)
        return ("pipe", inner, names), j
    raise TemplateError(f"unexpected {tok.text!r} in operand")


def _string(tok: _Tok) -> Any:
    if tok.kind == "raw":
        return tok.text[1:-1]
    try:
        value = json.loads(tok.text) if tok.kind == "str" else json.loads('"' + tok.text[1:-1].replace('"', '\\"') + '"')
    except ValueError:
        raise Unsupported(f"string escape in {tok.text}") from None
    return value if tok.kind == "str" else ord(value)


def _number(text: str) -> int | float:
    clean = text.replace("_", "")
    try:
        if re.fullmatch(r"[-+]?0[xX][0-9a-fA-F]+", clean):
            return int(clean, 16)
        if re.fullmatch(r"[-+]?\d+", clean):
            return int(clean)
        return float(clean)
    except ValueError:
        raise TemplateError(f"bad number syntax: {text!r}") from None


# -- values as Go prints and compares them ------------------------------------------------------

def go_format(value: Any) -> str:
    """fmt's %v of a decoded JSON value: maps as `map[k:v]`, lists as `[a b]`, nil as `<no value>` at the top."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return "map[" + " ".join(f"{go_format(k)}:{go_format(value[k])}" for k in sorted(value, key=str)) + "]"
    if isinstance(value, (list, tuple)):
        return "[" + " ".join(go_format(v) for v in value) + "]"
    return str(value)


def _go_float(value: float) -> str:
    """fmt's %v of a float64 (JSON numbers decode to float64): shortest digits, exponent form when the exponent
    is below -4 or at least 6 (Go fmt/format.go fmtFloat: `%v` is 'g' at the shortest precision, so 1e+06)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if math.copysign(1, value) < 0 else "0"
    digits, exp = _shortest(value)
    nd, dp = len(digits), exp
    eprec = 6
    if eprec > nd and nd >= dp:
        eprec = nd
    x = dp - 1
    sign = "-" if value < 0 else ""
    if x < -4 or x >= eprec:
        mant = digits[0] + ("." + digits[1:] if nd > 1 else "")
        return f"{sign}{mant}e{'-' if x < 0 else '+'}{abs(x):02d}"
    if dp <= 0:
        return f"{sign}0.{'0' * -dp}{digits}"
    if dp >= nd:
        return f"{sign}{digits}{'0' * (dp - nd)}"
    return f"{sign}{digits[:dp]}.{digits[dp:]}"


def _shortest(value: float) -> tuple[str, int]:
    """The shortest round-tripping decimal digits of |value| and its decimal point position."""
    text = repr(abs(value))
    mant, _, e = text.partition("e")
    exp = int(e) if e else 0
    whole, _, frac = mant.partition(".")
    frac = frac.rstrip("0") if frac != "0" else ""
    digits = (whole + frac).lstrip("0")
    lead = len(whole + frac) - len((whole + frac).lstrip("0"))
    dp = len(whole) + exp - lead
    return digits.rstrip("0") or "0", dp


def _truth(value: Any) -> bool:
    """text/template's truth: false, 0, nil, and empty strings, maps and lists are false."""
    if value is None or value is False:
        return False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value != 0
    if isinstance(value, (str, Mapping, list, tuple)):
        return len(value) > 0
    return True


def _eq(a: Any, *others: Any) -> bool:
    if not others:
        raise TemplateError("missing argument for comparison")
    for b in others:
        if isinstance(a, bool) != isinstance(b, bool) and not (a is None or b is None):
            raise TemplateError("incompatible types for comparison")
        if isinstance(a, (Mapping, list)) or isinstance(b, (Mapping, list)):
            raise TemplateError("non-comparable type")
        if isinstance(a, str) != isinstance(b, str) and a is not None and b is not None:
            raise TemplateError("incompatible types for comparison")
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and isinstance(a, float) != isinstance(b, float):
            raise TemplateError("incompatible types for comparison")
        if a == b:
            return True
    return False


def _order(a: Any, b: Any) -> tuple[Any, Any]:
    if isinstance(a, str) and isinstance(b, str):
        return a, b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and not isinstance(b, bool):
        if isinstance(a, float) != isinstance(b, float):
            raise TemplateError("incompatible types for comparison")
        return a, b
    raise TemplateError("invalid type for comparison")


# -- functions ----------------------------------------------------------------------------------

def _to_int(value: Any) -> int:
    """spf13/cast ToInt64 as slim-sprig uses it: numbers truncate, numeric strings parse, anything else is 0."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) else 0
    if isinstance(value, str):
        try:
            return int(value.strip(), 0)
        except ValueError:
            try:
                return int(float(value))
            except ValueError:
                return 0
    return 0


def _to_float(value: Any) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return 0.0
    return 0.0


def _str(value: Any) -> str:
    """slim-sprig's strval: strings as they are, nil as empty, the rest as %v."""
    if value is None:
        return ""
    return value if isinstance(value, str) else go_format(value)


def _empty(value: Any) -> bool:
    return not _truth(value)


def _default(default: Any, *given: Any) -> Any:
    return default if not given or _empty(given[0]) else given[0]


def _indent(spaces: Any, text: Any) -> str:
    pad = " " * _to_int(spaces)
    return pad + _str(text).replace("\n", "\n" + pad)


def _nindent(spaces: Any, text: Any) -> str:
    return "\n" + _indent(spaces, text)


def _plain(value: Any) -> Any:
    """A value as encoding/json writes it: a whole float64 below 1e21 is written as an integer."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _to_yaml(value: Any) -> str:
    """sigs.k8s.io/yaml Marshal: JSON first (sorted keys), then YAML; '' on failure like the operator's toYaml."""
    try:
        return yaml.safe_dump(_plain(value), default_flow_style=False, sort_keys=True, width=1 << 30, allow_unicode=True)
    except (TypeError, ValueError, yaml.YAMLError):
        return ""


def _to_json(value: Any) -> str:
    try:
        return json.dumps(_plain(value), separators=(",", ":"), ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return ""


def _slugify(value: Any) -> str:
    """gosimple/slug Make with MaxLength 63 and smart truncation (flux-operator builder/resourceset.go `init`).

    Non-ASCII letters are not transliterated here (gosimple/slug uses unidecode): they separate words.
    """
    text = _str(value).lower().replace("&", " and ").replace("@", " at ").replace("'", "").replace('"', "")
    text = re.sub(r"[^a-z0-9_-]+", "-", text)
    text = re.sub(r"-+", "-", text).strip("-_")
    if len(text) <= 63:
        return text
    cut = text[:64]
    last = cut.rfind("-")
    return (cut[:last] if last > 0 else text[:63]).strip("-_")


def _seq_arg(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return list(value)
    if value is None:
        return []
    raise TemplateError(f"cannot iterate over {type(value).__name__}")


def _index(item: Any, *keys: Any) -> Any:
    for key in keys:
        if isinstance(item, Mapping):
            item = item.get(key)
        elif isinstance(item, (list, tuple, str)):
            if not isinstance(key, int) or isinstance(key, bool):
                raise TemplateError("cannot index slice with non-integer")
            if not 0 <= key < len(item):
                raise TemplateError(f"index out of range: {key}")
            item = ord(item[key]) if isinstance(item, str) else item[key]  # a string's index is a byte
        elif item is None:
            raise TemplateError("index of untyped nil")
        else:
            raise TemplateError(f"can't index item of type {type(item).__name__}")
    return item


def _printf(fmt: Any, *args: Any) -> str:
    out, i, n = [], 0, 0
    text = _str(fmt)
    while i < len(text):
        ch = text[i]
        if ch != "%":
            out.append(ch)
            i += 1
            continue
        i += 1
        if i < len(text) and text[i] == "%":
            out.append("%")
            i += 1
            continue
        spec = re.match(r"([-+# 0]*)(\d*)(?:\.(\d+))?([vsdqfgtxXe])", text[i:])
        if spec is None:
            raise Unsupported(f"printf verb in {text!r}")
        flags, width, prec, verb = spec.groups()
        i += spec.end()
        arg = args[n] if n < len(args) else None
        n += 1
        if verb in ("v", "s", "t"):
            piece = _str(arg) if verb == "s" else go_format(arg)
        elif verb == "d":
            piece = str(_to_int(arg)) if isinstance(arg, int) and not isinstance(arg, bool) else f"%!d({go_format(arg)})"
        elif verb == "q":
            piece = json.dumps(_str(arg), ensure_ascii=False)
        elif verb in ("f", "e", "g"):
            piece = f"{_to_float(arg):{'.' + (prec or '6') if verb != 'g' else ''}{verb}}"
        else:
            piece = format(_to_int(arg), verb)
        if width:
            piece = piece.ljust(int(width)) if "-" in flags else piece.rjust(int(width), "0" if "0" in flags and verb in "dfeg" else " ")
        out.append(piece)
    return "".join(out)


def _dict(*pairs: Any) -> dict[str, Any]:
    out = {}
    for i in range(0, len(pairs), 2):
        out[_str(pairs[i])] = pairs[i + 1] if i + 1 < len(pairs) else ""
    return out


def _ternary(a: Any, b: Any, cond: Any) -> Any:
    return a if _truth(cond) else b


def _split_list(sep: Any, text: Any) -> list[str]:
    return _str(text).split(_str(sep))


def _join(sep: Any, items: Any) -> str:
    return _str(sep).join(_str(v) for v in _seq_arg(items))


def _trunc(length: Any, text: Any) -> str:
    n, s = _to_int(length), _str(text)
    if n < 0:
        return s[n:] if len(s) + n > 0 else s
    return s[:n]


def _regex(pattern: Any) -> re.Pattern[str]:
    # Go's RE2 and Python's re agree on the patterns names and paths use; a pattern Python refuses is unsupported.
    try:
        return re.compile(_str(pattern))
    except re.error:
        raise Unsupported(f"regular expression {pattern!r}") from None


def _mul(*xs: Any) -> int:
    out = 1
    for x in xs:
        out *= _to_int(x)
    return out


def _div(a: Any, b: Any) -> int:
    bi = _to_int(b)
    if bi == 0:
        raise TemplateError("integer divide by zero")
    ai = _to_int(a)
    q = abs(ai) // abs(bi)
    return q if (ai >= 0) == (bi >= 0) else -q


def _mod(a: Any, b: Any) -> int:
    bi = _to_int(b)
    if bi == 0:
        raise TemplateError("integer divide by zero")
    ai = _to_int(a)
    return int(math.fmod(ai, bi))


def _fail(message: Any) -> str:
    raise TemplateError(_str(message))


def _b64dec(value: Any) -> str:
    try:
        return base64.b64decode(_str(value), validate=True).decode("utf-8", errors="replace")
    except ValueError as exc:
        return str(exc)


def _has_key(mapping: Any, key: Any) -> bool:
    return isinstance(mapping, Mapping) and _str(key) in mapping


def _get(mapping: Any, key: Any) -> Any:
    return mapping.get(_str(key), "") if isinstance(mapping, Mapping) else ""


def _dig(*args: Any) -> Any:
    if len(args) < 3:
        raise TemplateError("dig needs at least three arguments")
    *keys, default, mapping = args
    for key in keys:
        if not isinstance(mapping, Mapping) or _str(key) not in mapping:
            return default
        mapping = mapping[_str(key)]
    return mapping


def _words(text: str) -> list[str]:
    return re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", text)


FUNCTIONS: Mapping[str, Callable[..., Any]] = {
    # text/template's builtins (and/or are special forms, see _Executor)
    "not": lambda v: not _truth(v),
    "len": lambda v: len(v) if isinstance(v, (str, list, tuple, Mapping)) else _fail(f"len of type {type(v).__name__}"),
    "index": _index,
    "print": lambda *a: "".join(_str(x) if isinstance(x, str) else go_format(x) for x in a),
    "println": lambda *a: " ".join(go_format(x) for x in a) + "\n",
    "printf": _printf,
    "eq": _eq,
    "ne": lambda a, b: not _eq(a, b),
    "lt": lambda a, b: (lambda x, y: x < y)(*_order(a, b)),
    "le": lambda a, b: (lambda x, y: x <= y)(*_order(a, b)),
    "gt": lambda a, b: (lambda x, y: x > y)(*_order(a, b)),
    "ge": lambda a, b: (lambda x, y: x >= y)(*_order(a, b)),
    # slim-sprig (HermeticTxtFuncMap) and the operator's own
    "quote": lambda *a: " ".join(json.dumps(_str(x), ensure_ascii=False) for x in a if x is not None),
    "squote": lambda *a: " ".join(f"'{_str(x)}'" for x in a if x is not None),
    "default": _default,
    "empty": _empty,
    "coalesce": lambda *a: next((x for x in a if _truth(x)), None),
    "ternary": _ternary,
    "toString": _str,
    "toYaml": _to_yaml,
    "mustToYaml": _to_yaml,
    "toJson": _to_json,
    "mustToJson": _to_json,
    "toPrettyJson": lambda v: json.dumps(_plain(v), indent=2, ensure_ascii=False, sort_keys=True),
    "toRawJson": _to_json,
    "indent": _indent,
    "nindent": _nindent,
    "lower": lambda s: _str(s).lower(),
    "upper": lambda s: _str(s).upper(),
    "title": lambda s: re.sub(r"(?<![A-Za-z0-9])([a-z])", lambda m: m.group(1).upper(), _str(s)),
    "trim": lambda s: _str(s).strip(" \t\r\n\v\f"),
    "trimAll": lambda c, s: _str(s).strip(_str(c)),
    "trimPrefix": lambda p, s: _str(s)[len(_str(p)):] if _str(s).startswith(_str(p)) else _str(s),
    "trimSuffix": lambda p, s: _str(s)[: len(_str(s)) - len(_str(p))] if _str(p) and _str(s).endswith(_str(p)) else _str(s),
    "replace": lambda old, new, s: _str(s).replace(_str(old), _str(new)),
    "contains": lambda sub, s: _str(sub) in _str(s),
    "hasPrefix": lambda p, s: _str(s).startswith(_str(p)),
    "hasSuffix": lambda p, s: _str(s).endswith(_str(p)),
    "splitList": _split_list,
    "join": _join,
    "list": lambda *a: list(a),
    "dict": _dict,
    "get": _get,
    "hasKey": _has_key,
    "keys": lambda *ms: [k for m in ms if isinstance(m, Mapping) for k in m],
    "dig": _dig,
    "int": _to_int,
    "int64": _to_int,
    "atoi": lambda s: _to_int(s) if re.fullmatch(r"\s*[-+]?\d+\s*", _str(s)) else 0,
    "float64": _to_float,
    "add": lambda *a: sum(_to_int(x) for x in a),
    "add1": lambda a: _to_int(a) + 1,
    "sub": lambda a, b: _to_int(a) - _to_int(b),
    "mul": _mul,
    "div": _div,
    "mod": _mod,
    "max": lambda a, *r: max([_to_int(a), *(_to_int(x) for x in r)]),
    "min": lambda a, *r: min([_to_int(a), *(_to_int(x) for x in r)]),
    "first": lambda v: _seq_arg(v)[0] if _seq_arg(v) else None,
    "last": lambda v: _seq_arg(v)[-1] if _seq_arg(v) else None,
    "has": lambda needle, v: needle in _seq_arg(v),
    "sortAlpha": lambda v: sorted(_str(x) for x in _seq_arg(v)),
    "uniq": lambda v: [x for i, x in enumerate(_seq_arg(v)) if x not in _seq_arg(v)[:i]],
    "b64enc": lambda s: base64.b64encode(_str(s).encode()).decode(),
    "b64dec": _b64dec,
    "sha256sum": lambda s: hashlib.sha256(_str(s).encode()).hexdigest(),
    "sha1sum": lambda s: hashlib.sha1(_str(s).encode()).hexdigest(),
    "trunc": _trunc,
    "substr": lambda a, b, s: _str(s)[_to_int(a): _to_int(b)] if _to_int(b) >= 0 else _str(s)[_to_int(a):],
    "repeat": lambda n, s: _str(s) * max(0, _to_int(n)),
    "cat": lambda *a: " ".join(_str(x) for x in a if x is not None),
    "nospace": lambda s: re.sub(r"\s", "", _str(s)),
    "kebabcase": lambda s: "-".join(w.lower() for w in _words(_str(s))),
    "snakecase": lambda s: "_".join(w.lower() for w in _words(_str(s))),
    "camelcase": lambda s: "".join(w[:1].upper() + w[1:] for w in re.split(r"[_\-\s]+", _str(s)) if w),
    "regexMatch": lambda p, s: _regex(p).search(_str(s)) is not None,
    "regexReplaceAll": lambda p, s, r: _regex(p).sub(re.sub(r"\$\{?(\w+)\}?", r"\\g<\1>", _str(r)), _str(s)),
    "regexFind": lambda p, s: (lambda m: m.group(0) if m else "")(_regex(p).search(_str(s))),
    "toStrings": lambda v: [_str(x) for x in _seq_arg(v)],
    "fail": _fail,
    "slugify": _slugify,
}


# -- execution ----------------------------------------------------------------------------------

class Budget:
    """What several executions may spend together (a ResourceSet runs its templates once per input set)."""

    def __init__(self, steps: int = MAX_STEPS, output: int = MAX_OUTPUT) -> None:
        self.steps, self.output = steps, output
        self.max_steps, self.max_output = steps, output


class _Executor:
    def __init__(self, functions: Mapping[str, Callable[..., Any]], budget: Budget) -> None:
        self.functions = functions
        self.out: list[str] = []
        self.budget = budget

    def write(self, text: str) -> None:
        self.budget.output -= len(text)
        if self.budget.output < 0:
            raise LimitExceeded(f"the template writes more than {self.budget.max_output >> 20} MiB")
        self.out.append(text)

    def tick(self) -> None:
        self.budget.steps -= 1
        if self.budget.steps < 0:
            raise LimitExceeded(f"the template takes more than {self.budget.max_steps:,} steps")

    def run(self, nodes: Sequence[Any], dot: Any, scope: list[dict[str, Any]]) -> None:
        for node in nodes:
            self.tick()
            if isinstance(node, _Text):
                self.write(node.text)
            elif isinstance(node, _Action):
                value = self.pipe(node.pipe, dot, scope)
                if not node.pipe.decl:
                    self.write("<no value>" if value is None else go_format(value))
            else:
                self.block(node, dot, scope)

    def block(self, node: _Block, dot: Any, scope: list[dict[str, Any]]) -> None:
        inner = [*scope, {}]
        if node.kind == "range":
            value = self.pipe(node.pipe, dot, inner, declare=False)
            items: list[tuple[Any, Any]]
            if isinstance(value, Mapping):
                items = [(k, value[k]) for k in sorted(value, key=str)]
            elif isinstance(value, (list, tuple)):
                items = list(enumerate(value))
            elif value is None:
                items = []
            elif isinstance(value, int) and not isinstance(value, bool):
                items = [(i, i) for i in range(max(0, value))]
            else:
                raise TemplateError(f"range can't iterate over {go_format(value)}")
            if not items:
                self.run(node.orelse, dot, [*scope, {}])
                return
            for key, item in items:
                self.tick()
                frame: dict[str, Any] = {}
                if len(node.pipe.decl) == 1:
                    frame[node.pipe.decl[0]] = item
                elif len(node.pipe.decl) == 2:
                    frame[node.pipe.decl[0]], frame[node.pipe.decl[1]] = key, item
                self.run(node.body, item, [*scope, frame])
            return
        value = self.pipe(node.pipe, dot, inner)
        if _truth(value):
            self.run(node.body, value if node.kind == "with" else dot, inner)
        else:
            self.run(node.orelse, dot, [*scope, {}])

    def pipe(self, pipe: _Pipe, dot: Any, scope: list[dict[str, Any]], declare: bool = True) -> Any:
        value: Any = None
        has_value = False
        for cmd in pipe.cmds:
            value = self.command(cmd, dot, scope, (value,) if has_value else ())
            has_value = True
        if declare and pipe.decl:
            name = pipe.decl[-1]
            if pipe.assign:
                for frame in reversed(scope):
                    if name in frame:
                        frame[name] = value
                        break
                else:
                    raise TemplateError(f"undefined variable: {name}")
            else:
                scope[-1][name] = value
        return value

    def command(self, cmd: tuple[Any, ...], dot: Any, scope: list[dict[str, Any]], final: tuple[Any, ...]) -> Any:
        head = cmd[0]
        self.tick()
        if head[0] == "ident" and not head[2]:
            name = head[1]
            if name in ("and", "or"):
                # and/or evaluate their arguments only as far as needed (text/template exec.go evalCall).
                operands: list[Any] = [("eval", o) for o in cmd[1:]] + [("value", v) for v in final]
                if not operands:
                    raise TemplateError(f"missing argument for {name}")
                result: Any = None
                for how, item in operands:
                    result = self.operand(item, dot, scope) if how == "eval" else item
                    if _truth(result) == (name == "or"):
                        return result
                return result
            fn = self._function(name)
            args = [self.operand(o, dot, scope) for o in cmd[1:]] + list(final)
            return self._call(name, fn, args)
        if len(cmd) > 1 or final:
            if head[0] != "ident":
                raise TemplateError(f"can't give argument to non-function {head}")
        return self.operand(head, dot, scope, args=[self.operand(o, dot, scope) for o in cmd[1:]] + list(final))

    def _function(self, name: str) -> Callable[..., Any]:
        fn = self.functions.get(name)
        if fn is None:
            raise Unsupported(f"template function {name}")
        return fn

    def _call(self, name: str, fn: Callable[..., Any], args: list[Any]) -> Any:
        try:
            return fn(*args)
        except (TemplateError, Unsupported, LimitExceeded):
            raise
        except TypeError:
            raise TemplateError(f"wrong number or type of args for {name}") from None
        except (ValueError, IndexError, KeyError, OverflowError) as exc:
            raise TemplateError(f"error calling {name}: {exc}") from None

    def operand(self, op: Any, dot: Any, scope: list[dict[str, Any]], args: list[Any] | None = None) -> Any:
        kind = op[0]
        if kind == "lit":
            return op[1]
        if kind == "dot":
            return dot
        if kind == "field":
            return self.fields(dot, op[1])
        if kind == "var":
            name = op[1]
            if name == "$":
                base = scope[0].get("$") if scope else None
            else:
                for frame in reversed(scope):
                    if name in frame:
                        base = frame[name]
                        break
                else:
                    raise TemplateError(f"undefined variable: {name}")
            return self.fields(base, op[2])
        if kind == "ident":
            fn = self._function(op[1])
            value = self._call(op[1], fn, list(args or []) if not op[2] else [])
            return self.fields(value, op[2])
        if kind == "pipe":
            return self.fields(self.pipe(op[1], dot, [*scope, {}]), op[2])
        raise TemplateError(f"unexpected operand {op}")

    def fields(self, value: Any, names: Sequence[str]) -> Any:
        for name in names:
            if isinstance(value, Mapping):
                if name not in value:
                    # missingkey=error (flux-operator builder/resourceset.go newTemplate)
                    raise TemplateError(f"map has no entry for key {name!r}")
                value = value[name]
            elif value is None:
                raise TemplateError(f"nil pointer evaluating interface {{}}.{name}")
            else:
                raise TemplateError(f"can't evaluate field {name} in type {type(value).__name__}")
        return value


@dataclass(frozen=True)
class Template:
    """A parsed template; `execute` runs it with `inputs` bound to the input set."""

    nodes: tuple[Any, ...]

    @classmethod
    def parse(cls, source: str, left: str = "<<", right: str = ">>") -> "Template":
        """Parse; raises TemplateError (Go refuses it too), Unsupported or LimitExceeded."""
        if len(source) > MAX_OUTPUT:
            raise LimitExceeded(f"the template is longer than {MAX_OUTPUT >> 20} MiB")
        return cls(_Parser(source, left, right).parse())

    def execute(self, inputs: Mapping[str, Any] | None, budget: Budget | None = None) -> str:
        """The output with `inputs` as the operator's `inputs` function; the dot is nil, as the operator executes it."""
        functions = {**FUNCTIONS, "inputs": lambda: inputs}
        executor = _Executor(functions, budget if budget is not None else Budget())
        executor.run(self.nodes, None, [{"$": None}])
        return "".join(executor.out)


def adler32(text: str) -> int:
    """hash/adler32 Checksum (zlib is not among the engine's modules): the operator's input ids."""
    a, b = 1, 0
    for byte in text.encode():
        a = (a + byte) % 65521
        b = (b + a) % 65521
    return (b << 16) | a
