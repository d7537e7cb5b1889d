"""GPU-only checks (marker ``gpu``: deselected in the default run, skipped without CUDA).
``scripts/gpu_check.sh`` runs them with the packed search and ``nas bench train`` on a one-GPU machine."""

from __future__ import annotations

import pytest
import torch

import nas
from nas.core.types import Trial
from nas.engine.protocol import finished
from nas.engine.ray_pool import RayExecutor
from nas.search_spaces.nb201 import NB201Space
from nas.train.runner import TrialRunner
from nas.train.settings import TrainSettings

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

CELL = "|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|"


def test_trainer_keeps_data_on_the_gpu_with_bf16_and_channels_last():
    benchmark = torch.backends.cudnn.benchmark
    runner = TrialRunner(nas.load_dataset("digits"), TrainSettings(epochs=2, device="cuda"))
    feed = runner.side.feed
    assert feed.x_train.is_cuda and feed.x_val.is_cuda
    assert feed.x_train.is_contiguous(memory_format=torch.channels_last)
    assert runner.side.autocast_on == torch.cuda.is_bf16_supported()
    space = NB201Space()
    result, ckpt = runner.run(Trial(0, space.parse(CELL)), space, None)
    assert result.ok, result.error
    assert result.metrics["device"] == "cuda" and result.score > 0.5 and ckpt
    assert torch.backends.cudnn.benchmark == benchmark  # process flags are set per trial and restored


@pytest.mark.ray
def test_four_actors_share_one_gpu(ray_local):
    import ray

    assert ray.cluster_resources().get("GPU"), "CUDA is visible but the Ray cluster has no GPU"
    space = NB201Space()
    ex = RayExecutor(space, nas.load_dataset("digits"), TrainSettings(epochs=1), workers=4, cpus_per_trial=0.5,
                     gpus_per_trial=0.25, namespace="nas-test-gpu-pack")
    try:
        assert not ex.fallback_to_cpu
        infos = ray.get([ex.actor(i).info.remote() for i in range(4)])
        assert all(i["cuda"] and len(i["gpu_ids"]) == 1 for i in infos)
        assert len({str(i["gpu_ids"]) for i in infos}) == 1  # all four on the same GPU
        for i in range(4):
            ex.submit(Trial(i, space.parse(CELL)))
        results = []
        while len(results) < 4:
            results += [r for _, r in finished(ex.poll(timeout=120))]
        assert all(r.ok and r.metrics["device"] == "cuda" for r in results), [r.error for r in results]
    finally:
        ex.shutdown()
