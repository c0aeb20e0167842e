"""The Go text/template subset of ResourceSets: outputs as Go's text/template with slim-sprig writes them."""

from __future__ import annotations

from typing import Any

import pytest

from bot.engine.render.gotemplate import MAX_STEPS, LimitExceeded, Template, TemplateError, Unsupported, adler32, go_format


@pytest.mark.parametrize(
    "source, inputs, expected",
    [
        ("name: << inputs.tenant >>", {"tenant": "team1"}, "name: team1"),
        ("<< inputs.a.b >>", {"a": {"b": "deep"}}, "deep"),
        # JSON numbers are float64: %v prints whole ones without a point, and 1e+06 from a million on
        ("<< inputs.n >>|<< inputs.big >>|<< inputs.f >>|<< inputs.n | int >>", {"n": 3.0, "big": 1e6, "f": 0.5}, "3|1e+06|0.5|3"),
        ('<< if eq inputs.tenant "team1" >>enabled<< else >>disabled<< end >>', {"tenant": "team2"}, "disabled"),
        ('<< if eq inputs.t "a" >>A<< else if eq inputs.t "b" >>B<< else >>C<< end >>', {"t": "b"}, "B"),
        ("a\n  <<- if true >>\nb\n<<- end >>\n", {}, "a\nb\n"),
        ("<< range $i, $v := inputs.l >>[<< $i >>:<< $v >>]<< end >>", {"l": ["x", "y"]}, "[0:x][1:y]"),
        ("<< range inputs.l >><< . | upper >><< else >>none<< end >>", {"l": []}, "none"),
        ("<< range $k, $v := inputs.m >><< $k >>=<< $v >>;<< end >>", {"m": {"b": "2", "a": "1"}}, "a=1;b=2;"),
        ("<< with inputs.m >><< .name >><< end >>", {"m": {"name": "n"}}, "n"),
        ("<< $x := inputs.t >><< $x >>-<< $x | quote >>", {"t": "v"}, 'v-"v"'),
        ("spec: << inputs.sel | toYaml | nindent 2 >>", {"sel": {"b": [1.0], "a": "x"}}, "spec: \n  a: x\n  b:\n  - 1\n  "),
        ('<< get inputs "name" | default inputs.namespace >>', {"namespace": "team1"}, "team1"),
        ("<< inputs.t | slugify >>", {"t": "Feat/My Branch_1 & Co"}, "feat-my-branch_1-and-co"),
        ('<< replace "/" "-" inputs.b | lower | trunc 5 >>', {"b": "Feat/ABC"}, "feat-"),
        ('<< printf "%s-%v" inputs.a inputs.n >>', {"a": "x", "n": 2.0}, "x-2"),
        ("<< and inputs.a inputs.b >>|<< or inputs.c inputs.a >>|<< not inputs.c >>", {"a": "1", "b": "2", "c": ""}, "2|1|true"),
        ('<< trim "  x " >><< trimPrefix "v" "v1.2" >><< hasPrefix "a" "abc" >>', {}, "x1.2true"),
        ("<< len inputs.l >><< index inputs.l 1 >><< index inputs.m \"k\" >>", {"l": ["a", "b"], "m": {"k": "v"}}, "2bv"),
        ("<</* a comment */>>x << inputs.t >>", {"t": "y"}, "x y"),
        ("<< (inputs).t >><< (dict \"a\" \"b\").a >>", {"t": "p"}, "pb"),
        ("<< toJson inputs.m >>", {"m": {"n": 2.0, "s": "x"}}, '{"n":2,"s":"x"}'),
        ("{{ not a template }}", {}, "{{ not a template }}"),
    ],
)
def test_renders_as_go(source: str, inputs: dict[str, Any], expected: str) -> None:
    assert Template.parse(source).execute(inputs) == expected


@pytest.mark.parametrize(
    "source, inputs, error, text",
    [
        ("<< inputs.missing >>", {"t": "x"}, TemplateError, "map has no entry for key 'missing'"),  # missingkey=error
        ("<< inputs.t >>", None, TemplateError, "nil pointer"),
        ("<< if true >>x", {}, TemplateError, "unexpected EOF"),
        ("<< end >>", {}, TemplateError, "unexpected"),
        ("<< inputs.t", {}, TemplateError, "unclosed action"),
        ('<< fail "no" >>', {}, TemplateError, "no"),
        ("<< semverCompare \">1\" inputs.v >>", {"v": "2"}, Unsupported, "template function semverCompare"),
        ('<< template "x" >>', {}, Unsupported, "template action template"),
        ("<< $y >>", {}, TemplateError, "undefined variable"),
    ],
)
def test_failures_are_typed(source: str, inputs: Any, error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=text):
        Template.parse(source).execute(inputs)


def test_execution_is_bounded() -> None:
    runaway = "<< range $i := 1000 >><< range $j := 1000 >>x<< end >><< end >>"
    with pytest.raises(LimitExceeded, match=f"{MAX_STEPS:,} steps"):
        Template.parse(runaway).execute({})
    with pytest.raises(LimitExceeded, match="nested"):
        Template.parse("<< if true >>" * 100 + "<< end >>" * 100).execute({})


@pytest.mark.parametrize("value, text", [(None, "<nil>"), (True, "true"), (1e21, "1e+21"), (123456.0, "123456"), (0.0001, "0.0001"), (0.00001, "1e-05"), ({"b": 1.0, "a": "x"}, "map[a:x b:1]"), (["a", 2.0], "[a 2]")])
def test_go_format(value: Any, text: str) -> None:
    assert go_format(value) == text


def test_adler32_is_hash_adler32() -> None:
    assert adler32("Wikipedia") == 0x11E60398  # the checksum's textbook example
    assert adler32("") == 1
