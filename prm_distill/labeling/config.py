"""Settings of a labeling job (YAML in configs/label.yaml, overridable as key=value).

One primary `judge` plus optional extra `judges` vote together; the arithmetic verifier can join
them. Pointing the job at a strong judge is one line: `judge.base_url=... judge.model=...`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..generate import BACKENDS as POLICY_BACKENDS, DEFAULT_INSTRUCTION, PolicyConfig
from ..steps import SplitConfig

MODES = ("prefix", "trajectory", "first_error")
BACKENDS = ("openai", "local", "vllm", "montecarlo", "reference")
MC_SEARCHES = ("all", "binary")
ESTIMATES = ("soft", "hard")
CONSENSUS_RULES = ("step", "first_error")
CONSENSUS_VALUES = ("hard", "montecarlo", "judge", "mean")
VERDICTS = ("free", "constrained")
NAME_REFERENCE = "reference"
ANCHOR_RULES = ("drop_wrong_all_good", "zero_last_step_if_wrong")


@dataclass
class JudgeConfig:
    """One LLM judge: where it runs and how it samples."""

    backend: str = field(default="openai", metadata={"help": "openai (any OpenAI-compatible /v1 endpoint: vLLM, SGLang, llama.cpp, hosted) | local (in-process transformers) | vllm (offline vllm.LLM batch generation) | montecarlo (Math-Shepherd: n completions of each step prefix from judge.policy; the label is the share (soft) or any (hard) that reach the gold answer; needs an `answer` on every rollout) | reference (a rule, no model: the first step deriving a value unsupported by the gold worked solution `reference` is 0 on a wrong answer; needs `reference` and `answer` on every rollout)."})
    name: str = field(default="", metadata={"help": "Name in reports and the response cache; empty = backend:model."})
    base_url: str = field(default="http://127.0.0.1:8000/v1", metadata={"help": "OpenAI-compatible base URL ending in /v1 (backend=openai)."})
    model: str = field(default="smollm2", metadata={"help": "Model name sent to the endpoint (openai), or backbone name/folder for local and vllm ('smollm2' = the embedded SmolLM2-135M-Instruct)."})
    api_key_env: str = field(default="PRM_JUDGE_API_KEY", metadata={"help": "Environment variable holding the API key (sent as a Bearer token; never logged or written)."})
    concurrency: int = field(default=8, metadata={"help": "Most requests in flight at once (openai)."})
    batch_size: int = field(default=8, metadata={"help": "Prompts per generate call (local)."})
    timeout_s: float = field(default=120.0, metadata={"help": "Per-request timeout in seconds (openai)."})
    max_retries: int = field(default=3, metadata={"help": "Retries of one request on 429, 5xx, timeouts and connection errors before the job stops."})
    backoff_s: float = field(default=0.5, metadata={"help": "First retry delay in seconds; doubles each retry (a Retry-After header wins)."})
    temperature: float = field(default=0.2, metadata={"help": "Sampling temperature: low, for stable verdicts (vLLM rejects n>1 at 0, so votes use distinct seeds)."})
    max_tokens: int = field(default=256, metadata={"help": "Most generated tokens per answer (trajectory mode gets this times the number of steps, capped at 4x)."})
    seed: int = field(default=0, metadata={"help": "Base seed: vote v, attempt a uses seed + v + 1000 * a."})
    device: str = field(default="cpu", metadata={"help": "Device for the local backend (cpu, cuda, auto)."})
    policy: str = field(default="smollm2", metadata={"help": "montecarlo: the policy completing step prefixes (model folder or hub name; with policy_backend=openai the served model name at base_url)."})
    policy_backend: str = field(default="auto", metadata={"help": "montecarlo: auto (vllm when importable, else transformers) | transformers | vllm | openai (base_url; the server must support continue_final_message, as vLLM and SGLang do)."})
    n: int = field(default=8, metadata={"help": "montecarlo: completions per step prefix (the votes of this judge; `votes` is ignored for it)."})
    estimate: str = field(default="soft", metadata={"help": "montecarlo: soft (share of completions reaching the gold answer) | hard (1 if any does, else 0)."})
    mc_search: str = field(default="all", metadata={"help": "montecarlo: all (sample every step prefix) | binary (OmegaPRM: on a rollout whose answer is wrong, binary-search the first prefix from which no completion reaches the gold answer, ceil(log2(steps)) prefixes instead of steps - 1; steps before it carry the estimate of the next sampled prefix, it 0, later steps null; a rollout whose answer is right samples nothing and is all 1)."})
    vllm: dict[str, Any] = field(default_factory=dict, metadata={"help": "backend=vllm (and montecarlo with policy_backend=vllm): extra vllm.LLM(...) arguments, e.g. {tensor_parallel_size: 2, data_parallel_size: 2}."})
    instruction: str = field(default=DEFAULT_INSTRUCTION, metadata={"help": "montecarlo: text after the question in the policy's prompt (keep it equal to the rollout's)."})
    verdict: str = field(default="free", metadata={"help": "local backend: free (generate a reason, then a score) | constrained (no reason: sample the verdict from the model's probabilities of the allowed answers, e.g. 'Score: 0|0.5|1'; always valid and much faster, prefix and first_error modes only)."})

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"judge.backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.concurrency < 1 or self.batch_size < 1 or self.max_tokens < 1 or self.max_retries < 0:
            raise ValueError("judge: concurrency, batch_size, max_tokens >= 1 and max_retries >= 0 are required")
        if self.timeout_s <= 0 or self.backoff_s < 0 or self.temperature < 0:
            raise ValueError("judge: timeout_s > 0, backoff_s >= 0 and temperature >= 0 are required")
        if self.verdict not in VERDICTS:
            raise ValueError(f"judge.verdict must be one of {VERDICTS}, got {self.verdict!r}")
        if self.policy_backend not in POLICY_BACKENDS:
            raise ValueError(f"judge.policy_backend must be one of {POLICY_BACKENDS}, got {self.policy_backend!r}")
        if self.estimate not in ESTIMATES:
            raise ValueError(f"judge.estimate must be one of {ESTIMATES}, got {self.estimate!r}")
        if self.n < 1:
            raise ValueError("judge.n >= 1 is required")
        if self.mc_search not in MC_SEARCHES:
            raise ValueError(f"judge.mc_search must be one of {MC_SEARCHES}, got {self.mc_search!r}")
        if self.verdict == "constrained" and self.backend != "local":
            raise ValueError("judge.verdict=constrained needs judge.backend=local (it reads the model's probabilities)")
        if not self.name:
            self.name = NAME_REFERENCE if self.reference else f"{self.backend}:{self.policy if self.montecarlo else self.model}"

    @property
    def montecarlo(self) -> bool:
        return self.backend == "montecarlo"

    @property
    def reference(self) -> bool:
        """The rule-based reference-guided judge: no requests, one vote per step it labels."""
        return self.backend == "reference"

    @property
    def votes_per_step(self) -> int | None:
        """Requests per step for a Monte-Carlo judge (n), None for an LLM judge (the job's `votes`)."""
        return self.n if self.montecarlo else None

    def policy_config(self) -> PolicyConfig:
        """The policy this judge samples from: the one mapping of the flat `judge.*` keys onto a
        `PolicyConfig` (local = transformers, vllm, openai; montecarlo: `policy` on `policy_backend`)."""
        backend = {"local": "transformers", "vllm": "vllm", "openai": "openai"}.get(self.backend, self.policy_backend)
        return PolicyConfig(policy=self.policy if self.montecarlo else self.model, backend=backend, base_url=self.base_url,
                            api_key_env=self.api_key_env, device=self.device, batch_size=self.batch_size, concurrency=self.concurrency,
                            timeout_s=self.timeout_s, max_retries=self.max_retries, backoff_s=self.backoff_s,
                            instruction=self.instruction, vllm=dict(self.vllm))

    def step_votes(self, votes: int) -> int:
        """Most votes this judge casts on one step: one estimate (Monte-Carlo), one rule verdict (reference), else `votes`."""
        return 1 if self.montecarlo or self.reference else votes


@dataclass
class VerifierConfig:
    """The rule-based arithmetic verifier judge ("LLM + verifier")."""

    enabled: bool = field(default=False, metadata={"help": "Check arithmetic statements (a + b = c, a x b = c, a / b = c, a - b = c) in every step. It refutes and never confirms: a false statement makes the step 0 (veto) or adds a 0 vote; true arithmetic adds no vote (a wrong operand or operation can be computed correctly)."})
    veto: bool = field(default=True, metadata={"help": "A step with a false statement gets label 0 whatever the LLM votes say (hard evidence beats opinions)."})
    alone: bool = field(default=False, metadata={"help": "Use the verifier as the only labeler (no LLM requests): a step with false arithmetic is 0, one whose statements all hold 1 (the only case where it confirms), one without checkable arithmetic stays unsupervised."})

    @property
    def active(self) -> bool:
        return self.enabled or self.alone


@dataclass
class NegativesConfig:
    """Hard negatives added beside the labelled records (each with provenance in metadata)."""

    padded_rate: float = field(default=0.0, metadata={"help": "Share of records that also yield a padded copy with redundant or wandering steps inserted (those steps labelled 0)."})
    error_rate: float = field(default=0.0, metadata={"help": "Share of records that also yield a copy with a small injected numeric error (that step 0, later steps unsupervised)."})
    max_inserted: int = field(default=2, metadata={"help": "Most steps inserted into one padded copy."})
    seed: int = field(default=0, metadata={"help": "Seed of the choice (stable per record id, so a resumed job makes the same negatives)."})

    def __post_init__(self) -> None:
        if not (0 <= self.padded_rate <= 1 and 0 <= self.error_rate <= 1) or self.max_inserted < 1:
            raise ValueError("negatives: rates in [0, 1] and max_inserted >= 1 are required")


@dataclass
class AnchorConfig:
    """Answer anchoring: check the final answer against the gold `answer` with math-verify."""

    enabled: bool = field(default=False, metadata={"help": "Check final answers of records that carry an `answer` (needs the math-verify package)."})
    rules: list[str] = field(default_factory=lambda: ["drop_wrong_all_good"], metadata={"help": f"Consensus rules: {', '.join(ANCHOR_RULES)} (drop: the final answer is wrong but every judged step is good; zero: a wrong final answer makes the last step 0)."})
    good_threshold: float = field(default=0.5, metadata={"help": "A step label >= this counts as judged good (drop_wrong_all_good)."})

    def __post_init__(self) -> None:
        bad = [r for r in self.rules if r not in ANCHOR_RULES]
        if bad:
            raise ValueError(f"anchor.rules: unknown {bad}; known: {ANCHOR_RULES}")


@dataclass
class ConsensusConfig:
    """Consensus filtering (the Qwen PRM recipe): keep a label only where Monte-Carlo and the LLM judges agree."""

    enabled: bool = field(default=False, metadata={"help": "Needs one judge with backend=montecarlo and at least one LLM judge; a step where they disagree stays unsupervised (null)."})
    rule: str = field(default="step", metadata={"help": "step (each step kept where both sides call it good, or both bad) | first_error (a record keeps its labels only where both place the first error at the same step, or both find none)."})
    threshold: float = field(default=0.5, metadata={"help": "A label >= this counts as good, on both sides."})
    value: str = field(default="hard", metadata={"help": "Label of a kept step: hard (1 or 0, the side both agree on) | montecarlo (its estimate) | judge (the LLM judges' mean vote) | mean (of the two)."})

    def __post_init__(self) -> None:
        if self.rule not in CONSENSUS_RULES:
            raise ValueError(f"consensus.rule must be one of {CONSENSUS_RULES}, got {self.rule!r}")
        if self.value not in CONSENSUS_VALUES:
            raise ValueError(f"consensus.value must be one of {CONSENSUS_VALUES}, got {self.value!r}")
        if not 0 < self.threshold <= 1:
            raise ValueError(f"consensus.threshold must be in (0, 1], got {self.threshold}")


@dataclass
class LabelJobConfig:
    """`prm-distill label`: rollouts in, labelled records + summary out."""

    input: str = field(default="", metadata={"help": "Rollouts JSONL: id, question, and steps or response; optional answer, outcome, metadata."})
    output: str = field(default="runs/label", metadata={"help": "Output folder: labels-*.jsonl shards, summary.json, cache/."})
    mode: str = field(default="prefix", metadata={"help": "prefix (one request per step: problem + earlier steps + the step) | trajectory (one request per solution, every step judged in order) | first_error (the judge names the first wrong step)."})
    votes: int = field(default=3, metadata={"help": "Votes per step (per judge), each a separate request with its own seed."})
    min_valid_votes: int = field(default=2, metadata={"help": "A step with fewer valid votes (all judges together) stays unsupervised (label null); capped at the most votes a step can get."})
    max_invalid_retries: int = field(default=2, metadata={"help": "Re-asks of a vote whose answer could not be parsed; each invalid answer is counted, never coerced."})
    judge: JudgeConfig = field(default_factory=JudgeConfig, metadata={"help": "The primary judge."})
    judges: list[JudgeConfig] = field(default_factory=list, metadata={"help": "Further judges voting together with the primary one (per-judge agreement is reported)."})
    verifier: VerifierConfig = field(default_factory=VerifierConfig, metadata={"help": "Arithmetic verifier."})
    splitter: SplitConfig = field(default_factory=SplitConfig, metadata={"aliases": ("split",), "help": "Step splitter bounds for inputs given as `response` (the shared splitter; rollout and the RL scorer must use the same)."})
    negatives: NegativesConfig = field(default_factory=NegativesConfig, metadata={"help": "Hard negatives."})
    anchor: AnchorConfig = field(default_factory=AnchorConfig, metadata={"help": "Answer anchoring."})
    consensus: ConsensusConfig = field(default_factory=ConsensusConfig, metadata={"help": "Monte-Carlo / LLM-judge consensus filtering."})
    shard_size: int = field(default=32, metadata={"help": "Records per output shard; a shard is committed atomically when all its records are labelled."})
    limit: int | None = field(default=None, metadata={"help": "Label at most this many rollouts (null = all)."})
    progress: bool = field(default=True, metadata={"help": "Show a progress bar (rate, ETA, tokens in/out) on stderr."})

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.votes < 1 or self.min_valid_votes < 1 or self.max_invalid_retries < 0 or self.shard_size < 1:
            raise ValueError("votes, min_valid_votes, shard_size >= 1 and max_invalid_retries >= 0 are required")
        if self.mode == "trajectory" and any(j.verdict == "constrained" for j in self.all_judges()):
            raise ValueError("judge.verdict=constrained supports mode=prefix and mode=first_error, not trajectory")
        names = [j.name for j in self.all_judges()]
        if len(set(names)) != len(names):
            raise ValueError(f"judge names must be distinct (set judge.name / judges[i].name), got {names}")
        if self.consensus.enabled:
            mc = [j for j in self.all_judges() if j.montecarlo]
            if len(mc) != 1 or len(mc) == len(self.all_judges()):
                raise ValueError("consensus.enabled needs exactly one judge with backend=montecarlo and at least one LLM judge "
                                 f"(got {len(mc)} Monte-Carlo of {len(self.all_judges())} judges)")

    def all_judges(self) -> list[JudgeConfig]:
        """The LLM judges that vote (none when the verifier labels alone)."""
        return [] if self.verifier.alone else [self.judge, *self.judges]
