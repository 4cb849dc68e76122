"""The diagnostics' eight config values read from the bases' YAML files without verl equal composition's."""

import pytest

from agl_lab.config.bases import BASES
from agl_lab.config.compose import compose_from
from agl_lab.config.diagnostics_settings import DiagnosticsSettings, base_settings


@pytest.mark.parametrize(
    "base", [*BASES, *reversed(BASES)]
)  # both orders: one base's read must not leak into another's
def test_each_bases_settings_read_from_its_files_equal_the_composed_configs(base):
    base_settings.cache_clear()
    # a verl whose packaged defaults move, or a base file that changes, fails here rather than measuring stale values
    composed = DiagnosticsSettings.from_config(compose_from(base), base=base)
    assert base_settings(base) == composed
    assert base_settings(base).cfg is None and composed.config() is composed.cfg


def test_a_composed_dotlist_and_an_unknown_base():
    cfg = compose_from("short-run", dotlist=["algorithm.adv_estimator=rloo", "actor_rollout_ref.rollout.n=4"])
    settings = DiagnosticsSettings.from_config(cfg)
    assert (settings.adv_estimator, settings.mini_batch_rows) == ("rloo", 4 * 4)
    with pytest.raises(ValueError, match=r"unknown base 'short_run': choose from \['agl', 'example', 'short-run'\]"):
        base_settings("short_run")
