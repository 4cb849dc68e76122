"""One episode's context as the policy reads it: the task's words through the policy's tokenizer and chat template.

An agent talks to a chat model in messages, and the server renders them with the model's chat template before it
tokenizes; Agent Lightning records the token ids of what the model saw. So when the policy's tokenizer has a chat
template (a local model folder, :mod:`agl_lab.training.local_model`), every call's prompt is the conversation so far
rendered by that template: the task's prompt as the first user message, each response as the assistant's message,
each observation (``no try``) as the next user message, and a rewritten context as a new conversation. Whether the
next prompt then begins with the previous prompt and response token for token is up to the template and the
tokenizer, as with a real server: the trajectory-level aggregator merges the turns where it does, and starts a new
row where it does not.

Without a chat template (the lab's tiny word-level policy, a finished run's ``policy/``), the context is the task's
plain text: the prompt, then each response and observation appended as tokens, so every turn continues the last.
"""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

__all__ = ["Conversation"]


class Conversation:
    """The token ids of one episode's next prompt (:attr:`ids`), kept as the episode goes on."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, prompt: str) -> None:
        self._tokenizer = tokenizer
        self._chat = bool(getattr(tokenizer, "chat_template", None))
        self.restart(prompt)

    def restart(self, prompt: str) -> None:
        """A new context that does not continue the old one (the task rewrote it)."""
        self._messages = [{"role": "user", "content": prompt}]
        self.ids = self._render() if self._chat else self._encode(prompt)

    def answer(self, response_ids: list[int], observation: str) -> None:
        """The policy said ``response_ids``, the environment answered ``observation``: the context goes on."""
        if self._chat:
            response = self._tokenizer.decode(response_ids, skip_special_tokens=True)
            self._messages += [{"role": "assistant", "content": response}, {"role": "user", "content": observation}]
            self.ids = self._render()
        else:
            self.ids = [*self.ids, *response_ids, *self._encode(observation)]

    def _render(self) -> list[int]:
        # rendered as text, then tokenized without special tokens, as an OpenAI-compatible server does
        text = self._tokenizer.apply_chat_template(self._messages, tokenize=False, add_generation_prompt=True)
        return self._encode(text)

    def _encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False)
