"""A custom tool's Lark grammar written as the pattern of its language (``api/lark_grammar.py``):
the pattern accepts exactly the grammar's sentences, and what cannot be a pattern (recursion,
``%ignore``, unknown names, what llguidance's own reader refuses) is a LarkError saying why."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopwire.api.lark_grammar import LarkError, to_pattern

# Codex's apply_patch grammar, as its custom tool sends it.
PATCH = r'''start: begin_patch hunk+ end_patch
begin_patch: "*** Begin Patch" LF
end_patch: "*** End Patch" LF?

hunk: add_hunk | delete_hunk | update_hunk
add_hunk: "*** Add File: " filename LF add_line+
delete_hunk: "*** Delete File: " filename LF
update_hunk: "*** Update File: " filename LF change_move? change?

filename: /(.+)/
add_line: "+" /(.*)/ LF -> line

change_move: "*** Move to: " filename LF
change: (change_context | change_line)+ eof_line?
change_context: ("@@" | "@@ " /(.+)/) LF
change_line: ("+" | "-" | " ") /(.*)/ LF
eof_line: "*** End of File" LF

%import common.LF
'''


def test_the_apply_patch_grammar_accepts_patches_and_nothing_else():
    rx = re.compile(to_pattern(PATCH))
    add = '*** Begin Patch\n*** Add File: a/b.py\n+print("hi") \\ "quoted"\n+\n*** End Patch\n'
    update = ("*** Begin Patch\n*** Update File: x.txt\n*** Move to: y.txt\n@@ def f():\n-    return 1\n+    return 2\n"
              " context\n*** End of File\n*** Delete File: z\n*** End Patch")
    assert rx.fullmatch(add) and rx.fullmatch(update)
    for bad in ("*** Begin Patch\n*** End Patch\n", add.replace("+print", "print"), add + "trailing",
                "*** Begin Patch\n*** Delete File: \n*** End Patch\n"):
        assert not rx.fullmatch(bad), bad


WORDS = st.text(alphabet="abcxyz", min_size=1, max_size=6)
SENTENCES = st.tuples(st.sampled_from(["GET", "get", "Put"]), st.lists(WORDS, min_size=1, max_size=3),
                      st.sampled_from(['"', "\\", "\n", ""]), st.integers(0, 9))
LANGUAGE = ('start: VERB " " path (END | "") DIGIT\nVERB: "get"i | "put"i\npath: WORD ("/" WORD)~0..2\n'
            'WORD: /[a-z]+/\nEND: "\\"" | "\\\\" | LF\nDIGIT: "0".."9"\n%import common.LF\n')
SPOKEN = re.compile(to_pattern(LANGUAGE))


@settings(deadline=None)
@given(SENTENCES)
def test_every_sentence_of_the_grammar_matches(sentence):
    verb, parts, end, digit = sentence
    assert SPOKEN.fullmatch(f"{verb} {'/'.join(parts)}{end}{digit}")


@settings(deadline=None)
@given(st.text(alphabet='getpuGETPU /abcxyz"\\\n0123456789', max_size=16))
def test_the_pattern_and_an_independent_reading_agree(text):
    independent = re.fullmatch(r'(?i:get|put) [a-z]+(/[a-z]+){0,2}("|\\|\n)?[0-9]', text)
    assert bool(SPOKEN.fullmatch(text)) == bool(independent)


@pytest.mark.parametrize(("grammar", "says"), [
    ('start: "(" start ")" | "x"', "recursive"),
    ("start: a\na: b\nb: a", "recursive (a -> b -> a)"),
    ("start: greeting", "unknown name"),
    ('start: "a"\n%ignore " "', "%ignore"),
    ('start: "a" WS\n%import common.WHITESPACE_X -> WS', "common.WHITESPACE_X"),
    ("start: /a(?=b)/", "look-around"),
    ('rule: "a"', "start"),
    ('start: "ab".."c"', "range"),
])
def test_what_no_pattern_can_hold_is_refused_saying_why(grammar, says):
    with pytest.raises(LarkError) as e:
        to_pattern(grammar)
    assert says in str(e.value)
