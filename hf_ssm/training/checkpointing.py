"""Crash-safe checkpoint folders (write to a temporary sibling, then rename into place) and the run-folder rules.

A checkpoint folder is either complete or absent: an interrupted save leaves only a `*.tmp-*` folder, which
`latest_checkpoint` ignores and the next save removes, so a good checkpoint is never replaced by a broken one.
Exported models (`model/`, `adapter/`) are written the same way but carry no checkpoint marker.

Resuming (`check_resume`): a run continues only with the settings it was trained with, apart from the fields its
training module declares safe to change (they change neither the model, the data nor the learning rate of any
step, e.g. how often it evaluates or checkpoints); anything else is refused, naming the fields, before the run
folder is touched. A run trained on files resumes only on the same bytes (`check_data_files`), and a run that had
finished is kept as it is (`run_finished`); `check_resume_folder` applies all three to one run folder.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Collection
from pathlib import Path

from ..modeling.legacy_names import RENAMED_CONFIG_FIELDS
from .legacy_settings import upgrade_settings

COMPLETE_MARKER = "checkpoint_complete.json"
_STEP_DIR = re.compile(r"^step_(\d+)$")


def atomic_save_dir(target: str | os.PathLike, write: Callable[[Path], None], metadata: dict | None = None) -> Path:
    """Call `write(tmp_dir)` and move the result to `target` in one rename; returns `target`.

    An older folder at `target` is replaced only after the new one is fully written. With `metadata` (a
    checkpoint) the folder also gets the COMPLETE_MARKER file holding it, which `latest_checkpoint` looks for;
    without (an exported model) nothing is added to what `write` wrote.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in target.parent.glob(f"{target.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{target.name}.tmp-", dir=target.parent))
    try:
        write(tmp)
        if metadata is not None:
            (tmp / COMPLETE_MARKER).write_text(json.dumps(metadata, indent=2))
        if target.exists():
            old = target.with_name(f"{target.name}.old-{os.getpid()}")
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def is_complete(folder: str | os.PathLike) -> bool:
    return (Path(folder) / COMPLETE_MARKER).is_file()


def latest_checkpoint(checkpoints_dir: str | os.PathLike) -> Path | None:
    """The complete `step_<n>` folder with the largest n, or None."""
    root = Path(checkpoints_dir)
    if not root.is_dir():
        return None
    found = []
    for child in root.iterdir():
        match = _STEP_DIR.match(child.name)
        if match and child.is_dir() and is_complete(child):
            found.append((int(match.group(1)), child))
    return max(found)[1] if found else None


def read_metadata(folder: str | os.PathLike) -> dict:
    return json.loads((Path(folder) / COMPLETE_MARKER).read_text())


def prune_checkpoints(checkpoints_dir: str | os.PathLike, keep: int) -> None:
    """Delete all but the newest `keep` complete step folders."""
    root = Path(checkpoints_dir)
    steps = sorted((int(m.group(1)), c) for c in root.iterdir() if (m := _STEP_DIR.match(c.name)) and is_complete(c))
    for _, folder in steps[:-keep] if keep > 0 else []:
        shutil.rmtree(folder, ignore_errors=True)


def check_run_folder_arguments(resume: bool, output_dir: str | None, settings=None, safe: Collection[str] = ()) -> None:
    """The --resume / --output_dir rules of the training scripts: resuming needs a folder, and a fresh run never
    starts in a folder that holds another run's checkpoints (at any depth: suites and restarts keep theirs in
    sub-folders). With `settings`, a resumed single run also checks them (`check_resume`). Raises ValueError."""
    if resume and output_dir is None:
        raise ValueError("--resume needs --output_dir (the run folder to continue)")
    if resume and settings is not None:
        check_resume(settings, output_dir, safe)
    if not resume and output_dir and Path(output_dir).is_dir():
        folders = [Path(output_dir) / "checkpoints", *Path(output_dir).rglob("checkpoints")]
        if any(latest_checkpoint(folder) for folder in folders):
            raise ValueError(
                f"{output_dir} holds checkpoints of an earlier run: pass --resume, or another --output_dir"
            )


def _as_json(value):
    return json.loads(json.dumps(value))


def check_resumed_settings(settings, recorded: dict, safe: Collection[str], where: str | os.PathLike) -> None:
    """ValueError naming every field of the dataclass `settings` that differs from `recorded` (the settings the
    run in `where` was trained with) and is not in `safe`. A field missing from `recorded` (a run written before
    the field existed) counts as its default; one recorded under a name that was renamed since counts under its new
    name (a config field: modeling/legacy_names.py, e.g. `lru_block_size`; a settings field, or one that moved into
    `extra_config`: legacy_settings.py, e.g. the adapter's `transition`). `extra_config` compares over the class's
    CONFIG_DEFAULTS, so that a key given at its wing default is the key not given."""
    cls = type(settings)
    config_defaults = getattr(cls, "CONFIG_DEFAULTS", None)
    recorded = {RENAMED_CONFIG_FIELDS.get(key, key): value for key, value in recorded.items()}
    recorded = upgrade_settings(cls.__name__, recorded, config_defaults or {})
    new, defaults = _as_json(dataclasses.asdict(settings)), _as_json(dataclasses.asdict(cls()))
    for values in (new, defaults, recorded):
        if config_defaults is not None and isinstance(values.get("extra_config"), dict):
            values["extra_config"] = _as_json({**config_defaults, **values["extra_config"]})
    changed = [
        change
        for key, value in new.items()
        if key not in safe
        for change in _changes(key, recorded.get(key, defaults[key]), value)
    ]
    if changed:
        raise ValueError(
            f"--resume: settings differ from those the run in {where} was trained with: {'; '.join(changed)}. "
            f"Resume with the run's settings (its settings.json), or start a new run in another --output_dir; "
            f"settings that may change on resume: {sorted(safe)}"
        )


