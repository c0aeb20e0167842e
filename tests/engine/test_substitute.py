"""Tests for bot.substitute: Flux postBuild envsubst semantics, table-driven.

Expectations marked "ported" come from fluxcd/pkg `envsubst/eval_test.go` (TestExpand, TestExpandStrict),
`envsubst/funcs_test.go`, `envsubst/parse/parse_test.go`, and drone/envsubst `eval_test.go` (TestExpand,
the tldp.org cases the fork inherited). The others pin down quirks read off the Go source
(parse/scan.go, parse/parse.go, funcs.go, template.go, drone's path/match.go).
"""

from __future__ import annotations

import re

import pytest

from bot.engine.core.errors import SubstitutionError
from bot.engine.render.substitute import (
    VAR_NAME,
    SubstitutionResult,
    VarRef,
    check_variable_names,
    find_references,
    substitute,
)

# -- ported: fluxcd/pkg envsubst/eval_test.go TestExpand (== drone/envsubst eval_test.go TestExpand) ----
# The Go test's mapper returns (params[s], true), i.e. lenient mode.
PORTED_EXPAND = [
    ({}, "abcdEFGH28ij", "abcdEFGH28ij"),
    ({"var01": "abcdEFGH28ij"}, "${#var01}", "12"),
    ({"var01": "abcdEFGH28ij"}, "${var01^}", "AbcdEFGH28ij"),
    ({"var01": "abcdEFGH28ij"}, "${var01^^}", "ABCDEFGH28IJ"),
    ({"var01": "ABCDEFGH28IJ"}, "${var01,}", "aBCDEFGH28IJ"),
    ({"var01": "ABCDEFGH28IJ"}, "${var01,,}", "abcdefgh28ij"),
    ({"path_name": "/home/bozo/ideas/thoughts.for.today"}, "${path_name:11}", "ideas/thoughts.for.today"),
    ({"path_name": "/home/bozo/ideas/thoughts.for.today"}, "${path_name:11:5}", "ideas"),
    ({"var": "abc"}, "${var=xyz}", "abc"),
    ({}, "${var=xyz}", "xyz"),
    ({"default_var": "foo"}, "something ${var=${default_var}}", "something foo"),
    ({"default_var": "foo1"}, "foo: ${var=${default_var}-suffix}", "foo: foo1-suffix"),
    ({"default_var": "foo1"}, "foo: ${var=prefix${default_var}-suffix}", "foo: prefixfoo1-suffix"),
    ({}, "${var:=xyz}", "xyz"),
    ({"stringZ": "abcABC123ABCabc"}, "${stringZ/%abc/XYZ}", "abcABC123ABCXYZ"),
    ({"stringZ": "abcABC123ABCabc"}, "${stringZ/#abc/XYZ}", "XYZABC123ABCabc"),
    ({"stringZ": "somevalue"}, "${stringZ/#/prefix-}", "prefix-somevalue"),
    ({"stringZ": "somevalue"}, "${stringZ/%/-suffix}", "somevalue-suffix"),
    ({"stringZ": "abcABC123ABCabc"}, "${stringZ//abc/xyz}", "xyzABC123ABCxyz"),
    ({"stringZ": "abcABC123ABCabc"}, "${stringZ/abc/xyz}", "xyzABC123ABCabc"),
    ({"filename": "bash.string.txt"}, "${filename#*.}", "string.txt"),
    ({"filename": "path/to/file"}, "${filename#*/}", "to/file"),
    ({"filename": "/path/to/file"}, "${filename#*/}", "path/to/file"),
    ({"filename": "bash.string.txt"}, "${filename##*.}", "txt"),
    ({"filename": "path/to/file"}, "${filename##*/}", "file"),
    ({"filename": "/path/to/file"}, "${filename##*/}", "file"),
    ({"filename": "bash.string.txt"}, "${filename%.*}", "bash.string"),
    ({"filename": "bash.string.txt"}, "${filename%%.*}", "bash"),
    ({"var01": "abcdEFGH28ij"}, "${var=${var01^^}}", "ABCDEFGH28IJ"),
    ({"var01": "abcdEFGH28ij"}, "$${var01}", "${var01}"),
    (
        {"var01": "abcdEFGH28ij"},
        "some text ${var01}$${var$${var01}$var01${var01}",
        "some text abcdEFGH28ij${var${var01}$var01abcdEFGH28ij",
    ),
    ({"default_var": "foo"}, "something $${var=${default_var}}", "something ${var=foo}"),
    ({"stringZ": "foo/bar"}, r"${stringZ/\//-}", "foo-bar"),
    ({"stringZ": "foo/bar/baz"}, r"${stringZ//\//-}", "foo-bar-baz"),
    ({"default_var": "foo"}, "\\\\something ${var=${default_var}}", "\\\\something foo"),
    ({"stringZ": "foo.bar"}, "${stringZ/./}", "foobar"),
]


