"""A Lightning project, as the tests use it: a LightningDataModule over the spectrogram clips
and a LightningModule whose ``training_step`` logs and returns its loss; and the least module
and the quiet ``Trainer`` the loader's own Lightning tests fit over index batches. Importable
as ``lightning_example`` (the tests' folder is on the path)."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch
from torch.utils.data import DataLoader
from userdata_example import SpecNet, Spectrograms, pad_dict_collate


class ToneData(L.LightningDataModule):
    """The clips, batched into dicts; ``prepare_data`` leaves a mark in ``marks`` (a folder),
    as a download would leave its files."""

    def __init__(self, count: int = 48, batch_size: int = 16, marks: str | None = None) -> None:
        super().__init__()
        self.count, self.batch_size, self.marks = count, batch_size, marks
        self.train: Spectrograms | None = None

    def prepare_data(self) -> None:
        if self.marks:
            Path(self.marks).mkdir(exist_ok=True)
            (Path(self.marks) / f"prepared-{len(list(Path(self.marks).iterdir()))}").touch()

    def setup(self, stage: str) -> None:
        self.train = Spectrograms(count=self.count, vary=True)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            self.train, batch_size=self.batch_size, shuffle=True, collate_fn=pad_dict_collate
        )


class ToneModule(L.LightningModule):
    def __init__(self, num_classes: int = 4, lr: float = 3e-3) -> None:
        super().__init__()
        self.net, self.lr = SpecNet(num_classes), lr

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        logits = self.net(batch["spec"])
        loss = torch.nn.functional.cross_entropy(logits.float(), batch["label"])
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> dict:
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.lr)
        schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10)
        return {"optimizer": optimizer, "lr_scheduler": schedule}


class IndexModule(L.LightningModule):
    """One weight over batches of sample indices: a step as small as Lightning allows."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)

    def training_step(self, batch: torch.Tensor, index: int) -> torch.Tensor:
        return self.layer(batch.float()[:, None]).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def quiet_trainer(**options: object) -> L.Trainer:
    """A ``Trainer`` on the CPU that writes nothing (no logger, checkpoint, progress bar or
    summary), with ``options`` (``max_epochs``, ...)."""
    return L.Trainer(
        accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, **options,
    )  # fmt: skip
