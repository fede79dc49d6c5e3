"""`toolchain plan SPEC --search`: candidates ranked on the silicon estimate, a Pareto front, a spec written that
`spec validate`, `build` and `matrix` accept. The recommendation it is held to is AIConfigurator's own
(tests/reference/aiconfigurator_0.12.0.json, recorded from `aiconfigurator cli recommend`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, SPECS, Cli
from toolchain.planning.search import pareto_front

pytestmark = pytest.mark.slow  # AIConfigurator's database loads for seconds to a minute

REF = json.loads((REPO / "tests" / "reference" / "aiconfigurator_0.12.0.json").read_text())
SPEC_8B = SPECS / "llama-3.1-8b-fp8.yaml"


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path, Path]:
    from typer.testing import CliRunner

    from toolchain.cli.main import app

    tmp = tmp_path_factory.mktemp("search")
    out, png = tmp / "picked.yaml", tmp / "front.png"
    args = ["plan", str(SPEC_8B), "--search", "--gpus", "H100-SXM,H200-SXM", "--formats", "fp8", "--tps", "1,2"]
    r = CliRunner().invoke(app, [*args, "--write", str(out), "--plot", str(png), "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout), out, png


def test_search_names_a_configuration_within_one_gpu_of_aiconfigurator(
    searched: tuple[dict[str, Any], Path, Path],
) -> None:
    doc, _, _ = searched
    best = doc["best"]
    assert best["config"] in {f"{g} fp8 KV {kv} TP1" for g in ("H100-SXM", "H200-SXM") for kv in ("auto", "fp8")}
    assert best["estimator"].startswith("aiconfigurator 0.12.0 (trtllm 1.3.0rc20 on ")
    recommend = {x["system"]: x["agg_gpus"] for x in REF["recommend"]["results"]}
    system = "h200_sxm" if best["gpu"] == "H200-SXM" else "h100_sxm"
    theirs = recommend[system]
    assert abs(best["gpus_at_full_load"] - theirs) <= 1 or abs(best["gpus_at_full_load"] / theirs - 1) <= 0.15
    ranked = doc["ranked"]
    assert len(ranked) == 8  # 2 GPUs × 1 format × 2 KV dtypes (INT8 KV: no prefix caching) × 2 TPs
    assert {r["kind"] for r in doc["rejected"]} == {"invalid"}
    keys = [(c["gpus"], -c["tok_s_per_gpu"]) for c in ranked]
    assert keys == sorted(keys)  # fewest GPUs first, then the most tokens/s per GPU
    for c in ranked:
        assert c["floor_gpus"] <= c["gpus"] and c["ttft_ms"] <= 500 and c["tpot_ms"] <= 30
        assert c["cell_id"].endswith(f"-tp{c['tp']}") and f"-b{c['max_batch_size']}-" in c["cell_id"]


def test_the_written_spec_validates_and_plans_the_chosen_cell(
    cli: Cli, searched: tuple[dict[str, Any], Path, Path]
) -> None:
    doc, out, png = searched
    best = doc["best"]
    assert doc["written"] == str(out) and png.stat().st_size > 0 and png.read_bytes()[:4] == b"\x89PNG"
    text = out.read_text()
    assert text.startswith("# Written by `toolchain plan") and best["config"] in text
    d = yaml.safe_load(text)
    assert d["matrix"]["gpu"] == [best["gpu"]] and d["matrix"]["max_batch_size"] == [best["max_batch_size"]]
    assert d["matrix"]["tp"] == [best["tp"]] and d["quantization"]["weights"] == best["weights"]
    r = cli("spec", "validate", out)
    assert r.exit_code == 0, r.output
    r = cli("spec", "expand", out, "--json")
    assert r.exit_code == 0, r.output
    assert best["cell_id"] in r.stdout
    r = cli("plan", out, "--json")
    assert r.exit_code == 0, r.output
    (cell,) = json.loads(r.stdout)["cells"]
    assert cell["cell_id"] == best["cell_id"] and cell["fleet_estimate"]["total_gpus"] == best["gpus"]


def test_the_pareto_front_is_undominated(searched: tuple[dict[str, Any], Path, Path]) -> None:
    doc, _, _ = searched
    front = doc["pareto"]
    assert front
    for p in front:
        for q in front:
            assert not (q["tok_s_per_gpu"] > p["tok_s_per_gpu"] and q["tok_s_per_user"] > p["tok_s_per_user"]), (p, q)
    pts = [
        {"tok_s_per_gpu": 1.0, "tok_s_per_user": 1.0},
        {"tok_s_per_gpu": 2.0, "tok_s_per_user": 2.0},
        {"tok_s_per_gpu": 3.0, "tok_s_per_user": 0.5},
    ]
    assert pareto_front(pts) == [pts[2], pts[1]]


def test_the_table_and_the_front_print(cli: Cli) -> None:
    r = cli(
        "plan",
        SPEC_8B,
        "--search",
        "--gpus",
        "H200-SXM,L4",
        "--formats",
        "fp8",
        "--tps",
        "1",
        "--price",
        "H200-SXM=3.5",
    )
    assert r.exit_code == 0, r.output
    assert "ranked on aiconfigurator 0.12.0" in r.stdout and "H200-SXM fp8/fp8 TP1" in r.stdout
    assert "Pareto front" in r.stdout and "$/h" in r.stdout
    assert "no silicon data, floor only (lower bound)" in r.stderr  # L4: not in the database


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--write", "x.yaml"], "--write applies to --search only"),
        (["--search", "--cell", "h100-sxm-b64-s4096-i2048-tp1"], "--search ranks configurations"),
        (["--search", "--gpus", "H999"], "no GPU 'H999'"),
        (["--search", "--formats", "fp9"], "'fp9' is not a weight format"),
        (["--search", "--tps", "one"], "--tps 'one'"),
        (["--search", "--price", "H100-SXM"], "is not GPU=USD"),
    ],
)
def test_search_mistakes_are_one_line(cli: Cli, args: list[str], words: str) -> None:
    r = cli("plan", SPEC_8B, *args)
    assert r.exit_code == 2, r.output
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and words in errors[0], r.stderr
    assert "Traceback" not in r.output
