"""Moving between AReaL's PRM stack and ours, checked against a STAND-IN of AReaL's module layout.

`areal_standin/` (see its README) holds a few modules written from the signatures of AReaL's
public files; AReaL itself cannot be installed here. Each check runs in a fresh interpreter with
the stand-in on PYTHONPATH, because whether `areal.reward.prm` imports is decided at import time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import prm_distill.scorer as scorer_package

REPO_ROOT = Path(scorer_package.__file__).resolve().parents[2]
STANDIN = Path(__file__).resolve().parent / "areal_standin"
INTERNALS = STANDIN / "internals"  # AReaL's cache, interaction type and stats_tracker; no areal.reward.prm
AREAL_PRM = STANDIN / "prm"  # AReaL's areal.reward.prm (contract classes and a host runner)


def _run_with(roots: list[Path], code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, roots), str(REPO_ROOT)])}
    return subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _assert_ok(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "ok"


def test_our_scorers_subclass_arealss_classes_and_run_inside_its_runner_unchanged():
    # Both ways at once: AReaL's runner drives our LengthBudgetScorer from an AReaL config entry,
    # and our runner accepts AReaL's result classes.
    done = _run_with(
        [INTERNALS, AREAL_PRM],
        """
        import asyncio
        import torch
        import areal.reward.prm as areal_prm
        from areal.experimental.openai.cache import InteractionCache
        from areal.experimental.openai.types import InteractionWithTokenLogpReward
        from areal.utils import stats_tracker
        import prm_distill.scorer as ours

        assert ours.USING_AREAL
        assert ours.BaseScorer is areal_prm.BaseScorer
        assert issubclass(ours.LengthBudgetScorer, areal_prm.BaseScorer)

        class Response:
            def __init__(self, n):
                self.input_tokens, self.output_tokens = [1, 2], list(range(10, 10 + n))
                self.output_len = n

        def turn(turn_id, n):
            t = InteractionWithTokenLogpReward(model_response=Response(n), reward=1.0, messages=[])
            t.interaction_id = turn_id
            return t

        async def main():
            # AReaL's runner, AReaL's config entry, our scorer class by its dotted path.
            config = areal_prm.PRMConfig(scorers=[{"path": "prm_distill.scorer.LengthBudgetScorer", "weight": 0.5,
                                                    "kwargs": {"max_output_tokens": 2}}])
            cache = InteractionCache.from_dict({"short": turn("short", 2), "long": turn("long", 3)})
            results = await areal_prm.PRMRunner(config).run(cache)
            assert cache["short"].token_rewards.tolist() == [0.5, 0.5]
            assert cache["long"].token_rewards.tolist() == [0.0, 0.0, 0.0]
            assert [r.observations[0].value for r in results] == [True, False]
            assert stats_tracker.export_all()["rollout/prm_turn_reward/length_budget"] == 0.25

            # Our runner with AReaL's classes: results are AReaL's types.
            runner = await ours.PRMRunner.create(ours.PRMConfig(scorers=[ours.LengthBudgetScorer(max_output_tokens=2)]))
            t = ours.Interaction(interaction_id="t", model_response=ours.ModelResponse(output_tokens=[1, 2]))
            (result,) = await runner.run([t])
            assert isinstance(result, areal_prm.PRMTurnResult)
            assert isinstance(result.observations[0], areal_prm.PRMMetricObservation)
            await runner.aclose()  # the stand-in's base has no aclose, like older AReaL: nothing to call

        asyncio.run(main())
        print("ok")
        """,
    )
    _assert_ok(done)


def test_our_runner_on_arealss_cache_commits_through_it_and_bridges_metrics():
    done = _run_with(
        [INTERNALS],
        """
        import asyncio
        import torch
        from areal.experimental.openai.cache import InteractionCache
        from areal.experimental.openai.types import InteractionWithTokenLogpReward
        from areal.utils import stats_tracker
        import prm_distill.scorer as ours

        assert not ours.USING_AREAL  # no areal.reward.prm on the path: our classes

        class Response:
            input_tokens, output_tokens, output_len = [1], [2, 3], 2

        def turn(turn_id, parent=None, branch="a"):
            t = InteractionWithTokenLogpReward(model_response=Response(), reward=0.0, parent=parent,
                                               messages=[{"role": "user", "content": branch}],
                                               output_message_list=[{"role": "assistant", "content": turn_id}])
            t.interaction_id = turn_id
            return t

        class Tagger(ours.BaseScorer):
            name = "tagger"
            async def evaluate(self, interaction, ctx):
                interaction.output_message_list[0]["content"] += "!"  # a misbehaving scorer edits its input
                return 1.0 if ctx["messages"][0]["content"] == "a" else -1.0

        async def main():
            runner = ours.PRMRunner(ours.PRMConfig(scorers=[Tagger()]))

            # 1. A pre-built tensor dict is invalidated by the commit (set_token_rewards).
            single = turn("single")
            cache = InteractionCache.from_dict({"single": single})
            assert "token_rewards" not in single.to_tensor_dict()
            await runner.run(cache, {"messages": [{"role": "user", "content": "a"}]})
            assert single.to_tensor_dict()["token_rewards"].tolist() == [[0.0, 1.0, 1.0]]
            metrics = stats_tracker.export_all()
            assert metrics["rollout/prm_turn_reward/tagger"] == 1.0
            assert metrics["rollout/prm_turn_reward/tagger__count"] == 1
            assert "rollout/prm_trajectory_reward/tagger" not in metrics  # only branch scoring writes it

            # 2. AReaL's branch export: clones with reset caches and own messages; stats unpublished.
            root = turn("root")
            root_dict = root.to_tensor_dict()
            a, b = turn("a", parent=root, branch="a"), turn("b", parent=root, branch="b")
            scored, stats = await ours.score_prm_branches({"a": a, "b": b}, runner, session_id="s", is_eval=False)
            assert scored["a"].parent.token_rewards.tolist() == [1.0, 1.0]
            assert scored["b"].parent.token_rewards.tolist() == [-1.0, -1.0]
            assert scored["a"].parent.to_tensor_dict() is not root_dict
            assert root._cache is root_dict and root.token_rewards is None
            assert root.output_message_list[0]["content"] == "root"  # the caller's messages are untouched
            assert stats.trajectory_rewards == [("tagger", 2.0), ("tagger", -2.0)]
            assert stats_tracker.export_all() == {}
            stats.record(is_eval=True)
            metrics = stats_tracker.export_all()
            assert metrics["eval-rollout/prm_trajectory_reward/tagger"] == 0.0
            assert metrics["eval-rollout/prm_trajectory_reward/tagger__count"] == 2
            assert metrics["eval-rollout/prm_turn_reward/tagger__count"] == 4

        asyncio.run(main())
        print("ok")
        """,
    )
    _assert_ok(done)


@pytest.mark.slow
def test_the_distilled_scorer_runs_inside_arealss_runner_unchanged(tiny_checkpoint):
    done = _run_with(
        [INTERNALS, AREAL_PRM],
        f"""
        import asyncio
        import areal.reward.prm as areal_prm
        from areal.experimental.openai.cache import InteractionCache
        from areal.experimental.openai.types import InteractionWithTokenLogpReward
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained({str(tiny_checkpoint)!r})
        text = "Mia has 3 apples.\\n\\nShe buys 4 more, so 3 + 4 = 7.\\n\\nThe answer is 7."

        class Response:
            input_tokens = [1, 2]
            output_tokens = tok.encode(text, add_special_tokens=False)
            output_len = len(output_tokens)

        t = InteractionWithTokenLogpReward(model_response=Response(), reward=1.0,
                                           messages=[{{"role": "user", "content": "Mia has 3 apples and buys 4."}}],
                                           output_message_list=[{{"role": "assistant", "content": text}}])
        t.interaction_id = "t"

        async def main():
            config = areal_prm.PRMConfig(scorers=[{{"path": "prm_distill.scorer.DistilledPRMScorer", "kwargs": {{
                "model": {str(tiny_checkpoint)!r}, "policy_tokenizer": {str(tiny_checkpoint)!r}, "device": "cpu"}}}}])
            runner = areal_prm.PRMRunner(config)
            assert isinstance(runner.scorers[0], areal_prm.BaseScorer)
            cache = InteractionCache.from_dict({{"t": t}})
            await runner.run(cache, {{"messages": t.messages + t.output_message_list}})
            rewards = cache["t"].token_rewards
            assert rewards.shape == (Response.output_len,)
            assert ((rewards >= 0) & (rewards <= 1)).all()  # process_weighted: P(good) per step's tokens
            await runner.scorers[0].aclose()

        asyncio.run(main())
        print("ok")
        """,
    )
    _assert_ok(done)


def test_an_areal_without_prm_falls_back_to_ours(tmp_path):
    # e.g. areal 1.0.4 from PyPI: the package exists, `areal.reward.prm` does not.
    (tmp_path / "areal" / "reward").mkdir(parents=True)
    (tmp_path / "areal" / "__init__.py").write_text("")
    (tmp_path / "areal" / "reward" / "__init__.py").write_text("")
    done = _run_with(
        [tmp_path],  # -W error::RuntimeWarning: a silent fallback, no warning
        """
        import prm_distill.scorer as s
        assert not s.USING_AREAL and s.BaseScorer.__module__ == 'prm_distill.scorer.base'
        print('ok')
        """,
    )
    _assert_ok(done)


@pytest.mark.parametrize(
    "module_body",
    [
        "raise OSError('libcudart.so.12: cannot open shared object file')",
        "import a_dependency_areal_forgot_xyz",
        "BaseScorer = object  # an older layout without the other names",
    ],
)
def test_an_areal_prm_that_fails_to_import_warns_and_falls_back(tmp_path, module_body):
    package = tmp_path / "areal" / "reward" / "prm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(module_body + "\n")
    done = _run_with(
        [tmp_path],
        """
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import prm_distill.scorer as s
        assert not s.USING_AREAL and s.BaseScorer.__module__ == 'prm_distill.scorer.base'
        (warning,) = [w for w in caught if issubclass(w.category, RuntimeWarning)]
        assert "areal.reward.prm is installed but failed to import" in str(warning.message), warning.message
        print('ok')
        """,
    )
    _assert_ok(done)


def test_our_runner_runs_arealss_own_prm_config_with_typed_entries():
    # AReaL's PRMConfig (no commit_scope) holding AReaL's typed PRMScorerConfig entries.
    done = _run_with(
        [INTERNALS],
        """
        import asyncio
        from areal.api.cli_args import PRMConfig, PRMScorerConfig
        import prm_distill.scorer as ours

        config = PRMConfig(scorers=[PRMScorerConfig(path="prm_distill.scorer.LengthBudgetScorer", weight=0.5,
                                                    kwargs={"max_output_tokens": 2})])
        turn = ours.Interaction(interaction_id="t", model_response=ours.ModelResponse(output_tokens=[1, 2]))
        runner = ours.PRMRunner(config)
        asyncio.run(runner.run([turn]))
        assert turn.token_rewards.tolist() == [0.5, 0.5]
        print("ok")
        """,
    )
    _assert_ok(done)
