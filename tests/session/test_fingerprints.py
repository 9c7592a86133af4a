"""The study's fingerprint and the job's: a study searched another way (window, seed, search
space) is another study of the same job; other data, another model or batch size is another
job."""

from __future__ import annotations

import dataclasses

from helpers import make_session


def test_the_job_is_the_study_less_how_it_searches() -> None:
    session = make_session()
    conf = session.conf
    searched_otherwise = [
        dataclasses.replace(conf, window=dataclasses.replace(conf.window, sub_windows=9)),
        dataclasses.replace(conf, seed=conf.seed + 1),
    ]
    for other in searched_otherwise:
        again = session.with_conf(other)
        assert again.fingerprint != session.fingerprint  # not resumed as the same study
        assert again.job_fingerprint == session.job_fingerprint  # but the same job
    narrow = make_session(["search_space.knobs.num_workers.high=1"])
    assert narrow.fingerprint != session.fingerprint
    assert narrow.job_fingerprint == session.job_fingerprint


def test_other_data_model_or_batch_size_is_another_job() -> None:
    session = make_session()
    others = [
        make_session(["batch_size=64"]),
        make_session(["model=resnet18"]),
        dataclasses.replace(session, source_fingerprint="other data"),
        dataclasses.replace(session, ranks=2),
    ]
    jobs = {session.job_fingerprint, *(o.job_fingerprint for o in others)}
    assert len(jobs) == len(others) + 1
    studies = {session.fingerprint, *(o.fingerprint for o in others)}
    assert len(studies) == len(others) + 1
