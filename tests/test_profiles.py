"""profiles.yaml holds only differences: no profile sets a parameter to its chapter's ``Params`` default
(the one place defaults live), so changing a default changes every profile that does not say otherwise."""
from __future__ import annotations

import importlib

import pytest

from datajourney.book import registry, runner


def _defaults(ch) -> dict:
    return importlib.import_module(ch.module.rsplit(".", 1)[0] + ".params").Params().as_dict()


@pytest.mark.parametrize("ch", [c for c in registry.available() if c.module], ids=lambda c: c.name)
def test_no_profile_repeats_a_default(ch):
    defaults = _defaults(ch)
    repeats = [f"{profile}: {name} = {value!r}"
               for profile, chapters in runner.profiles().items()
               for name, value in ((chapters or {}).get(ch.name) or {}).items()
               if name in defaults and defaults[name] == value]
    assert not repeats, (f"{runner.PROFILES_FILE.name} repeats {ch.name}'s Params defaults (delete these "
                         "entries): " + "; ".join(repeats))


def test_every_profile_names_every_chapter():
    """An empty entry ({}) says the chapter runs with its defaults under that profile."""
    names = {c.name for c in registry.available()}
    for profile, chapters in runner.profiles().items():
        assert names <= set(chapters or {}), (profile, sorted(names - set(chapters or {})))