@pytest.mark.parametrize(("variables", "text", "expected"), PORTED_EXPAND, ids=[c[1] for c in PORTED_EXPAND])
def test_ported_expand(variables: dict[str, str], text: str, expected: str) -> None:
    assert substitute(text, variables).text == expected


# -- ported: fluxcd/pkg envsubst/eval_test.go TestExpandStrict (incl. the fluxcd/flux2#5836 regression) --
PORTED_STRICT_OK = [
    ({}, "abcdEFGH28ij", "abcdEFGH28ij"),
    ({"foo": "bar"}, "${foo}", "bar"),
    ({"foo": ""}, "${foo}", ""),
    ({"foo": "bar"}, "${missing:=default}", "default"),
    ({}, "${missing:-fallback}", "fallback"),
    ({}, "${missing:=assigned}", "assigned"),
    ({}, "${missing=assigned}", "assigned"),
]

PORTED_STRICT_MISSING = [
    "${missing}",
    "${#missing}",
    "${missing^}",
    "${missing^^}",
    "${missing,}",
    "${missing,,}",
    "${missing:0}",
    "${missing:0:10}",
    "${missing/pattern/replacement}",
    "${missing//pattern/replacement}",
    "${missing/#pattern/replacement}",
    "${missing/%pattern/replacement}",
    "${missing#pattern}",
    "${missing##pattern}",
    "${missing%pattern}",
    "${missing%%pattern}",
]


@pytest.mark.parametrize(("variables", "text", "expected"), PORTED_STRICT_OK, ids=[c[1] for c in PORTED_STRICT_OK])
def test_ported_strict_ok(variables: dict[str, str], text: str, expected: str) -> None:
    assert substitute(text, variables, strict=True) == SubstitutionResult(expected, ())


@pytest.mark.parametrize("text", PORTED_STRICT_MISSING)
def test_ported_strict_missing_raises(text: str) -> None:
    with pytest.raises(SubstitutionError, match=r'^variable not set \(strict mode\): "missing"$'):
        substitute(text, {}, strict=True)


@pytest.mark.parametrize("text", PORTED_STRICT_MISSING)
def test_same_expressions_lenient_report_undefined(text: str) -> None:
    result = substitute(text, {})
    assert result.undefined == ("missing",)
    # ${#missing} is the length of "", every other operator yields "".
    assert result.text == ("0" if text.startswith("${#") else "")


# -- ported: fluxcd/pkg envsubst/funcs_test.go Test_substr, driven through nested references -------------
# `${v:-3}` would be a default, so negative offsets can only arrive through a nested reference.
SUBSTR_VALUE = "123456789123456789"
PORTED_SUBSTR = [
    (SUBSTR_VALUE, "0", "8", "12345678"),
    (SUBSTR_VALUE, "1", "8", "23456789"),
    (SUBSTR_VALUE, "9", None, "123456789"),
    (SUBSTR_VALUE, "9", "50", "123456789"),
    (SUBSTR_VALUE, "-3", "2", "78"),
    (SUBSTR_VALUE, "-300", "3", "123"),
    ("12345678", "9", "1", ""),
    ("hello world", "2", "-1", "llo worl"),
    ("hello world", "0", "-3", "hello wo"),
    ("hello world", "8", "-8", ""),
    ("hello world", "-4", "-1", "orl"),
]


