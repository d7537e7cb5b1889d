"""The built-in training function: what :class:`nas.train.runner.TrialRunner` runs for every trial by default, written
against the same :class:`nas.train.context.TrialContext` a user's own function sees.

Epochs of minibatch training on ``ctx.data`` with the trial's optimizer, learning-rate schedule (warm-up,
cosine or step), label smoothing, gradient clipping and augmentation (:mod:`nas.train.hparams`), then the
validation loss and accuracy, reported after every epoch; it returns as soon as a report answers stop.
A trial with a checkpoint to start from (a promotion continuing a paused trial, PBT's exploit) continues
its model, optimizer and schedule where that checkpoint ended; a trial that inherited its parent's weights
(``inherit_from``) starts at epoch 0 and takes the parent's optimizer state where it fits. The loss is
summed on the device and read once per epoch. On a data-parallel gang it runs unchanged on every rank: each
trains ``ctx.wrap(model)`` on its shard of each epoch (``ctx.data``) and the validation is shared out too; the
train loss reported is rank 0's shard's.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from nas.core.types import FailureKind, InvalidSpace
from nas.train.context import TrialContext, TrialFailure
from nas.train.device import must_run
from nas.train.hparams import augmentation, make_optimizer, make_schedule
from nas.train.inherit import inherit_optimizer_state, optimizer_param_names


def fit(ctx: TrialContext) -> None:
    hp, model, feed = ctx.hparams, ctx.model, ctx.data
    if model is None or feed is None:  # (a search with no data: nas search refuses it before it starts)
        raise TrialFailure(FailureKind.ERROR, "the built-in trainer needs a model and data; this trial has "
                           f"{'no data' if feed is None else 'no model'} (a space that builds models, a dataset)")
    if not any(p.requires_grad for p in model.parameters()):  # (torch's "optimizer got an empty parameter list")
        raise InvalidSpace(f"the model of {ctx.trial.arch} has no parameters to train")
    opt = make_optimizer(model, hp)
    start_epoch = 0
    state = ctx.checkpoint.load()
    if state is not None:
        model.load_state_dict(state["model"])
        own = [{k: v for k, v in group.items() if k != "params"} for group in opt.param_groups]
        if state.get("optimizer_name") == hp["optimizer"] and "optimizer" in state:
            opt.load_state_dict(state["optimizer"])  # (its state: momentum buffers, Adam's moments)
        for group, mine in zip(opt.param_groups, own, strict=True):  # this trial's hparams win over the copied
            group.update(mine)  # optimizer's: all of them (lr and weight decay alone did: an explored momentum,
            # beta1 or nesterov never took effect after PBT's exploit, while the journal recorded it)
        start_epoch = int(state["epoch"])
    elif ctx.inherited is not None and ctx.inherited.get("optimizer_name") == hp["optimizer"] \
            and "optimizer_param_names" in ctx.inherited:  # the parent's optimizer state, where shapes match
        inherit_optimizer_state(model, opt, ctx.inherited["optimizer"], ctx.inherited["optimizer_param_names"])
    net = ctx.wrap(model)  # on a data-parallel gang: DDP, which averages the ranks' gradients (else the model)
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=hp["label_smoothing"])
    augment = augmentation(hp)
    per_epoch = feed.train_samples(hp["batch_size"])
    steps = -(-per_epoch // min(hp["batch_size"], feed.n_train))
    # the schedule spans the run's epochs (or the trial's end, if later); a continued trial goes on with it. A child
    # that inherited its weights trains its own epochs (child_epochs) and is never continued: its schedule spans them
    # (it spanned the run's, so a cosine child ended at 77% of its learning rate, ranked against annealed members)
    span = ctx.epochs if state is None and ctx.inherited is not None else max(ctx.total_epochs,
                                                                               start_epoch + ctx.epochs)
    schedule = make_schedule(hp, steps, span)
    step = start_epoch * steps
    params = [p for p in model.parameters() if p.requires_grad]
    epoch = start_epoch

    def state_now() -> dict[str, Any]:
        return {"model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
                "optimizer": opt.state_dict(), "optimizer_name": hp["optimizer"], "epoch": epoch,
                "optimizer_param_names": optimizer_param_names(model, opt),
                "arch": dict(ctx.trial.arch), "hparams": dict(hp)}

    ctx.checkpoint.provide(state_now)
    checked = False
    for epoch in range(start_epoch + 1, start_epoch + ctx.epochs + 1):  # noqa: B007 - state_now reads it
        model.train()
        total = torch.zeros((), device=ctx.device)  # summed on the device: no sync per step
        lr = hp["lr"]
        for x, y in feed.train_batches(hp["batch_size"], augment):
            lr = schedule.lr(step)
            for group in opt.param_groups:
                group["lr"] = lr
            with ctx.autocast():
                out = net(x) if checked else first_forward(net, x, ctx)
                if not checked:
                    check_logits(out, len(y), ctx)
                    checked = True
                loss = loss_fn(out, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if hp["grad_clip"] is not None:
                torch.nn.utils.clip_grad_norm_(params, hp["grad_clip"], foreach=True)
            opt.step()
            total.add_(loss.detach().float(), alpha=len(y))
            step += 1
        train_loss = float(total) / per_epoch
        if not math.isfinite(train_loss):
            raise FloatingPointError(f"training loss became {train_loss} in epoch {epoch}")
        val_loss, val_acc = ctx.evaluate()
        if ctx.report(epoch=epoch, train_loss=train_loss, val_loss=val_loss, val_acc=val_acc, lr=lr):
            return


def first_forward(net: Any, x: torch.Tensor, ctx: TrialContext) -> Any:
    """The model's first forward pass: one that cannot run on the task's input at all is an InvalidSpace error
    (:func:`nas.train.device.must_run`)."""
    with must_run(ctx.trial.arch, f"cannot run on the task's input (a batch of shape {tuple(x.shape)}, {x.dtype}, on "
                  f"{x.device})"):
        return net(x)


def check_logits(out: Any, batch: int, ctx: TrialContext) -> None:
    """An InvalidSpace error (the trial fails as INVALID_SPACE, and a search whose first trials all do stops) unless
    the model's output for a batch of ``batch`` is what the loss takes: one logit per class of the task. (A wrong
    class count was a cross-entropy IndexError, "Target 4 is out of bounds", or trained silently where it was more.)
    """
    want = (batch, ctx.task.num_classes) if ctx.task is not None else None
    got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
    if want is not None and got != want:
        raise InvalidSpace(f"the model of {ctx.trial.arch} outputs {got} for a batch of {batch}; the built-in "
                           f"trainer needs {want}, one logit per class ({want[1]} classes): end build()'s model "
                           "in task.num_classes outputs")


__all__ = ["check_logits", "first_forward", "fit"]
