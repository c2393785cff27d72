"""Settings of a labeling job (YAML in configs/label.yaml, overridable as key=value).

One primary `judge` plus optional extra `judges` vote together; the arithmetic verifier can join
them. Pointing the job at a strong judge is one line: `judge.base_url=... judge.model=...`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..steps import SplitConfig

MODES = ("prefix", "trajectory", "first_error")
BACKENDS = ("openai", "local", "vllm")
VERDICTS = ("free", "constrained")
ANCHOR_RULES = ("drop_wrong_all_good", "zero_last_step_if_wrong")


@dataclass
class JudgeConfig:
    """One LLM judge: where it runs and how it samples."""

    backend: str = field(default="openai", metadata={"help": "openai (any OpenAI-compatible /v1 endpoint: vLLM, SGLang, llama.cpp, hosted) | local (in-process transformers) | vllm (offline vllm.LLM batch generation)."})
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
        if self.verdict == "constrained" and self.backend != "local":
            raise ValueError("judge.verdict=constrained needs judge.backend=local (it reads the model's probabilities)")
        if not self.name:
            self.name = f"{self.backend}:{self.model}"


@dataclass
class VerifierConfig:
    """The rule-based arithmetic verifier judge ("LLM + verifier")."""

    enabled: bool = field(default=False, metadata={"help": "Check arithmetic statements (a + b = c, a x b = c, a / b = c, a - b = c) in every step and add the verdict as a vote."})
    veto: bool = field(default=True, metadata={"help": "A step with a false statement gets label 0 whatever the LLM votes say (hard evidence beats opinions)."})
    alone: bool = field(default=False, metadata={"help": "Use the verifier as the only judge (no LLM requests): steps without checkable arithmetic stay unsupervised."})

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
    split: SplitConfig = field(default_factory=SplitConfig, metadata={"help": "Step splitter bounds for inputs given as `response`."})
    negatives: NegativesConfig = field(default_factory=NegativesConfig, metadata={"help": "Hard negatives."})
    anchor: AnchorConfig = field(default_factory=AnchorConfig, metadata={"help": "Answer anchoring."})
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

    def all_judges(self) -> list[JudgeConfig]:
        """The LLM judges that vote (none when the verifier labels alone)."""
        return [] if self.verifier.alone else [self.judge, *self.judges]