@pytest.mark.parametrize(("value", "pos", "length", "expected"), PORTED_SUBSTR)
def test_ported_substr(value: str, pos: str, length: str | None, expected: str) -> None:
    variables = {"v": value, "p": pos, "l": length or ""}
    text = "${v:${p}}" if length is None else "${v:${p}:${l}}"
    assert substitute(text, variables).text == expected


# -- ported: fluxcd/pkg envsubst/funcs_test.go Test_len/Test_lower/Test_upper/Test_default ---------------
PORTED_FUNCS = [
    ({"v": "Hello World"}, "${#v}", "11"),
    ({"v": "Hello World"}, "${v,,}", "hello world"),
    ({"v": "HELLO WORLD"}, "${v,}", "hELLO WORLD"),
    ({"v": "Hello World"}, "${v^^}", "HELLO WORLD"),
    ({"v": "hello world"}, "${v^}", "Hello world"),
    ({"v": ""}, "${v^}", ""),
    ({"v": ""}, "${v,}", ""),
    ({"v": "Hello World"}, "${v:=Hola Mundo}", "Hello World"),
    ({"v": ""}, "${v:=Hola Mundo}", "Hola Mundo"),
    # Several default arguments are joined without a separator.
    (
        {"a": "-Bonjour le monde", "b": "-Halló heimur"},
        "${v:=Hola Mundo${a}${b}}",
        "Hola Mundo-Bonjour le monde-Halló heimur",
    ),
]


@pytest.mark.parametrize(("variables", "text", "expected"), PORTED_FUNCS, ids=[c[1] for c in PORTED_FUNCS])
def test_ported_funcs(variables: dict[str, str], text: str, expected: str) -> None:
    assert substitute(text, variables).text == expected


# -- ported: fluxcd/pkg envsubst/parse/parse_test.go, checked through the expansion they imply ------------
PORTED_PARSE = [
    ({}, "text", "text"),
    ({}, "}text", "}text"),
    ({}, "http://github.com", "http://github.com"),  # a double slash is not an escape outside ${}
    ({}, "$${string}", "${string}"),
    ({}, "$$string", "$string"),
    ({}, r"\\.\pipe\pipename", r"\\.\pipe\pipename"),
    ({"string": "abcdef"}, "${string:${position}}", "abcdef"),  # "" is not a number: whole value
    (
        {"string": "abcdefgh", "stringy": "2", "stringz": "3"},
        "${string:${stringy:position:length}:${stringz,,}}",
        "cde",
    ),
    ({"string": "pre-rest", "stringz": "pre-"}, "${string#${stringz}}", "rest"),
    ({"stringz": "zz"}, "${string=${stringz}}", "zz"),
    ({"var": "V"}, "${string=prefix-${var}}", "prefix-V"),
    ({"var": "V"}, "${string=${var}-suffix}", "V-suffix"),
    ({"var": "V"}, "${string=prefix-${var}-suffix}", "prefix-V-suffix"),
    ({"var": "V"}, "${string=prefix${var} suffix}", "prefixV suffix"),
    ({"string": "a.b.c", "stringy": ".", "stringz": "/"}, "${string//${stringy}/${stringz}}", "a/b/c"),
    # special characters in an argument: the pattern is "$%:*{"
    ({"string": "$%:XY{rest"}, "${string#$%:*{}", "rest"),
    ({"string": "hello x"}, "hello ${#string} world", "hello 7 world"),
    ({"string": "abc"}, r"\\ hello ${#string} world \\", r"\\ hello 3 world \\"),
    # escaped function arguments
    ({"string": "a/positionb"}, r"${string/\/position/length}", "alengthb"),
    ({"string": "a/position\\b"}, r"${string/\/position\\/length}", "alengthb"),
    ({"string": "a-position-b"}, r"${string/position/\/length}", "a-/length-b"),
    ({"string": "a-position-b"}, r"${string/position/\/length\\}", "a-/length\\-b"),
    ({"string": "position"}, r"${string/position/\/leng\\th}", "/leng\\th"),
]


@pytest.mark.parametrize(("variables", "text", "expected"), PORTED_PARSE, ids=[c[1] for c in PORTED_PARSE])
def test_ported_parse(variables: dict[str, str], text: str, expected: str) -> None:
    assert substitute(text, variables).text == expected


