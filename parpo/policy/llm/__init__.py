"""The LLM policy backend (``backend: llm``): a Hugging Face causal LM that writes one JSON tool call
per turn, trained with PARPO on whole episodes and served by the same API.

============================  ===========================================================
module                        holds
============================  ===========================================================
``config``                    ``LLMPolicyConfig`` (model, engine, budgets, LoRA), ``LLMTrainConfig``
``profile``                   the profile summary read from the reward model's interest side
``prompt``                    the messages' text: rules + action JSON Schema, request, tool results
``conversation``              one episode as one token sequence; context cuts
``parse``                     text -> typed action, or the text for the env's invalid-call path
``engine``                    rollout engines (``ENGINES``: ``hf``), per-row seeded sampling
``vllm_engine``               the ``vllm`` engine (extra ``vllm``, imported lazily)
``workers``                   Ray rollout workers (``rollout.workers``, extra ``ray``)
``sync``                      the probe-sequence check after every weight sync
``constrain``                 constrained decoding: token masks that keep each call a valid action
``logprobs``                  padded episode batches, the trainer's token log-probs
``model``                     loading, saving, LoRA and the base model's sha256 check
``policy``                    ``LLMPolicy`` (the ``Policy`` interface)
``rollout``, ``trainer``      episodes as samples; the PARPO update and training loop
============================  ===========================================================

transformers and peft are imported only when a model is loaded (``pip install 'parpo[llm]'``).
"""

from parpo.policy.llm.config import LLMPolicyConfig, LLMTrainConfig

__all__ = ["LLMPolicyConfig", "LLMTrainConfig"]
