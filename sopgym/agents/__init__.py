"""Message-level model agents for the episode runner: chat models behind an OpenAI-compatible server
(:mod:`.openai_chat`, the official ``openai`` SDK) or in this process (:mod:`.hf_local`, the trainer's
batched sampler), wrapped by :class:`.chat.ChatAgent`; tools rendered into the system message for
servers and templates without tool support (:mod:`.tool_prompt`); GGUF checkpoints (:mod:`.gguf`).

Optional dependencies load only with the module that needs them: ``openai`` in :mod:`.openai_chat`,
torch and transformers in :mod:`.hf_local` and :mod:`.gguf`. Token-exact training episodes are the
trainer's business (``sopgym.trainers.rollout``); these agents speak messages.
"""

from .chat import (
    HISTORY_FORMS,
    TOOLS_MODES,
    ChatAgent,
    ChatModel,
    ChatRequest,
    Completion,
    Prices,
    RequestFailed,
    ServerRefused,
    history_messages,
)
from .tool_prompt import render_tools, with_tools_in_system

__all__ = [
    "ChatAgent", "ChatModel", "ChatRequest", "Completion", "RequestFailed", "ServerRefused", "Prices",
    "history_messages", "render_tools", "with_tools_in_system", "TOOLS_MODES", "HISTORY_FORMS",
]