# -- every operator, including the quirks of the Go code ---------------------------------------------------
OPERATORS = [
    # plain, length, case
    ({"v": "x"}, "${v}", "x"),
    ({"v": "abc"}, "${#v}", "3"),
    ({"v": ""}, "${#v}", "0"),
    ({"v": "hello"}, "${v^}", "Hello"),
    ({"v": "hello"}, "${v^^}", "HELLO"),
    ({"v": "HELLO"}, "${v,}", "hELLO"),
    ({"v": "HELLO"}, "${v,,}", "hello"),
    ({"v": "AbC"}, "${v,^}", "AbC"),  # mixed casing operator: unknown name -> toDefault -> unchanged
    ({"v": "AbC"}, "${v^,}", "AbC"),
    # substrings
    ({"v": "abcdef"}, "${v:2}", "cdef"),
    ({"v": "abcdef"}, "${v:2:3}", "cde"),
    ({"v": "abcdef"}, "${v:0}", "abcdef"),
    ({"v": "abcdef"}, "${v:6}", ""),
    ({"v": "abcdef"}, "${v:99}", ""),
    ({"v": "abcdef"}, "${v:1:0}", ""),
    ({"v": "abcdef"}, "${v:1:-1}", "bcde"),
    ({"v": "abcdef"}, "${v:+2}", "abcdef"),  # `:+` is a default operator, not a signed offset
    ({"v": "abcdef"}, "${v:x}", "abcdef"),  # unparsable offset returns the value
    ({"v": "abcdef"}, "${v:1:x}", "abcdef"),  # unparsable length returns the value
    ({"v": "abcdef"}, "${v: 2}", "abcdef"),  # Atoi does not skip spaces
    ({"v": "abcdef"}, "${v:1:2:3}", "abcdef"),  # length "2:3" is not a number
    ({"v": "abcdef"}, "${v:1::2}", "bc"),  # the delimiter scan accepts any run of colons
    ({"v": "abcdef"}, "${v:99999999999999999999}", "abcdef"),  # beyond int64: Atoi error
    # trims (drone path.Match: `*` crosses "/")
    ({"v": "a/b/c"}, "${v#*/}", "b/c"),
    ({"v": "a/b/c"}, "${v##*/}", "c"),
    ({"v": "a/b/c"}, "${v%/*}", "a/b"),
    ({"v": "a/b/c"}, "${v%%/*}", "a"),
    ({"v": "abc"}, "${v#*}", "bc"),  # the empty prefix is never tried, so `*` eats one byte
    ({"v": "abc"}, "${v##*}", ""),
    ({"v": "abc"}, "${v%*}", "ab"),
    ({"v": "abc"}, "${v#x}", "abc"),
    ({"v": "abc"}, "${v#?}", "bc"),
    ({"v": "bcd"}, "${v#[a-c]}", "cd"),
    ({"v": "bcd"}, "${v#[^a-c]}", "bcd"),
    ({"v": "abc1"}, "${v%[0-9]}", "abc1"),  # the pattern is reversed to "]9-0[" and never matches
    ({"v": "[abc"}, "${v#[}", "[abc"),  # bad pattern: value unchanged
    ({"v": "*abc"}, r"${v#\*}", "abc"),  # backslash escapes inside the glob
    ({"v": "abc"}, "${v###}", "abc"),  # op "##", pattern "#"
    ({"v": "#abc"}, "${v###}", "abc"),
    # defaults: all of them fire on empty as well as unset, nothing is assigned
    ({}, "${v=d}", "d"),
    ({"v": ""}, "${v=d}", "d"),
    ({}, "${v:=d}", "d"),
    ({}, "${v:-d}", "d"),
    ({"v": ""}, "${v:-d}", "d"),
    ({"v": "set"}, "${v:-d}", "set"),
    ({}, "${v:?d}", "d"),  # not bash's error form
    ({"v": "set"}, "${v:+alt}", "set"),  # not bash's alternate value
    ({}, "${v:+alt}", "alt"),
    ({}, "${v==d}", "=d"),  # op "=", default "=d"
    ({}, "${v:=}", ""),
    ({"v": "x"}, "${v:=}", "x"),
    ({}, "${v:=d}-${v}", "d-"),  # `:=` does not persist
    ({}, "${v:-a b:c/d}", "a b:c/d"),
    ({}, "${v:-{a}}", "{a}"),  # the default stops at the first "}", the second is text
    # replace
    ({"v": "aXbXc"}, "${v/X/-}", "a-bXc"),
    ({"v": "aXbXc"}, "${v//X/-}", "a-b-c"),
    ({"v": "aXbXc"}, "${v/X/}", "abXc"),
    ({"v": "aXbXc"}, "${v//X/}", "abc"),
    ({"v": "XaX"}, "${v/#X/-}", "-aX"),
    ({"v": "XaX"}, "${v/%X/-}", "Xa-"),
    ({"v": "aX"}, "${v/#X/-}", "aX"),
    ({"v": "Xa"}, "${v/%X/-}", "Xa"),
    ({"v": "XaX"}, "${v/#X/}", "XaX"),  # the prefix function wants two arguments: unchanged
    ({"v": "XaX"}, "${v/%X/}", "XaX"),
    ({"v": "XaX", "e": ""}, "${v/#X/${e}}", "aX"),  # an empty *evaluated* replacement is an argument
    ({"v": "ab"}, "${v///-}", "-a-b-"),  # empty pattern: insert at every rune boundary
    ({"v": "ab"}, "${v///}", "ab"),
    ({"v": "a$b"}, "${v/$$/D}", "aDb"),  # `$$` is an escape inside replace arguments
    ({"v": "xa} by"}, "${v/a} b/c}", "xcy"),  # the pattern scan does not stop at "}"
    ({"v": "a.b"}, "${v/./${r}}", "ab"),
]


