"""What a training script imports: the tuned settings (``PipelineConfig``, best.yaml), the
sources, decoders and recipes, and ``build_loader`` / ``loader_kwargs``."""
