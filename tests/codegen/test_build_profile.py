"""The build profile (kiln.codegen.build_profile): stages add up, a unit's gcc seconds are shared among its
kernels by bytes^1.5, and the profile survives model.json's round trip."""

from __future__ import annotations

import json

import pytest

from kiln.codegen.build_profile import BuildProfile, UnitBuild


def _profile() -> BuildProfile:
    p = BuildProfile()
    p.add("lower", 1.0)
    p.add("lower", 0.5)
    p.note_unit(UnitBuild("compile", (("kiln_body_a", 100), ("kiln_body_b", 400)), 50, 9.0, False))
    p.note_unit(UnitBuild("compile", (("kiln_body_c", 10),), 50, 0.0, True))
    p.note_unit(UnitBuild("link", (), 0, 0.25, False))
    return p


def test_stages_sum_and_kernels_share_their_unit_by_bytes_to_the_1_5():
    p = _profile()
    assert p.stages == {"lower": 1.5, "compile": 9.0, "link": 0.25}
    (b, bb, bs), (a, ab, as_), (c, _, cs) = p.kernels()
    assert (b, a, c) == ("kiln_body_b", "kiln_body_a", "kiln_body_c") and (bb, ab) == (400, 100)
    assert bs == pytest.approx(8.0) and as_ == pytest.approx(1.0) and cs == 0.0  # 400^1.5 = 8 x 100^1.5
    text = "\n".join(p.lines())
    assert "translation units: 2 (1 from the cache)" in text and "cached" in text and "link" in text


def test_json_round_trip():
    p = _profile()
    again = BuildProfile.from_json(json.loads(json.dumps(p.to_json())))
    assert again.stages == p.stages and again.units == p.units
