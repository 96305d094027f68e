"""ZEPO's LLM optimiser behind an OpenAI-compatible server (private; :mod:`jaxrank.judges.server` exports it)."""

from __future__ import annotations

from jaxrank.judges._server_client import _ServerBase
from jaxrank.judges._server_reply import _text


class ServerParaphraser(_ServerBase):
    """ZEPO's LLM optimiser behind an OpenAI-compatible server (the paper used GPT-3.5): proposes paraphrases.

    The same request as the local :class:`~jaxrank.assessment.zepo.Paraphraser` (``request`` with ``[ASPECT]``
    replaced, a blank line, ``"Instruction: "`` and the instruction), sent as a chat message (or, with
    ``endpoint="completions"``, rendered by ``chat_template`` or followed by ``"\n\nParaphrase:"``), one request
    per paraphrase with its own ``seed`` (``seed``, the epoch and the paraphrase's number), so the proposals differ
    from one another (a server need not sample the same twice for one seed: llama.cpp's does not when it reuses
    its cache; the search log keeps the proposals, so a resumed search does not ask again); the retries, the
    key, the concurrency and the counting are the server judges' (:class:`ServerJudge`).

    Args:
        base_url, model: the server and its model, as for :class:`ServerJudge`.
        aspect: the keyword the paraphrases must keep.
        request: the paraphrasing instruction with ``[ASPECT]`` (ZEPO's:
            :data:`jaxrank.assessment.zepo.PARAPHRASE_INSTRUCTION`).
        temperature, top_p: sampling (the paper: 0.9).
        max_new_tokens: longest paraphrase.
        seed: the base of the requests' seeds.
        endpoint: ``"chat"`` (default) or ``"completions"``.
        chat_template: the model's Jinja chat template for the completions endpoint (``None``: a raw prompt).
        timeout: seconds per request, all of it; 120 by default (a paraphrase is up to ``max_new_tokens``
            long, where a judge's answer is one token: :class:`ServerJudge` waits 60). ``jaxrank zepo`` passes
            its ``--timeout`` (default 60) instead.
        api_key_env, max_concurrency, max_retries, backoff, max_backoff, price_per_token: as for
            :class:`ServerJudge`.

    Raises:
        ValueError: a bad URL or option, or a ``request`` without ``[ASPECT]``.
        ServerError: (on use) as for :class:`ServerJudge`.
    """

    def __init__(self, base_url: str, model: str, aspect: str, *, request: str, temperature: float = 0.9,
                 top_p: float = 1.0, max_new_tokens: int = 96, seed: int = 0, endpoint: str = "chat",
                 chat_template: str | None = None, api_key_env: str = "OPENAI_API_KEY", max_concurrency: int = 8,
                 max_retries: int = 5, timeout: float = 120.0, backoff: float = 0.5, max_backoff: float = 8.0,
                 price_per_token=None):
        if endpoint == "auto":
            endpoint = "chat"
        super().__init__(base_url, model, endpoint=endpoint, chat_template=chat_template, system=None,
                         api_key_env=api_key_env, max_concurrency=max_concurrency, max_retries=max_retries,
                         timeout=timeout, backoff=backoff, max_backoff=max_backoff, top_logprobs=1,
                         price_per_token=price_per_token, min_label_mass=0.0, strict=False)
        if "[ASPECT]" not in request:
            raise ValueError("request must hold the placeholder [ASPECT] (ZEPO's PARAPHRASE_INSTRUCTION)")
        if not temperature >= 0 or not 0 < top_p <= 1 or max_new_tokens < 1:
            raise ValueError(f"need temperature >= 0, 0 < top_p <= 1 and max_new_tokens >= 1, got {temperature}, "
                             f"{top_p}, {max_new_tokens}")
        self.aspect, self.request = aspect, request
        self.temperature, self.top_p = float(temperature), float(top_p)
        self.max_new_tokens, self.seed = int(max_new_tokens), int(seed)

    @property
    def endpoint(self) -> str:
        """The endpoint used: ``"chat"`` or ``"completions"``."""
        return self._endpoint

    def prompt(self, instruction: str) -> dict:
        """The paraphrasing request's prompt (chat messages or the completion text)."""
        msg = self.request.replace("[ASPECT]", self.aspect) + "\n\nInstruction: " + instruction
        if self.endpoint == "completions" and self.chat_template is None:
            return {"prompt": msg + "\n\nParaphrase:"}
        return self._wrap(msg)

    def propose(self, instruction: str, n: int, epoch: int) -> list[str]:
        """``n`` sampled paraphrases of ``instruction`` (request ``k`` of epoch ``e`` has seed
        ``seed * 1_000_003 + e * 1_000 + k``)."""
        body = {**self.prompt(instruction), "max_tokens": self.max_new_tokens, "temperature": self.temperature,
                "top_p": self.top_p}
        datas = self.answers([{**body, "seed": self.seed * 1_000_003 + int(epoch) * 1_000 + k} for k in range(n)])
        return [_text(d["choices"][0], self.endpoint).strip().strip('"').strip() for d in datas]