def _changes(name: str, old, new) -> list[str]:
    """The entries "name old -> new" where the two differ; two dicts (extra_config) give one entry per key."""
    if old == new:
        return []
    if isinstance(old, dict) and isinstance(new, dict):
        unset = "(not set)"
        keys = sorted(k for k in {*old, *new} if old.get(k, unset) != new.get(k, unset))
        return [f"{name}.{k} {old.get(k, unset)!r} -> {new.get(k, unset)!r}" for k in keys]
    return [f"{name} {old!r} -> {new!r}"]


def recorded_settings(run_dir: str | os.PathLike, checkpoint: str | os.PathLike | None = None) -> dict | None:
    """The settings a run was trained with: those in `checkpoint`'s metadata, else the run's settings.json."""
    if checkpoint is not None and "settings" in (meta := read_metadata(checkpoint)):
        return meta["settings"]
    path = Path(run_dir) / "settings.json"
    return json.loads(path.read_text()) if path.is_file() else None


def check_resume(settings, run_dir: str | os.PathLike, safe: Collection[str]) -> Path | None:
    """The latest complete checkpoint of `run_dir/checkpoints` to resume from (None: the run starts afresh),
    after refusing settings that differ from the ones it was trained with (see `check_resumed_settings`).

    Call it before writing anything into `run_dir`: the run folder keeps the record of the original run."""
    found = latest_checkpoint(Path(run_dir) / "checkpoints")
    if found is not None and (recorded := recorded_settings(run_dir, found)) is not None:
        check_resumed_settings(settings, recorded, safe, run_dir)
    return found


def run_finished(run_dir: str | os.PathLike) -> bool:
    """A run that ended: its results.json and model/ are written only after its last step (and its last checkpoint
    may be steps before that, where it stopped early)."""
    return (Path(run_dir) / "results.json").is_file() and (Path(run_dir) / "model").is_dir()


def check_resume_folder(settings, run_dir: str | os.PathLike, safe: Collection[str], fingerprints: dict) -> None:
    """ValueError unless the run in `run_dir` may go on under `settings`: on the same data files (`fingerprints`,
    `check_data_files`) and with the settings it was trained with apart from `safe` — a finished run's (kept as it
    is: `run_finished`) from its settings.json, an interrupted one's from its latest checkpoint (`check_resume`)."""
    check_data_files(fingerprints, run_dir)
    if run_finished(run_dir) and (recorded := recorded_settings(run_dir)) is not None:
        check_resumed_settings(settings, recorded, safe, run_dir)
    else:
        check_resume(settings, run_dir, safe)


def check_data_files(current: dict, run_dir: str | os.PathLike) -> None:
    """ValueError naming every file of a file run whose bytes differ from those the run in `run_dir` was trained
    on: `current` is the run's RunPlan.fingerprints ({} for a generated task: nothing to compare), the recorded ones
    are in its latest checkpoint, else its results.json. A resume would otherwise cycle through other rows from the
    step it resumes at. A run recorded before fingerprints were kept, or not started, passes."""
    if not current:
        return
    run_dir = Path(run_dir)
    found = latest_checkpoint(run_dir / "checkpoints")
    if found is not None:
        recorded = read_metadata(found).get("data_files")
    elif (run_dir / "results.json").is_file():
        recorded = json.loads((run_dir / "results.json").read_text()).get("data_files")
    else:
        recorded = None
    if recorded is None:
        return
    changed = [
        f"{name} {_file_state(recorded.get(name))} -> {_file_state(state)}"
        for name, state in current.items()
        if _content(recorded.get(name)) != _content(state)
    ]
    if changed:
        raise ValueError(
            f"--resume: the data files differ from those the run in {run_dir} was trained on: {'; '.join(changed)}. "
            "Resume with the same files, or start a new run in another --output_dir"
        )


def _content(fingerprint: dict | None) -> tuple | None:
    """What a resume compares of a file (its bytes: size and sha256; its path is a setting, compared as one)."""
    return None if not fingerprint else (fingerprint["size"], fingerprint["sha256"])


def _file_state(fingerprint: dict | None) -> str:
    """A file's fingerprint as a message reads it: path, size, the start of its sha256."""
    if not fingerprint:
        return "none"
    return f"{fingerprint['path']} ({fingerprint['size']:,} bytes, sha256 {fingerprint['sha256'][:12]}...)"
