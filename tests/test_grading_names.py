"""Names that show alike are found (course.grading.names.skeleton), and names that do not are not.

Each pair below is two folder names a class could hold. A pair that a reader takes for one
name must share a skeleton, so that grading tells the two apart in every output; a pair a
reader tells apart must not, so that no honest student is marked as posing.
"""

from __future__ import annotations

import pytest

from course.grading import names

SHOW_ALIKE = [
    ("Ann", "ann"),  # case
    ("z_victim", "z_victim\u200b"),  # a zero-width space
    ("z_victim", "ｚ_victim"),  # a full-width z
    ("z_victim", "z_v\u0456ctim"),  # a Cyrillic i
    ("paypal", "\u0440aypal"),  # a Cyrillic er
    ("olga", "\u03bflga"),  # a Greek omicron
    ("maria", "rnaria"),  # r and n side by side read as m
    ("Chloé", "Chloe\u0301"),  # é composed, and e with a combining accent
    ("jo  smith", "jo smith"),  # two spaces read as one
]
TOLD_APART = [
    ("Léa", "Lea"),
    ("alice", "bob"),
    ("ann", "anne"),
    ("Ðoré", "Dore"),
    ("student 1", "student 2"),
]


@pytest.mark.parametrize(("one", "other"), SHOW_ALIKE)
def test_names_that_show_alike_share_a_skeleton(one, other):
    assert names.skeleton(one) == names.skeleton(other)
    assert names.alike([one, other]) == {one: [other], other: [one]}


@pytest.mark.parametrize(("one", "other"), TOLD_APART)
def test_names_a_reader_tells_apart_do_not(one, other):
    assert names.skeleton(one) != names.skeleton(other)
    assert names.alike([one, other]) == {}
