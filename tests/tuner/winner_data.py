"""The winner the worth-table tests take apart, its baseline and its space."""

from autotune.pipeline.config import PipelineConfig

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