@pytest.mark.parametrize(("variables", "text", "expected"), OPERATORS, ids=[c[1] for c in OPERATORS])
def test_operators(variables: dict[str, str], text: str, expected: str) -> None:
    assert substitute(text, variables).text == expected


def test_colon_dash_is_default_not_negative_offset() -> None:
    # `${v:-3}` is the default operator, so a set value is returned whole, an empty one gives "3".
    assert substitute("${v:-3}", {"v": "abcdef"}).text == "abcdef"
    assert substitute("${v:-3}", {"v": ""}).text == "3"


# -- escapes and text outside references -------------------------------------------------------------------
ESCAPES = [
    ("$${x}", "${x}"),
    ("$$${x}", "$X"),
    ("$$$${x}", "$${x}"),
    ("$$x", "$x"),
    ("$$", "$"),
    ("$$$", "$$"),
    ("echo $$ $HOME $1 $(date) $", "echo $ $HOME $1 $(date) $"),
    ("$x ${x}", "$x X"),
    ("\\${x}", "\\X"),  # backslash is not an escape at top level
    ("${x}}", "X}"),
    ("{${x}}", "{X}"),
    ("${x}${x}", "XX"),
    ("", ""),
    ("no references here", "no references here"),
    ("${v:=a$$b}", "a$$b"),  # no escapes inside a default
    ("${v:-$${x}}", "$X"),  # in a default `$$` is text and `${x}` still a reference
]


@pytest.mark.parametrize(("text", "expected"), ESCAPES, ids=[c[0] or "empty" for c in ESCAPES])
def test_escapes(text: str, expected: str) -> None:
    assert substitute(text, {"x": "X"}).text == expected


def test_values_are_not_rescanned() -> None:
    # A value is inserted verbatim: neither `${...}` nor `$$` in it is interpreted again.
    result = substitute("a: ${v}", {"v": "${other} $$ ${v}"})
    assert result == SubstitutionResult("a: ${other} $$ ${v}", ())


def test_newlines_in_values_are_kept() -> None:
    # Stripping "\n" from values is kustomize_varsub.go's loader's job, not envsubst's.
    assert substitute("${v}", {"v": "a\nb\r\n"}).text == "a\nb\r\n"


