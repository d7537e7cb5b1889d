"""An RL controller: an LSTM policy that writes architectures one decision at a time, trained by REINFORCE.

Zoph & Le 2017, "Neural Architecture Search with Reinforcement Learning", section 3.1-3.2, made
asynchronous as their parameter-server setup is (section 3.3): asks never wait for an update.

- The policy is an LSTM cell (weights uniform in [-0.08, 0.08], as in the paper). Step ``i`` feeds the
  embedding of the previous action, and a softmax over the options of decision ``i`` in
  :meth:`~nas.SearchSpace.encode` order chooses the next action (``temperature`` divides the logits).
- Each ask samples a full action sequence with the current policy and keeps it under the trial id;
  each tell turns the score into a reward and stores ``(actions, reward - baseline)``.
- The baseline is an exponential moving average of past rewards (``baseline_decay``). Advantages are
  divided by a running standard deviation of the rewards, so one learning rate fits spaces whose scores
  are accuracies in [0, 1] and spaces whose scores are in the tens (a deviation from the paper, which
  only had accuracies).
- Every ``batch`` rewards the policy takes one Adam step on
  ``-mean(advantage * log p(actions)) - entropy_weight * mean(entropy)``.
- A FAILED trial gives no reward: its actions are dropped.

All randomness comes from one ``torch.Generator`` seeded from the strategy seed (torch's global RNG is
never used); its state, the policy and the optimizer are in :meth:`state_dict`. The controller is tiny
(hidden size 32 by default) and runs on one CPU thread (torch's setting is restored after each call),
so an ask costs a few hundred microseconds and an update a few milliseconds.

>>> from nas.search_spaces.toy import ToySpace, toy_score
>>> from nas.core.types import Result, TrialState
>>> rl = RLController(ToySpace(), batch=4, seed=0)
>>> t = rl.ask()
>>> ToySpace().validate(t.arch)
>>> rl.tell(t, Result(t.trial_id, TrialState.COMPLETE, score=toy_score(t.arch)))
>>> rl.rewards_seen
1
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

from nas.core.registry import register_strategy
from nas.core.space import SearchSpace
from nas.core.strategy import Strategy, check_fraction, check_positive_int, one_torch_thread
from nas.core.types import Result, Trial

# torch is imported where the controller is made and used (its policy lives in rl_policy): listing the
# strategies, or checking a name, imports no torch


@register_strategy("rl")
class RLController(Strategy):
    """Options: ``lr`` (Adam, default 0.01), ``baseline_decay`` (EMA of rewards, default 0.9),
    ``entropy_weight`` (default 0.01), ``batch`` (rewards per policy update, default 10),
    ``temperature`` (softmax temperature when sampling, default 1.0), ``hidden`` (LSTM size, 32)."""

    def __init__(
        self,
        space: SearchSpace,
        *,
        seed: int | None = None,
        lr: float = 0.01,
        baseline_decay: float = 0.9,
        entropy_weight: float = 0.01,
        batch: int = 10,
        temperature: float = 1.0,
        hidden: int = 32,
    ) -> None:
        super().__init__(space, seed=seed)
        if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
            raise ValueError(f"lr must be a number > 0, got {lr!r}")
        if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
            raise ValueError(f"temperature must be a number > 0, got {temperature!r}")
        self.lr, self.temperature = float(lr), float(temperature)
        self.baseline_decay = check_fraction("baseline_decay", baseline_decay, high=0.999999)
        self.entropy_weight = check_fraction("entropy_weight", entropy_weight, high=math.inf)
        self.batch = check_positive_int("batch", batch)
        self.hidden = check_positive_int("hidden", hidden)
        import torch

        from nas.strategies.rl_policy import Policy

        self.generator = torch.Generator().manual_seed(int(self.rng.integers(2**62)))
        self.policy = Policy(space.cardinalities, self.hidden)
        self.policy.init_uniform(self.generator)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=self.lr)
        self.pending: dict[int, list[int]] = {}  # trial id -> sampled actions
        self.buffer: list[tuple[list[int], float]] = []  # (actions, advantage) awaiting an update
        self.baseline: float | None = None
        self.reward_var = 0.0
        self.rewards_seen = 0
        self.updates = 0

    def ask(self) -> Trial:
        import torch

        with torch.no_grad(), one_torch_thread():
            _, actions = self.policy.logits(None, generator=self.generator, temperature=self.temperature)
        acts = [int(a) for a in actions[0]]
        trial = self.trial(self.space.decode(acts))
        self.pending[trial.trial_id] = acts
        return trial

    def tell(self, trial: Trial, result: Result) -> None:
        acts = self.pending.pop(trial.trial_id, None)
        if acts is None or not result.ok or result.score is None:
            return  # a failed candidate gives no reward
        reward = float(result.score)
        self.rewards_seen += 1
        if self.baseline is None:
            self.baseline = reward
        d = self.baseline_decay
        advantage = reward - self.baseline
        self.reward_var = d * self.reward_var + (1 - d) * advantage**2
        self.baseline = d * self.baseline + (1 - d) * reward
        self.buffer.append((acts, advantage / (math.sqrt(self.reward_var) + 1e-8)))
        if len(self.buffer) >= self.batch:
            self._update()

    def warm_start(self, trial: Trial, result: Result) -> None:
        """A finished trial of an earlier run (:mod:`nas.run.warmstart`): its reward and actions join the
        REINFORCE batches as the controller's own do. Off-policy (another policy sampled them): the update
        still moves probability toward architectures that beat the baseline, which is what a warm start is for."""
        self.pending[trial.trial_id] = self.space.encode(trial.arch)
        self.tell(trial, result)

    def _update(self) -> None:
        with one_torch_thread():
            self._reinforce()

    def _reinforce(self) -> None:
        """One REINFORCE step on the buffered (actions, advantage) pairs."""
        import torch

        actions = torch.tensor([a for a, _ in self.buffer], dtype=torch.long)
        adv = torch.tensor([v for _, v in self.buffer], dtype=torch.float32)
        logits, _ = self.policy.logits(actions, batch=len(self.buffer), temperature=self.temperature)
        logp = torch.zeros(len(self.buffer))
        entropy = torch.zeros(len(self.buffer))
        for i, step in enumerate(logits):
            log_probs = torch.log_softmax(step, -1)
            logp = logp + log_probs.gather(1, actions[:, i : i + 1]).squeeze(1)
            entropy = entropy - (log_probs.exp() * log_probs).sum(-1)
        loss = -(adv * logp).mean() - self.entropy_weight * entropy.mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.buffer.clear()
        self.updates += 1

    def probabilities(self, arch: Mapping[str, Any] | None = None) -> list[list[float]]:
        """Per decision, the policy's option probabilities along the path of ``arch`` (teacher-forced),
        or along the most likely option at each step when ``arch`` is None (for inspection and tests)."""
        import torch

        given = None if arch is None else self.space.encode(arch)
        with torch.no_grad(), one_torch_thread():
            x, state, out = self.policy.start, None, []
            for i in range(len(self.policy.cardinalities)):
                state = self.policy.cell(x, state)
                p = torch.softmax(self.policy.heads[i](state[0]) / self.temperature, -1)
                out.append(p[0].tolist())
                a = p.argmax(-1) if given is None else torch.tensor([given[i]])
                x = self.policy.embed[i](a)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "generator": self.generator.get_state().clone(),
            "policy": copy.deepcopy(self.policy.state_dict()),
            "optimizer": copy.deepcopy(self.optimizer.state_dict()),
            "pending": {k: list(v) for k, v in self.pending.items()},
            "buffer": [(list(a), v) for a, v in self.buffer],
            "baseline": self.baseline, "reward_var": self.reward_var,
            "rewards_seen": self.rewards_seen, "updates": self.updates,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.generator.set_state(state["generator"])
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.pending = {int(k): list(v) for k, v in state["pending"].items()}
        self.buffer = [(list(a), float(v)) for a, v in state["buffer"]]
        self.baseline = state["baseline"]
        self.reward_var = float(state["reward_var"])
        self.rewards_seen = int(state["rewards_seen"])
        self.updates = int(state["updates"])
