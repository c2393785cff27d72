"""Branch cloning and scoring of conversation trees."""

from __future__ import annotations

import asyncio

import pytest
import torch

from prm_distill.scorer import (
    BaseScorer,
    PRMConfig,
    PRMExportStats,
    PRMMetrics,
    PRMRunner,
    clone_branches,
    order_parents_first,
    score_branches,
    score_prm_branches,
)


class MessageCount(BaseScorer):
    """Rewards each turn with the length of the branch's conversation; fails on request."""

    name = "message_count"

    def __init__(self, fail_on: str | None = None) -> None:
        super().__init__()
        self.fail_on = fail_on
        self.contexts: list[list[dict]] = []

    async def evaluate(self, interaction, ctx):
        if interaction.interaction_id == self.fail_on:
            raise RuntimeError(f"cannot judge {self.fail_on}")
        self.contexts.append(ctx["messages"])
        return float(len(ctx["messages"]))


def tree(make_turn):
    """root -> a (leaf); root -> b -> c (leaf)."""
    u0, a0 = {"role": "user", "content": "u0"}, {"role": "assistant", "content": "a-root"}
    root = make_turn("root", n_tokens=2, messages=[u0], token_rewards=torch.tensor([0.5, 0.5]))
    a = make_turn("a", n_tokens=1, parent=root, messages=[u0, a0, {"role": "user", "content": "u1"}])
    b = make_turn("b", n_tokens=1, parent=root, messages=[u0, a0, {"role": "user", "content": "u1'"}])
    c = make_turn(
        "c",
        n_tokens=1,
        parent=b,
        messages=[*b.messages, {"role": "assistant", "content": "a-b"}, {"role": "user", "content": "u2"}],
    )
    return root, a, b, c


def test_shared_ancestors_get_an_independent_score_per_branch(make_turn):
    root, a, b, c = tree(make_turn)
    scorer = MessageCount()
    runner = PRMRunner(PRMConfig(scorers=[scorer]))
    branches = asyncio.run(score_branches([root, a, b, c], runner))

    assert list(branches) == ["a", "c"]
    branch_a, branch_c = branches["a"], branches["c"]
    assert [t.interaction_id for t in branch_a] == ["root", "a"]
    assert [t.interaction_id for t in branch_c] == ["root", "b", "c"]
    # ctx["messages"]: branch a has 3 + 1 messages, branch c has 5 + 1.
    assert branch_a[0].token_rewards.tolist() == [4.5, 4.5]  # existing 0.5 + 4
    assert branch_c[0].token_rewards.tolist() == [6.5, 6.5]  # existing 0.5 + 6
    assert branch_c[2].token_rewards.tolist() == [6.0]
    # Each branch links its own clones.
    assert branch_c[2].parent is branch_c[1] and branch_c[1].parent is branch_c[0]
    assert branch_a[0] is not branch_c[0] and branch_a[1].parent is branch_a[0]
    # The caller's objects are untouched.
    assert root.token_rewards.tolist() == [0.5, 0.5]
    assert all(turn.token_rewards is None for turn in (a, b, c))
    assert c.parent is b and b.parent is root


def test_ctx_messages_are_the_leaf_conversation(make_turn):
    root, a, b, c = tree(make_turn)
    scorer = MessageCount()
    asyncio.run(score_branches([root, a, b, c], PRMRunner(PRMConfig(scorers=[scorer]))))
    assert scorer.contexts[0] == a.messages + a.output_message_list
    assert scorer.contexts[-1] == c.messages + c.output_message_list


def test_a_failing_branch_rejects_the_session_and_publishes_no_metrics(make_turn):
    root, a, b, c = tree(make_turn)
    runner = PRMRunner(PRMConfig(scorers=[MessageCount(fail_on="c")]))
    with pytest.raises(RuntimeError, match="cannot judge c"):
        asyncio.run(score_branches([root, a, b, c], runner))
    assert runner.metrics.summary() == {}  # branch a succeeded, yet nothing is published
    assert root.token_rewards.tolist() == [0.5, 0.5]


def test_metrics_are_published_once_every_branch_succeeded(make_turn):
    runner = PRMRunner(PRMConfig(scorers=[MessageCount()]))
    asyncio.run(score_branches(list(tree(make_turn)), runner))
    # Branch a: turns 4 and 4; branch c: 6, 6, 6.
    assert runner.metrics.summary()["rollout/prm_trajectory_reward/message_count"] == (8 + 18) / 2
    assert runner.metrics.summary()["rollout/prm_turn_reward/message_count"] == 26 / 5