def test_nul_ends_the_input() -> None:
    # scan.go uses rune 0 as its EOF marker.
    assert substitute("a${x}\x00${x}", {"x": "X"}).text == "aX"
    assert substitute("a$$\x00b", {}).text == "a$"
    assert find_references("${x}\x00${y}") == [VarRef("x", False, "${x}", 0)]


def test_multi_document_yaml() -> None:
    text = "a: ${A}\n---\nb: ${B:=two}\nc: $${C}\n"
    assert substitute(text, {"A": "one"}) == SubstitutionResult("a: one\n---\nb: two\nc: ${C}\n", ())


# -- nested references ----------------------------------------------------------------------------------
NESTED = [
    ({"b": "B"}, "${a:-${b}}", "B"),
    ({"a": "A", "b": "B"}, "${a:-${b}}", "A"),
    ({"c": "C"}, "${a:-${b:-${c}}}", "C"),
    ({}, "${a:-${b:-${c:-deep}}}", "deep"),
    ({"b": "bee"}, "${a:=x-${b^^}-y}", "x-BEE-y"),
    ({"n": "2"}, "${a:-${b}${n}}", "2"),
    ({"v": "hello", "n": "3"}, "${v:${n}}", "lo"),
]


@pytest.mark.parametrize(("variables", "text", "expected"), NESTED, ids=[c[1] for c in NESTED])
def test_nested(variables: dict[str, str], text: str, expected: str) -> None:
    assert substitute(text, variables).text == expected


def test_nested_reference_in_unused_default_is_still_evaluated() -> None:
    # template.go evaluates every argument before looking at the variable.
    assert substitute("${a:-${b}}", {"a": "A"}) == SubstitutionResult("A", ("b",))
    with pytest.raises(SubstitutionError, match='"b"'):
        substitute("${a:-${b}}", {"a": "A"}, strict=True)


# -- undefined: lenient vs strict ----------------------------------------------------------------------------
UNDEFINED = [
    ("${a} ${b:-x} ${c^^} ${a}", {}, " x  ", ("a", "c")),
    ("${z} ${a}", {}, " ", ("a", "z")),
    ("${a:=d} ${a=d} ${a:?d} ${a:+d}", {}, "d d d d", ()),
    ("${a}", {"a": ""}, "", ()),
    ("${héllo}", {}, "", ("héllo",)),
    ("${1abc}", {}, "", ("1abc",)),
    ("plain", {}, "plain", ()),
]


@pytest.mark.parametrize(("text", "variables", "expected", "undefined"), UNDEFINED, ids=[c[0] for c in UNDEFINED])
def test_undefined_lenient(text: str, variables: dict[str, str], expected: str, undefined: tuple[str, ...]) -> None:
    assert substitute(text, variables) == SubstitutionResult(expected, undefined)


@pytest.mark.parametrize(("text", "variables", "expected", "undefined"), UNDEFINED, ids=[c[0] for c in UNDEFINED])
def test_undefined_strict(text: str, variables: dict[str, str], expected: str, undefined: tuple[str, ...]) -> None:
    if undefined:
        with pytest.raises(SubstitutionError, match=r"variable not set \(strict mode\)"):
            substitute(text, variables, strict=True)
    else:
        assert substitute(text, variables, strict=True) == SubstitutionResult(expected, ())


def test_strict_reports_first_missing_in_evaluation_order() -> None:
    with pytest.raises(SubstitutionError, match=r'"first"'):
        substitute("${first} ${second}", {}, strict=True)


# -- parse errors fail in both modes -------------------------------------------------------------------------
PARSE_ERRORS = [
    ("${foo", "missing closing brace"),
    ("x: ${", "unable to parse variable name"),
    ("${}", "unable to parse variable name"),
    ("${ foo}", "unable to parse variable name"),
    ("${foo bar}", "missing closing brace"),
    ("${foo.bar}", "missing closing brace"),
    ("${foo-bar}", "missing closing brace"),  # `-` without colon is not parsed
    ("${v-default}", "missing closing brace"),
    ("${v+alt}", "missing closing brace"),
    ("${v?err}", "missing closing brace"),
    ("${AUTH[@]}", "missing closing brace"),
    ("${#}", "bad substitution"),
    ("${##}", "bad substitution"),
    ("${#v:1}", "bad substitution"),
    ("${v#}", "unable to parse substitution within function"),
    ("${v%}", "unable to parse substitution within function"),
    ("${v:}", "unable to parse substitution within function"),
    ("${v::2}", "unable to parse substitution within function"),
    ("${v:1:}", "unable to parse substitution within function"),
    ("${v:1x${y}}", "bad substitution"),
    ("${v:é}", "bad substitution"),  # multi-byte rune after ":" trips the scanner's unread
    ("${v^^^}", "bad substitution"),
    ("${v//}", "bad substitution"),
    ("${v/a}", "bad substitution"),
    ("${v:=abc", "unable to parse substitution within function"),
    ("ok ${a} then ${b", "missing closing brace"),
]


