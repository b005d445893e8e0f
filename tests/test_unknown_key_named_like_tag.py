"""An unknown key spelt like a distribution tag is reported as the unknown key it is."""

import shutil

from agentsim.engine.loading import load_scenario
from agentsim.errors import InputError
from tests.conftest import ROOT


def test_top_level_key_named_like_a_distribution_tag(tmp_path):
    text = (ROOT / "scenarios" / "coding-agents.yaml").read_text()
    path = tmp_path / "s.yaml"
    path.write_text(text.replace("seed: 42", "seed: 42\nlognormal: 3", 1))
    shutil.copytree(ROOT / "fits", tmp_path.parent / "fits", dirs_exist_ok=True)
    try:
        load_scenario(path)
    except InputError as exc:
        message = str(exc)
    else:
        raise AssertionError("an unknown top-level key was accepted")
    assert "unknown key 'lognormal'" in message
