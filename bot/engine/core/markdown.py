"""Escaping for the Markdown the bot posts (comments, issues, PR bodies): one function per context.

Names, paths, branch names and messages come from a repository, i.e. from a PR: untrusted. Each is
interpolated through the function for where it lands — `code` (an inline code span), `text` (prose, a table
cell, a heading or link text), `rich` (a message that quotes names in backticks), `html` (inside an HTML
element such as `<summary>`), `comment` (inside `<!-- … -->`), `url_path` (a link target) — so that nothing
from a repository can end a code span, a table cell or the bot's `<details>`, start a line (a heading, a
blank line, a hidden marker), write HTML, or mention (`@user`) anyone. Every piece is one line of printable
characters: line breaks, control and format characters (bidi overrides, zero-width) are shown as escapes.
"""

from __future__ import annotations

import re
from urllib.parse import quote

from bot.engine.core.github_limits import MAX_COMMENT

NAME_LIMIT = 256  # characters of a name shown in a code span (a Kubernetes name has at most 253)
# U+2060 WORD JOINER after an `@`: it reads as @name, but GitHub links and notifies no one. GitHub mentions
# `@login` (and `@org/team`) after a non-word character: `main@sha1:…` and `a@b.c` are left alone.
_NO_MENTION = "@\u2060"
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# CommonMark lets any ASCII punctuation be backslash-escaped; these are the ones that start inline markup
# (code, emphasis, links, strikethrough, GitHub's $math$) or split a table cell.
_INLINE = re.compile(r"([\\`*\[\]|~$])")
_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")  # an `_` inside a word never emphasises
# At the start of a line: a heading, a quote, a list item, a setext underline; `1.`/`1)` an ordered list.
_LINE_START = re.compile(r"^[#>+=-]")
_ORDERED = re.compile(r"^(\d+)([.)])")


def _word(c: str) -> bool:
    return c.isascii() and c.isalnum()


def visible(value: object, limit: int | None = None, *, mentions: bool = True) -> str:
    """`value` as one line of printable characters (others as `\\n`, `\\u202e`…), at most `limit` long.

    `mentions=False`: an `@` that would mention someone (after a non-word character, before a login) gets a
    word joiner, judged on the original text (a line break before it is a boundary, though shown as `\\n`).
    """
    text = str(value)
    if text.isprintable() and (mentions or "@" not in text):
        out = text
    else:
        shown = []
        for i, c in enumerate(text):
            if c == "@" and not mentions and i + 1 < len(text) and _word(text[i + 1]) and not (i and _word(text[i - 1])):
                shown.append(_NO_MENTION)
            elif c.isprintable():
                shown.append(c)
            else:
                shown.append(_ESCAPES.get(c) or (f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}"))
        out = "".join(shown)
    if limit is not None and len(out) > limit:
        out = out[: max(0, limit - 1)] + "…"
    return out


def text(value: object, limit: int | None = None) -> str:
    """Prose, a table cell, a heading or link text: no markup, no HTML, no mention; one line."""
    out = visible(value, limit, mentions=False).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    out = _UNDERSCORE.sub(r"\\_", _INLINE.sub(r"\\\1", out))
    return _ORDERED.sub(r"\1\\\2", _LINE_START.sub(r"\\\g<0>", out))


def code(value: object, *, limit: int | None = NAME_LIMIT, table: bool = False) -> str:
    """An inline code span that nothing in `value` can close; `table=True` inside a table cell."""
    out = visible(value, limit)
    if table:
        out = out.replace("|", "\\|")  # GFM splits cells before it reads code spans; `\|` keeps the pipe
    if not out:
        return '""'
    # CommonMark: delimit with a backtick run longer than any inside; pad when the content starts or ends
    # with a backtick or a space (one space each side is stripped). https://spec.commonmark.org/0.31.2/#code-spans
    fence = "`" * (max((len(r) for r in re.findall(r"`+", out)), default=0) + 1)
    pad = " " if out[0] in "` " or out[-1] in "` " else ""
    return f"{fence}{pad}{out}{pad}{fence}"


def rich(value: object, limit: int | None = None, *, table: bool = False) -> str:
    """A message that quotes names in backticks: its `code` parts as code spans, the rest as `text`.

    Built only from `code` and `text` pieces, so unbalanced or hostile backticks cannot break out: at worst
    a part shows as prose instead of code.
    """
    raw = str(value)
    if limit is not None and len(raw) > limit:
        raw = raw[: max(0, limit - 1)] + "…"
    parts = raw.split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: the last part stays prose, backtick included
        parts[-2:] = [parts[-2] + "`" + parts[-1]]
    return "".join(code(p, limit=None, table=table) if i % 2 else text(p) for i, p in enumerate(parts) if p or i % 2 == 0)


def html(value: object, limit: int | None = None) -> str:
    """Text inside an HTML element (`<summary>…</summary>`): entities for `&<>"`, one line, no mention."""
    return visible(value, limit, mentions=False).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def comment(value: object) -> str:
    """Text inside an HTML comment (a hidden marker): one line that cannot close it (`-->`) or open another."""
    return visible(value).replace("<", "&lt;").replace(">", "&gt;")


def url_path(path: str) -> str:
    """A repository path as the path part of a link (spaces, parentheses, line breaks percent-encoded)."""
    return quote(path, safe="/")


def bounded(body: str, limit: int = MAX_COMMENT, note: str = "\n\n… (shortened: over GitHub's limit)\n") -> str:
    """`body` cut to `limit` characters at a line boundary, with `note` (a last guard: callers keep within it)."""
    if len(body) <= limit:
        return body
    cut = body.rfind("\n", 0, limit - len(note))
    return body[: cut if cut > 0 else limit - len(note)] + note
