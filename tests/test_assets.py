"""Shipped data lives under assets/ as data files, is loaded by the packages and is shipped in the wheel."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from eppo_envs.core.assets import asset_path, load_json

ROOT = Path(__file__).resolve().parents[1]


def test_webshop_vocabulary_comes_from_the_asset_file():
    from eppo_envs.webshop import vocab

    data = load_json("webshop", "vocab.json")
    assert asset_path("webshop", "vocab.json") == ROOT / "assets" / "webshop" / "vocab.json"
    assert [t.name for t in vocab.PRODUCT_TYPES] == [t["name"] for t in data["product_types"]]
    first = vocab.PRODUCT_TYPES[0]
    assert first.name == "deodorant stick" and first.nouns == ("deodorant", "stick")
    assert dict(first.options)["scent"][0] == "unscented" and first.price == (5, 28)
    assert vocab.REVIEW_TEMPLATES[0] == (5, "Love this {type}. It is {attr} exactly as described.")


def test_a_missing_asset_is_one_clear_error():
    with pytest.raises(FileNotFoundError, match="shipped data file webshop/nope.json not found"):
        asset_path("webshop", "nope.json")


def test_pyproject_ships_every_asset():
    data_files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]
    shipped = {f for patterns in data_files.values() for p in patterns for f in ROOT.glob(p)}
    on_disk = {f for f in (ROOT / "assets").rglob("*") if f.is_file()}
    assert on_disk and on_disk <= shipped, sorted(str(f) for f in on_disk - shipped)
    for target, patterns in data_files.items():  # each lands where the loader looks
        for p in patterns:
            assert target == "share/eppo/" + str(Path(p).parent), (target, p)


@pytest.mark.slow
def test_the_wheel_holds_the_assets(tmp_path):
    src = tmp_path / "src"  # a copy: an in-place build would leave build/ and *.egg-info in the checkout
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", ".venv", "runs", "build", "*.egg-info",
                                                             "__pycache__", ".*_cache"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(src),
                    "-w", str(tmp_path / "dist")], check=True, timeout=600)
    wheel = next((tmp_path / "dist").glob("eppo-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.endswith(".data/data/share/eppo/assets/webshop/vocab.json") for n in names), names[:20]
