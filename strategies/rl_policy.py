"""The RL controller's policy (:mod:`nas.strategies.rl`): an LSTM that emits one decision of the architecture
per step, in a module of its own so that the controller's module imports torch only when a controller is made."""

from __future__ import annotations

import torch
from torch import nn


class Policy(nn.Module):
    """LSTM controller: one embedding table and one softmax head per decision."""

    def __init__(self, cardinalities: list[int], hidden: int) -> None:
        super().__init__()
        self.cardinalities = cardinalities
        # skip_init: no draws from torch's global RNG; the caller initialises from its own generator
        self.cell = nn.utils.skip_init(nn.LSTMCell, hidden, hidden)
        self.start = nn.Parameter(torch.empty(1, hidden))
        self.embed = nn.ModuleList(nn.utils.skip_init(nn.Embedding, n, hidden) for n in cardinalities)
        self.heads = nn.ModuleList(nn.utils.skip_init(nn.Linear, hidden, n) for n in cardinalities)

    def init_uniform(self, generator: torch.Generator, scale: float = 0.08) -> None:
        with torch.no_grad():
            for p in self.parameters():
                p.uniform_(-scale, scale, generator=generator)

    def logits(self, actions: torch.Tensor | None, batch: int = 1,
               generator: torch.Generator | None = None, temperature: float = 1.0
               ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Logits of every step. With ``actions`` (batch, steps) given they are teacher-forced;
        otherwise the actions are sampled (with ``generator``) and returned."""
        x = self.start.expand(batch, -1)
        state: tuple[torch.Tensor, torch.Tensor] | None = None
        out, taken = [], []
        for i in range(len(self.cardinalities)):
            state = self.cell(x, state)
            logits = self.heads[i](state[0]) / temperature
            if actions is None:
                a = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator).squeeze(1)
            else:
                a = actions[:, i]
            out.append(logits)
            taken.append(a)
            x = self.embed[i](a)
        return out, torch.stack(taken, 1)
