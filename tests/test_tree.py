"""Walking config trees: leaves of DictConfigs and dicts, key paths, nesting dotted keys back."""

from omegaconf import OmegaConf

from agl_lab.config.tree import INTERPOLATION, leaves, nest, paths


def test_leaves_of_a_dict_keep_empty_mappings_as_values():
    assert leaves({"a": {"b": 1, "c": {}}, "d": [1, 2]}) == [("a.b", 1), ("a.c", {}), ("d", [1, 2])]


def test_leaves_of_a_dictconfig_mark_interpolations_and_nulls():
    cfg = OmegaConf.create({"a": {"b": 1, "c": "${a.b}"}, "n": None, "s": {"x": None}})
    assert leaves(cfg) == [("a.b", 1), ("a.c", INTERPOLATION), ("n", None), ("s.x", None)]


def test_paths_list_sections_and_keys():
    assert paths(OmegaConf.create({"a": {"b": 1}, "c": 2})) == ["a", "a.b", "c"]


def test_nest_inverts_leaves():
    tree = {"a": {"b": 1, "c": {"d": None}}, "e": "x"}
    assert nest(dict(leaves(tree))) == tree
    assert nest({"a.b": 1, "a": {"c": 2}}) == {"a": {"b": 1, "c": 2}}
