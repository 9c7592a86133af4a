"""The winner the worth-table tests take apart, its baseline and its space; a finished
search of it, and runs that measure each variant at a rate of the test's."""

import optuna

from autotune.pipeline.config import PipelineConfig
from autotune.runtime.measurement import Measurement
from autotune.runtime.trial import TrialOutcome
from autotune.tuner.metrics import Confirmed
from autotune.tuner.variants import variants
from autotune.tuner.worth import WINNER

BASELINE = PipelineConfig(batch_size=32, main_threads=2, decoder="as_is")
WINNER_CONFIG = PipelineConfig(
    batch_size=32,
    num_workers=2,
    prefetch_factor=4,
    persistent_workers=True,
    decoder="pil_reduced",
    main_threads=1,
)
DECODERS = ["as_is", "pil", "pil_reduced", "opencv", "torchvision"]
TUNED = ["num_workers", "prefetch_factor", "persistent_workers", "decoder", "main_threads"]


def search_of(walls: list[float]) -> optuna.Study:
    """A finished search: complete trials of the winner's config, each ``wall`` seconds."""
    study = optuna.create_study(direction="maximize")
    for wall in walls:
        study.add_trial(
            optuna.trial.create_trial(
                value=1.0,
                params={},
                distributions={},
                user_attrs={"wall_s": wall, "pipeline": WINNER_CONFIG.to_dict()},
            )
        )
    return study


RATES = {"num_workers=0": 200.0, "main_threads=2": 498.0, "decoder=pil": 300.0}


def fake_run(order: list[str], rates: dict[str, float] = RATES):
    planned = variants(WINNER_CONFIG, BASELINE, tuned=TUNED, decoders_ranked=DECODERS[1:])

    def run(job, *, timeout_s):
        label = next((v.label for v in planned if v.config == job.pipeline), WINNER)
        order.append(label)
        rate = rates.get(label, 500.0)
        m = Measurement(rate, (rate * 0.99, rate, rate * 1.01), 0.1, 0.01, 4, 12)
        return TrialOutcome("ok", measurement=m)

    return run


def winner() -> Confirmed:
    return Confirmed("trial 7", 7, WINNER_CONFIG, (500.0,))
