"""sweeper/space/overrides.py: override text that reads back as written, through Hydra's parser and
then OmegaConf, as a trial's command line is read (train/trial/pinned.py)."""

from __future__ import annotations

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from sweeper.space.overrides import format_override, hydra_quote


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (4, "k.x=4"),
        (-1, "k.x=-1"),
        (0.001, "k.x=0.001"),
        (1e-05, "k.x=1e-05"),
        (True, "k.x=true"),
        (False, "k.x=false"),
        (None, "k.x=null"),
        ("default", "k.x=default"),
        ("none", "k.x=none"),
        ("max-autotune-no-cudagraphs", "k.x=max-autotune-no-cudagraphs"),
        ("/data/tiny", "k.x=/data/tiny"),
        ("true", "k.x='true'"),
        ("3", "k.x='3'"),
        ("null", "k.x='null'"),
        ("1e-4", "k.x='1e-4'"),
        ("a,b", "k.x='a,b'"),
        ("choice(a)", "k.x='choice(a)'"),
        (" pad", "k.x=' pad'"),
        ("it's", "k.x='it\\'s'"),
        ("a=b", "k.x='a=b'"),
        ("${x}", "k.x='\\${x}'"),
    ],
)
def test_format_override(value, text):
    assert format_override("k.x", value) == text
    parsed = OverridesParser.create().parse_overrides([text])[0]
    assert not parsed.is_sweep_override()
    got = OmegaConf.create({"v": parsed.value()}).v
    assert got == value and type(got) is type(value)


def test_format_override_refuses_containers():
    with pytest.raises(ValueError, match=r"k.x: overrides take scalars, got list"):
        format_override("k.x", [1, 2])


@pytest.mark.parametrize(
    "value",
    [
        "/tmp/plain/job-1.0",
        "rel/dir",
        "/tmp/my jobs/lr=3e-4/trial",
        "/tmp/a:b,c/[x]{y}",
        "/tmp/it's/here",
        "/tmp/back\\slash\\",
        "/tmp/quote\\'s",
        "/tmp/${oc.env:HOME}/x",
        "/tmp/\\${x}",
        "/tmp/ünï cödé #!~&*?|",
        "123",
        "null",
        "true",
    ],
)
def test_hydra_quote_round_trips_through_hydra_and_omegaconf(value):
    override = OverridesParser.create().parse_override(f"trial.out={hydra_quote(value)}")
    assert override.key_or_group == "trial.out"
    assert OmegaConf.create({"v": override.value()}).v == value