def test_keep_original_returns_unscored_clones(make_turn, caplog):
    root, a, b, c = tree(make_turn)
    runner = PRMRunner(PRMConfig(scorers=[MessageCount(fail_on="c")], error_policy="keep_original"))
    branches = asyncio.run(score_branches([root, a, b, c], runner))
    assert branches["a"][0].token_rewards.tolist() == [0.5, 0.5]  # pre-scoring rewards
    assert branches["a"][1].token_rewards is None and branches["c"][2].token_rewards is None
    assert branches["a"][0] is not root
    assert runner.metrics.summary() == {}
    assert "keep_original" in caplog.text


def test_cancellation_propagates_even_with_keep_original(make_turn):
    class Slow(BaseScorer):
        name = "slow"

        async def evaluate(self, interaction, ctx):
            await asyncio.sleep(3600)

    async def go():
        runner = PRMRunner(PRMConfig(scorers=[Slow()], error_policy="keep_original"))
        scoring = asyncio.create_task(score_branches(list(tree(make_turn)), runner))
        await asyncio.sleep(0.01)
        scoring.cancel()
        with pytest.raises(asyncio.CancelledError):
            await scoring

    asyncio.run(go())


def test_parent_cycles_are_refused(make_turn):
    x = make_turn("x")
    y = make_turn("y", parent=x)
    x.parent = y
    with pytest.raises(ValueError, match="cycle"):
        order_parents_first([x, y])
    z = make_turn("z", parent=y)
    with pytest.raises(ValueError, match="cycle"):
        clone_branches([z])


def test_score_prm_branches_takes_leaves_and_returns_unpublished_stats(make_turn):
    root, a, _, c = tree(make_turn)
    runner = PRMRunner(PRMConfig(scorers=[MessageCount()]))
    scored, stats = asyncio.run(score_prm_branches({"a": a, "c": c}, runner, session_id="s1", is_eval=False))
    assert list(scored) == ["a", "c"] and scored["c"] is not c
    assert scored["c"].parent.parent.token_rewards.tolist() == [6.5, 6.5]  # the root, scored in branch c
    assert scored["a"].parent.token_rewards.tolist() == [4.5, 4.5]
    assert root.token_rewards.tolist() == [0.5, 0.5] and c.token_rewards is None
    assert isinstance(stats, PRMExportStats)
    assert stats.trajectory_rewards == [("message_count", 8.0), ("message_count", 18.0)]
    assert [r.reward for r in stats.turns] == [4.0, 4.0, 6.0, 6.0, 6.0]
    assert runner.metrics.summary() == {}  # the caller publishes once the session succeeded
    sink = PRMMetrics()
    stats.record(is_eval=False, metrics=sink)
    assert sink.summary()["rollout/prm_trajectory_reward/message_count"] == 13.0


def test_score_prm_branches_refuses_a_leaf_under_another_id(make_turn):
    _, a, _, _ = tree(make_turn)
    runner = PRMRunner(PRMConfig(scorers=[MessageCount()]))
    with pytest.raises(ValueError, match="leaf ID mismatch.*mapping key 'x', interaction ID 'a'"):
        asyncio.run(score_prm_branches({"x": a}, runner, session_id="s1", is_eval=False))


def test_clones_own_their_messages(make_turn):
    root, a, _, _ = tree(make_turn)
    (chain,) = clone_branches([root, a]).values()
    chain[0].messages.append({"role": "user", "content": "edited by a scorer"})
    chain[1].output_message_list[0]["content"] = "edited"
    assert len(root.messages) == 1 and a.output_message_list[0]["content"] == "a-a"


def test_run_commits_through_a_container_with_set_token_rewards(make_turn):
    class Cache(dict):
        """A mapping that, like AReaL's InteractionCache, owns how rewards are written."""

        def __init__(self, *args):
            super().__init__(*args)
            self.writes = []

        def set_token_rewards(self, interaction_id, token_rewards):
            self.writes.append(interaction_id)
            self[interaction_id].token_rewards = token_rewards.clone()

    turn = make_turn("t", n_tokens=2)
    cache = Cache({"t": turn})
    asyncio.run(PRMRunner(PRMConfig(scorers=[MessageCount()])).run(cache, {"messages": [1, 2, 3]}))
    assert cache.writes == ["t"] and turn.token_rewards.tolist() == [3.0, 3.0]