@pytest.mark.parametrize(("text", "message"), PARSE_ERRORS, ids=[c[0] for c in PARSE_ERRORS])
@pytest.mark.parametrize("strict", [False, True])
def test_parse_errors(text: str, message: str, strict: bool) -> None:
    with pytest.raises(SubstitutionError, match=re.escape(message)):
        substitute(text, {"v": "x", "a": "A"}, strict=strict)
    with pytest.raises(SubstitutionError, match=re.escape(message)):
        find_references(text)


def test_parse_error_names_the_offset() -> None:
    with pytest.raises(SubstitutionError, match=r"at offset 13$"):
        substitute("ok ${a} then ${b", {"a": "A"})


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    text = "${a:-" * 5000 + "x" + "}" * 5000
    with pytest.raises(SubstitutionError, match="nested too deeply"):
        substitute(text, {"a": "A"})


# -- unicode ----------------------------------------------------------------------------------------------
UNICODE = [
    ({"v": "héllo"}, "${#v}", "6"),  # bytes, as Go's len()
    ({"v": "日本"}, "${#v}", "6"),
    ({"v": "héllo"}, "${v:3}", "llo"),  # byte offset 3 is after "hé"
    ({"v": "héllo"}, "${v:0:3}", "hé"),
    ({"v": "élan"}, "${v^}", "Élan"),
    ({"v": "straße"}, "${v^^}", "STRAßE"),  # Go's simple mapping keeps ß
    ({"v": "ᾳ"}, "${v^^}", "ᾼ"),  # simple mapping, not Python's full "ΑΙ"
    ({"v": "ΑΣ"}, "${v,,}", "ασ"),  # no final-sigma rule
    ({"v": "İx"}, "${v,}", "ix"),
    ({"v": "ÉTÉ"}, "${v,,}", "été"),
    ({"v": "été"}, "${v//é/e}", "ete"),
    ({"v": "été"}, "${v/#é/E}", "Eté"),
    ({"v": "日本語"}, "${v#日}", "本語"),
    ({"v": "日本語"}, "${v%語}", "日本"),
    ({"v": "aé"}, "${v%?}", "a\ufffd"),  # `?` eats one byte; the rune reversal turns the rest into U+FFFD
    ({}, "${v:-日本}", "日本"),
    ({"v": "ü"}, "ünï ${v} ©", "ünï ü ©"),
]


@pytest.mark.parametrize(("variables", "text", "expected"), UNICODE, ids=[c[1] for c in UNICODE])
def test_unicode(variables: dict[str, str], text: str, expected: str) -> None:
    assert substitute(text, variables).text == expected


@pytest.mark.parametrize("text", ["${v:1}", "${v:0:1}", "${v#?}"])
def test_cutting_a_multibyte_character_fails(text: str) -> None:
    # Go produces invalid UTF-8 here, which YAMLToJSON in kustomize-controller then rejects.
    with pytest.raises(SubstitutionError, match="UTF-8"):
        substitute(text, {"v": "éa"})


