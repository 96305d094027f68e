"""What a model built in memory is keyed by (LoadedModel.fingerprint, jaxrank/models/loading.py).

Independent checks: two models of different weights get different keys and the same weights the same key,
whatever folder a ``path`` of ``"."`` names; a folder with a weight file is keyed by its files (a change
of one byte changes the key).
"""

import dataclasses
from pathlib import Path

import numpy as np

from tiny_lm import tiny_lm


def test_no_checkpoint_is_keyed_by_its_parameters():
    a, b, a2 = tiny_lm(seed=0), tiny_lm(seed=1), tiny_lm(seed=0)
    assert a.path is None
    assert a.fingerprint != b.fingerprint
    assert a.fingerprint == a2.fingerprint


def test_a_folder_without_weights_is_not_hashed(tmp_path, monkeypatch):
    (tmp_path / "notes.txt").write_text("anything")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "big.bin").write_bytes(b"\0" * 1000)
    monkeypatch.chdir(tmp_path)
    a, b = tiny_lm(seed=0), tiny_lm(seed=1)
    da, db = dataclasses.replace(a, path=Path(".")), dataclasses.replace(b, path=Path("."))
    assert da.fingerprint != db.fingerprint                    # were the same: both the folder's hash
    assert da.fingerprint == tiny_lm(seed=0).fingerprint


def test_a_folder_with_weights_is_keyed_by_its_files(tmp_path):
    a = tiny_lm(seed=0)
    (tmp_path / "model.safetensors").write_bytes(b"one")
    first = dataclasses.replace(a, path=tmp_path).fingerprint
    (tmp_path / "model.safetensors").write_bytes(b"three")
    second = dataclasses.replace(a, path=tmp_path).fingerprint
    assert first != second and first != a.fingerprint
    assert np.all([len(x.split("-")[0]) == len(a.fingerprint.split("-")[0]) for x in (first, second)])
