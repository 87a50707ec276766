"""Episodes in token space: sampled ids kept as sampled, environment messages rendered by the chat template.

Shape legend: T = tokens of one episode.

Bookkeeping (token in, token out):

* The prompt (system + user + tool schemas) is the chat template of the first messages with the
  generation prompt; ``loss_mask`` 0.
* An assistant turn appends the ids the policy sampled, exactly, with their sampling log-probs;
  ``loss_mask`` 1. Its message content, for the template, is the decoded sampled text.
* After the turn, the environment's new messages (tool results or feedback) are rendered as the
  text suffix ``template(messages[:n+k], generation prompt) - template(messages[:n])`` plus the
  template's closing scaffolding of the assistant turn that the policy did not sample (e.g. the ``\\n``
  after ``<|im_end|>``, or ``<|im_end|>`` itself when the turn was cut by ``max_new_tokens``). Only that
  suffix text is tokenised; ``loss_mask`` 0. Prefix checks raise ``TemplatePrefixError`` when a template
  rewrites earlier turns (e.g. templates that drop reasoning of past turns), so such templates are
  reported rather than silently mis-trained.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sopgym.policy.end_of_turn import end_of_turn_ids

SYSTEM_TURNS = ("keep", "drop")
"""What the model is shown of an env's system turn (``model.system_turn``); must equal config's (tested)."""


def check_system_turn(system_turn: str) -> None:
    """Raise ``ValueError`` unless ``system_turn`` is one of ``SYSTEM_TURNS``."""
    if system_turn not in SYSTEM_TURNS:
        raise ValueError(f"system_turn: expected 'keep' or 'drop', got {system_turn!r}")


def shown_chat(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
               system_turn: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """A chat's first messages and tool schemas as the model is shown them: as they are (``keep``), or
    without the system message and the tool schemas, which the chat template renders into the system
    turn (``drop``: the chat starts at the case). The messages are copies.

    Raises:
        ValueError: ``system_turn`` is neither.
    """
    check_system_turn(system_turn)
    if system_turn == "drop":
        return [dict(m) for m in messages if m["role"] != "system"], None
    return [dict(m) for m in messages], tools


class TemplatePrefixError(RuntimeError):
    """The chat template rendered an earlier part of the chat differently once more messages were added."""


@dataclass
class Episode:
    task_id: str
    group_id: int
    seed: int
    env_id: str
    ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    old_logp: list[float] = field(default_factory=list)
    """Behaviour log-prob of each policy token (0.0 elsewhere): the sampler's until the trainer
    recomputes it with its own forward before the update (``optimise.recompute_behaviour_logprobs``)."""
    sampler_logp: list[float] = field(default_factory=list)
    """The sampler's log-prob of each policy token, as recorded at sampling time (0.0 elsewhere)."""
    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] | None = None
    reward: float = 0.0
    """The return: every step's reward summed, shaping included."""
    shaping: float = 0.0
    """The part of ``reward`` that is shaping: every step's ``shaping/*`` reward components summed (the
    invalid-reply penalty, the turn cost; see sopgym/envs/reward.py)."""
    reward_components: dict[str, float] = field(default_factory=dict)
    success: bool = False
    status: str = "OK"
    truncation_cause: str | None = None
    """None, or the record's cause (:data:`sopgym.status.TRUNCATION_CAUSES`: ``max_turns``,
    ``context_budget`` from the env or the trainer, ``turn_time``, ``episode_time``; ``sandbox``;
    a harness's ``end_episode`` cause)."""
    infrastructure_failure: bool = False
    num_turns: int = 0
    token_cap_hits: int = 0
    """Turns cut by ``max_new_tokens`` (or by the remaining context)."""
    turn_versions: list[int] = field(default_factory=list)
    """The weight version each sampled turn came from, in order (the RL steps the learner had taken
    when the engine sampled it: sopgym/trainers/rollout_stream.py); empty when the generator names none."""
    invalid_actions: int = 0
    tool_failures: int = 0
    done: bool = False
    episode_info: dict[str, Any] = field(default_factory=dict)
    advantage: float = 0.0

    @property
    def num_policy_tokens(self) -> int:
        return sum(self.loss_mask)

    @property
    def outcome(self) -> float:
        """The task's own reward, without shaping (``reward - shaping``): with ``reward: binary`` the
        evaluator's task success. Group advantages divide by its spread and the zero-variance filter
        reads it (rollout_metrics.assign_advantages), so a shaping penalty keeps its own scale."""
        return self.reward - self.shaping