# -- find_references ---------------------------------------------------------------------------------------
REFERENCES = [
    ("${a}", [("a", False, "${a}", 0)]),
    ("x ${a} y", [("a", False, "${a}", 2)]),
    ("$${a}", []),
    ("$$${a}", [("a", False, "${a}", 2)]),
    ("$a $HOME $(x) $1", []),
    ("no refs", []),
    ("${#a}", [("a", False, "${#a}", 0)]),
    ("${a^^} ${a,}", [("a", False, "${a^^}", 0), ("a", False, "${a,}", 7)]),
    ("${a:1:2}", [("a", False, "${a:1:2}", 0)]),
    ("${a##*/}", [("a", False, "${a##*/}", 0)]),
    ("${a//x/y}", [("a", False, "${a//x/y}", 0)]),
    (r"${a/\//-}", [("a", False, r"${a/\//-}", 0)]),
    ("${a=d}", [("a", True, "${a=d}", 0)]),
    ("${a:=d}", [("a", True, "${a:=d}", 0)]),
    ("${a:-d}", [("a", True, "${a:-d}", 0)]),
    ("${a:?d}", [("a", True, "${a:?d}", 0)]),
    ("${a:+d}", [("a", True, "${a:+d}", 0)]),
    ("${a:-${b}}", [("a", True, "${a:-${b}}", 0), ("b", False, "${b}", 5)]),
    ("${a:-${b:=${c}}}", [("a", True, "${a:-${b:=${c}}}", 0), ("b", True, "${b:=${c}}", 5), ("c", False, "${c}", 10)]),
    ("${a//${b}/${c}}", [("a", False, "${a//${b}/${c}}", 0), ("b", False, "${b}", 5), ("c", False, "${c}", 10)]),
    ("$${a=${b}}", [("b", False, "${b}", 5)]),
    ("é ${a}", [("a", False, "${a}", 2)]),  # character offsets, not bytes
    ("${héllo}", [("héllo", False, "${héllo}", 0)]),
    ("${v/a} b/c}", [("v", False, "${v/a} b/c}", 0)]),
    ("k: ${A}\n---\nj: ${B:-x}", [("A", False, "${A}", 3), ("B", True, "${B:-x}", 15)]),
]


@pytest.mark.parametrize(("text", "expected"), REFERENCES, ids=[c[0] for c in REFERENCES])
def test_find_references(text: str, expected: list[tuple[str, bool, str, int]]) -> None:
    refs = find_references(text)
    assert refs == [VarRef(*ref) for ref in expected]
    for ref in refs:
        assert text[ref.offset : ref.offset + len(ref.expression)] == ref.expression


def test_has_default_agrees_with_strict_mode() -> None:
    # has_default is exactly "does strict mode tolerate this name being unset".
    for text, _ in REFERENCES:
        for ref in find_references(text):
            if not ref.has_default:
                with pytest.raises(SubstitutionError):
                    substitute(ref.expression, {}, strict=True)


def test_var_ref_is_frozen() -> None:
    ref = VarRef("a", False, "${a}", 0)
    with pytest.raises(AttributeError):
        ref.name = "b"  # type: ignore[misc]


# -- variable names ------------------------------------------------------------------------------------
NAMES = [
    ("cluster_name", True),
    ("_x", True),
    ("A1", True),
    ("_", True),
    ("1a", False),
    ("a-b", False),
    ("a.b", False),
    ("a b", False),
    ("", False),
    ("héllo", False),  # [:alpha:] in Go's RE2 is ASCII only
    ("A\n", False),  # Go's `$` is end of text; Python's `$` would also match before "\n"
]


@pytest.mark.parametrize(("name", "valid"), NAMES, ids=[repr(c[0]) for c in NAMES])
def test_check_variable_names(name: str, valid: bool) -> None:
    assert check_variable_names({name: "v", "ok": "v"}) == ([] if valid else [name])
    assert bool(VAR_NAME.fullmatch(name)) is valid


def test_check_variable_names_sorted() -> None:
    assert check_variable_names({"z-z": "", "ok": "", "1a": "", "a.b": ""}) == ["1a", "a.b", "z-z"]


# -- fast path -----------------------------------------------------------------------------------------------
def test_fast_path_matches_full_path() -> None:
    # No "${": only `$$` collapsing applies; the answer must equal the full parser's.
    text = "a: $$HOME $x $$$ end\n" * 3
    assert substitute(text, {"x": "1"}) == SubstitutionResult(text.replace("$$", "$"), ())
    assert substitute(text + "${x}", {"x": "1"}).text == text.replace("$$", "$") + "1"
