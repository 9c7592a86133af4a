"""Where a run of ``autotune.DataLoader`` starts, at its first epoch's start, and whether it
stays there.

Rank 0's loader (or the one loader) looks up its job's record (``job_record``: the job's
fingerprint names it). Where the loop made the loader anew and the one before it explored,
it goes on with that (``made_anew``). Else, where an earlier run kept a setting (the host's
note, else the study's storage), the run starts there and explores nothing while that
setting's rate holds: its readings are watched (``drift``), and a rate that moved, or the
setting's workers failing here, start the exploring. Else the run starts at the user's own
settings.
"""

from __future__ import annotations

import logging
from multiprocessing.util import Finalize

import torch
import torch.utils.data

from autotune.machine import MachineFacts, detect
from autotune.online import job_record, made_anew
from autotune.online.budget import charged
from autotune.online.drift import DriftWatch
from autotune.online.explorer import Explorer
from autotune.online.proposals import sampler
from autotune.online.reading import Reading
from autotune.pipeline.config import PipelineConfig

log = logging.getLogger("autotune.online.loader")


class RunStart:
    """One loader's start: its job's record, and the kept setting it watches, if any."""

    def __init__(self) -> None:
        self.job: job_record.JobRecord | None = None  # rank 0's, from the first epoch's start
        self.origin = job_record.YOURS  # where the setting the run started at is from
        self.taken_up: Explorer | None = None  # a dropped loader's, this one goes on with
        # the loop dropped the job's loader before this one (with several ranks: rank 0's)
        self.made_anew = False
        self._facts: MachineFacts | None = None
        self._watch: DriftWatch | None = None  # started at a kept setting: its rate watched
        self._check_at_end: Finalize | None = None  # a note's start: the study checked then

    @property
    def facts(self) -> MachineFacts:
        """This machine's facts: the job's fingerprint, the explorer's space."""
        if self._facts is None:
            self._facts = detect(want_cuda=torch.cuda.is_available())
        return self._facts

    def resume(
        self, loader: torch.utils.data.DataLoader, storage: str, name: str | None, *,
        ranks: int, exploring: bool,
    ) -> PipelineConfig | None:  # fmt: skip
        """The setting the run starts at: the explorer's current setting where the loop
        dropped an exploring loader (``taken_up``), else an earlier run's kept one (watched
        where the run is ``exploring``); None: the user's own."""
        self.job = job = job_record.JobRecord.of(
            loader, self.facts, storage, name, sampler(), ranks
        )
        self.made_anew = exploring and made_anew.dropped_before(job.job, loader)
        if self.made_anew and (left := made_anew.taken_up(job.job, loader)) is not None:
            self.taken_up, self.job = left  # and the loop may drop this one, too
            return self.taken_up.current
        earlier = job.start()
        if job.deferred:  # the note's: checked against the storage when the run ends
            self._check_at_end = Finalize(loader, job.check_deferred, exitpriority=0)
        if earlier is None:
            return None
        self.origin = job.origin
        self._watch = DriftWatch(kept_rate=earlier.samples_per_s) if exploring else None
        made_anew.say_once(f"{earlier.settings.short()}, as {job.origin}", job.job.name)
        return earlier.settings

    def holds(self, reading: Reading, pass_length: int | None) -> bool:
        """Whether ``reading`` of the kept setting the run started at keeps the run there
        (charged over whole epochs, as the explorer's readings are). False where the run
        did not start at one, and from the reading whose rate shows it moved: explored from
        there, in the study a note had put off."""
        watch, job = self._watch, self.job
        if watch is None or job is None:
            return False
        whole = charged(reading, watch.restarts, pass_length)
        if watch.kept is None:  # the run's first reading of it: its rate, where none was kept
            job.started_at(whole)
        if not watch.drifted(whole):
            return True
        log.info("autotune.DataLoader: %s: %s; exploring", reading.settings.short(), watch.why)
        self._watch = None
        job.check_deferred()
        return False

    def kept_failed(self, settings: PipelineConfig) -> bool:
        """The workers of ``settings`` failed: where they are the kept setting the run
        started at and watches, it is kept no more (the next run explores), and True."""
        if self._watch is None or self.job is None:
            return False
        log.info("autotune.DataLoader: %s kept no more; exploring", settings.short())
        self._watch, self.origin = None, job_record.YOURS
        self.job.forget_kept()
        return True