class EpisodeBuilder:
    """Appends turns to an ``Episode`` with the tokenizer's chat template.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template.
        episode: the episode to fill; its ``messages`` and ``tools`` must hold the initial chat.
        stop_ids: the ids that end a sampled turn (pass the sampler's ``stop_ids``); default
            ``end_of_turn_ids(tokenizer)``.
    """

    def __init__(self, tokenizer, episode: Episode, stop_ids: set[int] | frozenset[int] | None = None):
        self.tok = tokenizer
        self.ep = episode
        self.stop_ids = frozenset(stop_ids) if stop_ids is not None else end_of_turn_ids(tokenizer)
        self._rendered = ""  # template text of ep.ids so far (the prefix later renders must keep)
        self._awaiting_turn = True  # ep.ids end with the generation prompt of an assistant turn
        self._stop_text = ""  # text of the id that ended the last sampled turn (see _consume_stop)
        text = self._render(episode.messages, generation_prompt=True)
        self._append_text(text)
        self._rendered = text

    def _render(self, messages: list[dict[str, Any]], generation_prompt: bool) -> str:
        return self.tok.apply_chat_template(
            messages, tools=self.ep.tools or None, tokenize=False, add_generation_prompt=generation_prompt
        )

    def _append_text(self, text: str) -> None:
        ids = self.tok(text, add_special_tokens=False)["input_ids"]
        self.ep.ids.extend(ids)
        self.ep.loss_mask.extend([0] * len(ids))
        self.ep.old_logp.extend([0.0] * len(ids))
        self.ep.sampler_logp.extend([0.0] * len(ids))

    def _body(self, sampled_ids: list[int]) -> list[int]:
        """The sampled ids without the end-of-turn id that ended them (if one did)."""
        return list(sampled_ids[:-1]) if sampled_ids and sampled_ids[-1] in self.stop_ids else list(sampled_ids)

    def content_of(self, sampled_ids: list[int]) -> str:
        """Message content of a sampled turn: the decoded text without the end-of-turn token."""
        return self.tok.decode(self._body(sampled_ids), skip_special_tokens=False)

    def add_assistant(self, sampled_ids: list[int], logps: list[float]) -> str:
        """Append a sampled turn exactly as sampled; returns its message content (what the env receives)."""
        assert len(sampled_ids) == len(logps)
        body = self._body(sampled_ids)
        content = self.tok.decode(body, skip_special_tokens=False)
        self.ep.ids.extend(sampled_ids)
        self.ep.loss_mask.extend([1] * len(sampled_ids))
        self.ep.old_logp.extend(float(x) for x in logps)
        self.ep.sampler_logp.extend(float(x) for x in logps)
        # The template decides what follows the content; the sampled end-of-turn id is matched against
        # it when the next render is known (_consume_stop).
        self._rendered += content
        self._stop_text = self.tok.decode(sampled_ids[len(body) :], skip_special_tokens=False)
        self._awaiting_turn = False
        self.ep.messages.append({"role": "assistant", "content": content})
        self.ep.num_turns += 1
        return content

    def _consume_stop(self, closed: str) -> None:
        """The sampled end-of-turn id is already in ``ids``: when it is the text the template writes
        after the content (``<|im_end|>``), it stands for that text. When it is another declared end
        (e.g. ``<|endoftext|>`` under a ChatML template), the ids keep it as sampled and the
        template's own closing text follows as context, like after a turn cut by ``max_new_tokens``."""
        if self._stop_text and closed[len(self._rendered) :].startswith(self._stop_text):
            self._rendered += self._stop_text
        self._stop_text = ""

    def add_assistant_text(self, text: str) -> str:
        """Append a turn given as text (SFT demonstrations): tokenised once, plus the end-of-turn token."""
        ids = self.tok(text, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
        return self.add_assistant(ids, [0.0] * len(ids))

    def add_env_messages(self, new_messages: list[dict[str, Any]], expect_more_turns: bool = True) -> None:
        """Append the environment's messages after the last assistant turn (and the generation prompt)."""
        closed = self._render(self.ep.messages, generation_prompt=False)
        if not closed.startswith(self._rendered):
            raise TemplatePrefixError(self._mismatch(closed))
        self._consume_stop(closed)
        self.ep.messages.extend(new_messages)
        full = self._render(self.ep.messages, generation_prompt=expect_more_turns)
        if not full.startswith(closed):
            raise TemplatePrefixError(self._mismatch(full, closed))
        self._append_text(full[len(self._rendered) :])
        self._rendered = full
        self._awaiting_turn = expect_more_turns

    def close(self) -> None:
        """Append the template's closing scaffolding of the last turn so ids == template(final messages).

        An episode ended while awaiting an assistant turn (the harness ended it after the env's
        messages, e.g. no room left for another turn) already equals ``template(final messages,
        add_generation_prompt=True)``: nothing is appended (the prompt's tokens carry loss mask 0).
        """
        if self._awaiting_turn:
            return
        closed = self._render(self.ep.messages, generation_prompt=False)
        if not closed.startswith(self._rendered):
            raise TemplatePrefixError(self._mismatch(closed))
        self._consume_stop(closed)
        if len(closed) > len(self._rendered):
            self._append_text(closed[len(self._rendered) :])
            self._rendered = closed

    def _mismatch(self, text: str, prefix: str | None = None) -> str:
        prefix = self._rendered if prefix is None else prefix
        at = next((i for i, (a, b) in enumerate(zip(prefix, text)) if a != b), min(len(prefix), len(text)))
        return (
            f"chat template is not prefix-consistent at char {at}: "
            f"had {prefix[max(0, at - 40) : at + 40]!r}, re-rendered {text[max(0, at - 40) : at + 40]!r}"
        )


def template_ids(tokenizer, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
    """Reference: tokenise the chat template of a whole message list in one go."""
    text = tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=False, add_generation_prompt=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def template_overhead(tokenizer, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, max_turns: int) -> int:
    """Tokens an episode holds beyond its messages' contents: the prompt's scaffolding and tool
    schemas, plus the scaffolding of ``max_turns`` turns (an assistant message and a tool result each),
    measured with ``tokenizer``'s chat template on ``messages`` (an env's first ones).

    The env's context budget counts contents only, so an episode's ids may exceed ``max_context`` by
    this much; packed rows must hold it (``optim.row_tokens``).
    """

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    def render(msgs: list[dict[str, Any]]) -> int:
        text = tokenizer.apply_chat_template(msgs, tools=tools or None, tokenize=False, add_generation_prompt=True)
        return count(text)

    contents = sum(count(str(m.get("content") or "")) for m in messages)
    prompt = render(messages)
    turn = [{"role": "assistant", "content": "a"}, {"role": "tool", "content": "t"}]
    per_turn = render(messages + turn) - prompt - count("a") - count("t")
    return max(0, prompt - contents) + max_turns * max(0, per_turn)
