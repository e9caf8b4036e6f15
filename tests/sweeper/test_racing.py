"""The race run against a real Optuna study with a stand-in launcher
(sweeper/verify/race_rounds.py): rounds run the survivors in a shuffled order, a slower contender
stops running once dropped, and a race stopped midway resumes from the rounds stored in the study
instead of redoing them."""

from __future__ import annotations

import json
import random
from pathlib import Path

import optuna
import pytest

from sweeper.context import SweepContext
from sweeper.settings import settings_from
from sweeper.verify.race_rounds import run_race
from sweeper.verify.race_rules import DECIDED
from sweeper.verify.winner import Candidate
from tests.race_helpers import race_context
from train.core.evidence import RACE_ATTR


class Stopped(Exception):
    """The sweep killed while a round ran."""


class Launcher:
    """Runs 'jobs' whose tokens/s is `speeds[n]` times a machine drift shared by the round;
    writes each result.json as a trial would. `stop_at` raises before that job index runs."""

    def __init__(self, root: Path, speeds: dict[int, float], *, stop_at: int | None = None):
        self.root, self.speeds, self.stop_at = root, speeds, stop_at
        self.job_idx, self.rounds = len(list(root.glob("*"))), []
        self.rng = random.Random(len(self.speeds) + self.job_idx)

    def launch(self, batch: list[list[str]], names: list[str] | None = None) -> list[dict]:
        drift = self.rng.uniform(0.6, 1.4)
        order = [int(o[0].split("=")[1]) for o in batch]
        self.rounds.append(order)
        outs = []
        for n in order:
            if self.job_idx == self.stop_at:
                raise Stopped
            job_dir = self.root / str(self.job_idx)
            job_dir.mkdir()
            tps = self.speeds[n] * drift * self.rng.uniform(0.995, 1.005)
            result = {"schema_version": 2, "status": "complete", "tokens_per_s": tps}
            (job_dir / "result.json").write_text(json.dumps(result))
            outs.append({"state": "complete", "result": result, "job_dir": str(job_dir)})
            self.job_idx += 1
        return outs


def _ctx(study: optuna.Study, jobs: Launcher) -> SweepContext:
    settings = settings_from(
        {"verify.repeats": 3, "verify.max_rounds": 6, "seed": 3, "mlflow.enabled": False}
    )
    return race_context(jobs=jobs, settings=settings, study=study)


def _cands(speeds: dict[int, float]) -> dict[int, Candidate]:
    return {
        n: Candidate(key=str(n), params={"n": n}, overrides=[f"id={n}"], values=[], simplicity=n)
        for n in speeds
    }


SPEEDS = {0: 100.0, 1: 112.0, 2: 70.0}  # the start, a 12% faster config, a much slower one


def test_the_race_drops_the_slower_and_decides(tmp_path: Path) -> None:
    study = optuna.create_study(direction="maximize")
    jobs = Launcher(tmp_path, SPEEDS)
    record, standing = run_race(_cands(SPEEDS), _ctx(study, jobs))
    assert standing.outcome == DECIDED and standing.alive == (1,)
    assert set(standing.dropped) == {0, 2}
    assert [sorted(r) for r in jobs.rounds[:3]] == [[0, 1, 2]] * 3  # everyone for 3 rounds
    assert len({tuple(r) for r in jobs.rounds}) > 1  # the order is shuffled round to round
    stored = study.user_attrs[RACE_ATTR]
    assert stored["contenders"] == [0, 1, 2] and len(stored["rounds"]) == record.rounds


def test_a_race_stopped_midway_resumes_from_the_stored_rounds(tmp_path: Path) -> None:
    study = optuna.create_study(direction="maximize")
    speeds = {0: 100.0, 1: 100.5}  # equivalent within noise: the race needs every round
    with pytest.raises(Stopped):
        run_race(_cands(speeds), _ctx(study, Launcher(tmp_path, speeds, stop_at=5)))
    assert len(study.user_attrs[RACE_ATTR]["rounds"]) == 2  # rounds 1 and 2 were stored
    jobs = Launcher(tmp_path, speeds)
    cands = _cands(speeds)
    record, standing = run_race(cands, _ctx(study, jobs))
    assert record.rounds == standing.rounds and standing.finished
    assert len(jobs.rounds) == record.rounds - 2  # rounds 1 and 2 were not run again
    assert all(len(c.values) == record.rounds for c in cands.values())  # stored values count


@pytest.mark.parametrize(("free", "stops"), [(0, True), (512 * 1024, True), (10 << 30, False)])
def test_a_race_whose_runs_all_failed_on_a_full_disk_ends_as_a_full_disk(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, free: int, stops: bool
) -> None:
    """Every run failed and the disk holding their folders is full: the sweep's one line is the
    full disk (naming the sweep dir and hydra.sweep.dir), not "every verification run failed"."""
    from sweeper.launch.disk_full import disk_full_line
    from sweeper.verify import race_rounds
    from sweeper.verify.race_rounds import RaceRecord, stop_if_disk_full

    sweep_dir = tmp_path / "sweep"
    record = RaceRecord(contenders=[3], values={3: [None]})
    record.stored = [{"3": {"value": None, "job_dir": str(sweep_dir / "7")}}]
    monkeypatch.setattr(race_rounds, "free_bytes", lambda folder: free)
    if not stops:
        stop_if_disk_full(record)  # room there: the runs failed for another reason
        return
    with pytest.raises(OSError) as err:
        stop_if_disk_full(record)
    line = disk_full_line(err.value, sweep_dir=sweep_dir, storage=None, resume=None)
    assert line is not None
    assert line.startswith(f"disk full: no space left on device writing {sweep_dir} (")
    assert "point hydra.sweep.dir at a disk with room" in line
