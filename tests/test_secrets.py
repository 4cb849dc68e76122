from agl_lab.config.secrets import MASK, is_secret_key, redact


def test_secret_names():
    for key in (
        "agentlightning.agl_key",
        "trainer.wandb_api_key",
        "x.apiKey",
        "hf_token",
        "db.password",
        "client_secret",
    ):
        assert is_secret_key(key), key
    for key in ("agentlightning.agl_base_url", "algorithm.kl_ctrl", "actor.max_token_len", "tokenizer_path"):
        assert not is_secret_key(key), key


def test_redact_masks_values_and_keeps_empty_ones_visible():
    config = {
        "agentlightning": {"agl_key": "sk-123", "agl_base_url": "http://x"},
        "trainer": {"wandb_api_key": "", "logger": ["console"]},
        "env": [{"OPENAI_API_KEY": "abc"}],
    }
    assert redact(config) == {
        "agentlightning": {"agl_key": MASK, "agl_base_url": "http://x"},
        "trainer": {"wandb_api_key": "", "logger": ["console"]},
        "env": [{"OPENAI_API_KEY": MASK}],
    }
    assert config["agentlightning"]["agl_key"] == "sk-123"  # a copy: the original is untouched
