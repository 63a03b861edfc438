# SPDX-License-Identifier: Apache-2.0
"""Distributed training with dash_attn (examples/train_distributed.py) on the CPU backend: 2 processes over gloo,
FSDP2 data parallelism and tensor parallelism over attention heads (DTensor), a tiny Llama through
attn_implementation="dash".

- Two launches of the example's training loop give bitwise identical losses and weights, for each layout (dp 2 x
  tp 1 and dp 1 x tp 2), and a third launch through the command line (torchrun) prints the same SHA-256s.
- Tensor parallelism: each rank's attention call (half the query heads, half the KV heads) produced, bitwise, the
  outputs and dQ / dK / dV that one process computes for those heads in one call over all the heads, from the same
  inputs gathered from both ranks: dash_attn's head-count invariance, in a real tensor-parallel step.

What this does not show: with 2 ranks every reduction is a sum of two terms, which is the same in either order, so a
reduction order that changed from run to run could not show here (docs/distributed.md); nothing here runs NCCL.
The whole file took 23-37 s on a 2-core machine, most of it importing torch and transformers in 6 processes."""
import importlib
import importlib.util
import os
import pathlib
import re
import subprocess
import sys
from datetime import timedelta

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import dash_attn  # noqa: E402

import transformers_version  # noqa: E402

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "train_distributed.py"
PYTHON_DIR = pathlib.Path(dash_attn.__file__).resolve().parents[1]  # holds the dash_attn package


def _why_skip():
    """The reason these tests cannot run here, or None."""
    if not dist.is_available():
        return "torch.distributed is not available in this PyTorch build"
    if not dist.is_gloo_available():
        return "torch.distributed has no gloo backend in this PyTorch build"
    for module, name in (("torch.distributed.fsdp", "fully_shard"),  # FSDP2 (torch >= 2.6)
                         ("torch.distributed.tensor.parallel", "parallelize_module")):
        try:
            found = hasattr(importlib.import_module(module), name)
        except ImportError:
            found = False
        if not found:
            return f"this PyTorch ({torch.__version__}) has no {module}.{name}"
    version = transformers_version.installed_version()
    if version is None:
        return "transformers is not installed (the example's model is its Llama; scripts/run-tests.sh installs it)"
    if not transformers_version.is_supported(version):
        return f"transformers >= 5 is needed by dash_attn.integrations.transformers, found {version}"
    return None


SKIP_REASON = _why_skip()
pytestmark = pytest.mark.skipif(SKIP_REASON is not None, reason=str(SKIP_REASON))

# The model and run of every launch: 2 layers, 4 query / 2 KV heads of 64 (so tp 2 gives each rank 2 query heads
# and their KV head), 3 steps of 2 sequences of 300 tokens: 3 KV tiles of 128, so that a dQ tile sums 3 partials,
# whose order matters (a sum of two is the same in either order).
STEPS = 3
ARGS = ["--device", "cpu", "--steps", str(STEPS), "--seqlen", "300", "--batch", "2", "--layers", "2", "--heads", "4",
        "--kv-heads", "2", "--head-dim", "64", "--vocab", "64", "--seed", "7", "--threads", "1"]
LAYOUTS = {"dp2": ["--tp", "1"], "tp2": ["--tp", "2"]}
WORLD = 2
PROBE = "dash-probe"  # attn_implementation that runs dash's and records the first step's calls


def load_example():
    """examples/train_distributed.py as a module (examples/ is not a package), loaded once per process."""
    if "train_distributed" not in sys.modules:
        spec = importlib.util.spec_from_file_location("train_distributed", EXAMPLE)
        module = importlib.util.module_from_spec(spec)
        sys.modules["train_distributed"] = module  # its dataclass looks its module up there
        spec.loader.exec_module(module)
    return sys.modules["train_distributed"]


# ---- what runs in the spawned processes -------------------------------------------------------------------------

def _keep(record, name):
    def hook(grad):
        record[name] = grad.detach().clone()
    return hook


def _register_probe(records):
    """attn_implementation=PROBE: dash_attn's transformers attention, recording each layer's first call (its
    inputs, kwargs and output, and through hooks the gradients of its inputs and output)."""
    from transformers import AttentionInterface
    import dash_attn.integrations.transformers as dash_hf

    def forward(module, query, key, value, attention_mask, **kwargs):
        out, weights = dash_hf.dash_attention_forward(module, query, key, value, attention_mask, **kwargs)
        if module.layer_idx not in records:
            record = records[module.layer_idx] = {
                "q": query.detach().clone(), "k": key.detach().clone(), "v": value.detach().clone(),
                "out": out.detach().clone(), "mask": attention_mask, "is_causal": module.is_causal,
                "kwargs": {name: x.detach().clone() if isinstance(x, torch.Tensor) else x
                           for name, x in kwargs.items()}}
            for name, tensor in (("dq", query), ("dk", key), ("dv", value), ("dout", out)):
                tensor.register_hook(_keep(record, name))
        return out, weights

    dash_hf.register(PROBE)  # the mask function under PROBE too, as for "dash"
    AttentionInterface.register(PROBE, forward)


def _worker(rank, store, out_dir, common_args):
    """One rank: each layout's training run (common_args + the layout's), in this process; rank 0 saves the
    results, every rank its probe."""
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD,
                            timeout=timedelta(seconds=120))
    try:
        example = load_example()
        for layout, extra in LAYOUTS.items():
            args = example.parse_args(common_args + extra)
            example.set_reproducible_environment(args)
            records = {}
            probe = None
            if layout == "tp2":
                _register_probe(records)
                probe = PROBE
            result = example.train(args, example.make_mesh(args), attn_implementation=probe, log=lambda line: None)
            if rank == 0:
                torch.save({"losses": result.losses, "state": result.state, "losses_sha256": result.losses_sha256,
                            "weights_sha256": result.weights_sha256}, os.path.join(out_dir, f"{layout}.pt"))
            if records:
                torch.save(records, os.path.join(out_dir, f"{layout}-probe-rank{rank}.pt"))
            dist.barrier()
    finally:
        dist.destroy_process_group()


def launch(out_dir, common_args=ARGS):
    out_dir.mkdir()
    mp.spawn(_worker, args=(str(out_dir / "store"), str(out_dir), common_args), nprocs=WORLD, join=True)
    return {layout: torch.load(out_dir / f"{layout}.pt") for layout in LAYOUTS}, \
        [torch.load(out_dir / f"tp2-probe-rank{rank}.pt") for rank in range(WORLD)]


@pytest.fixture(scope="module")
def launches(tmp_path_factory):
    """Two launches of 2 processes each: (results by layout, tp2 probes by rank) per launch."""
    root = tmp_path_factory.mktemp("distributed")
    return [launch(root / name) for name in ("first", "second")]


# ---- the tests ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
def test_two_launches_give_bitwise_identical_losses_and_weights(launches, layout):
    first, second = (results[layout] for results, _ in launches)
    assert len(first["losses"]) == STEPS and len(set(first["losses"])) > 1, f"{layout}: the loss never moved"
    assert first["losses"] == second["losses"], f"{layout}: losses differ: {first['losses']} vs {second['losses']}"
    assert first["state"].keys() == second["state"].keys() and len(first["state"]) > 0
    for name, tensor in first["state"].items():
        assert torch.equal(tensor, second["state"][name]), f"{layout}: {name} differs between the two launches"
    # Every weight is there, whole: the gathered state has the single-process model's shapes.
    import dash_attn.integrations.transformers as dash_hf
    example = load_example()
    settings = dict(dash_hf.settings)  # build_model configures the integration: leave this process's as it was
    try:
        reference = example.build_model(example.parse_args(ARGS + LAYOUTS[layout])).state_dict()
    finally:
        dash_hf.settings.update(settings)
    assert {name: tuple(t.shape) for name, t in first["state"].items()} == \
        {name: tuple(t.shape) for name, t in reference.items()}
    assert first["weights_sha256"] == example.sha256_of_tensors(sorted(first["state"].items()))


def test_tensor_parallel_ranks_have_the_attention_bits_of_one_process(launches):
    from dash_attn.integrations.transformers import dash_attention_forward
    _, probes = launches[0]
    assert sorted(probes[0]) == sorted(probes[1]) == [0, 1], "a layer's first attention call was not recorded"
    for layer in sorted(probes[0]):
        ranks = [probe[layer] for probe in probes]
        heads_q, heads_kv = ranks[0]["q"].shape[1], ranks[0]["k"].shape[1]
        assert (heads_q, heads_kv) == (2, 1), f"layer {layer}: rank 0 held {heads_q} / {heads_kv} heads, not half"
        assert not torch.equal(ranks[0]["q"], ranks[1]["q"]), f"layer {layer}: both ranks had the same heads"
        # One process, one call over all heads: the ranks' inputs side by side (rank r holds query heads
        # [r * heads_q, (r + 1) * heads_q) and their KV heads), with the kwargs the ranks' calls had.
        whole = [torch.cat([r[name] for r in ranks], dim=1).requires_grad_(True) for name in ("q", "k", "v")]
        module = type("Attention", (), {"is_causal": ranks[0]["is_causal"]})()
        out, _ = dash_attention_forward(module, *whole, ranks[0]["mask"], **ranks[0]["kwargs"])
        out.backward(torch.cat([r["dout"] for r in ranks], dim=2))  # out: (batch, seqlen, heads, head_dim)
        if layer == 0:  # the check is not vacuous: at this length the dQ order changes the bits
            orders = {}
            for schedule in ("ascending", "shift"):
                leaves = [t.detach().clone().requires_grad_(True) for t in whole]
                dash_attention_forward(module, *leaves, ranks[0]["mask"], schedule=schedule,
                                       **ranks[0]["kwargs"])[0].backward(torch.cat([r["dout"] for r in ranks], 2))
                orders[schedule] = leaves[0].grad
            assert not torch.equal(orders["ascending"], orders["shift"]), "dQ bits do not depend on the order here"
        for rank, record in enumerate(ranks):
            q_heads = slice(rank * heads_q, (rank + 1) * heads_q)
            kv_heads = slice(rank * heads_kv, (rank + 1) * heads_kv)
            pairs = (("out", out.detach()[:, :, q_heads]), ("dq", whole[0].grad[:, q_heads]),
                     ("dk", whole[1].grad[:, kv_heads]), ("dv", whole[2].grad[:, kv_heads]))
            for name, expected in pairs:
                got = record[name]
                assert got.abs().sum() > 0, f"layer {layer} rank {rank}: {name} is all zeros"
                assert torch.equal(got, expected), \
                    f"layer {layer} rank {rank}: {name} differs from one process's call over all heads " \
                    f"(max |diff| {(got - expected).abs().max().item():.3g})"


def test_the_command_line_prints_the_same_digests(launches, tmp_path):
    """torchrun examples/train_distributed.py (a third launch, through its own process group set-up) prints a
    progress line per step and the SHA-256s of the spawned runs of the same layout."""
    results, _ = launches[0]
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(PYTHON_DIR), os.environ.get("PYTHONPATH")])))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={WORLD}",
               str(EXAMPLE)] + ARGS + LAYOUTS["tp2"]
    run = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"{' '.join(command)} failed:\n{run.stdout}\n{run.stderr}"
    steps = re.findall(r"^step +(\d+)/(\d+) +loss (\S+) +step +(\S+) ms$", run.stdout, re.M)
    assert [int(s) for s, _, _, _ in steps] == list(range(1, STEPS + 1)), run.stdout
    assert [float(loss) for _, _, loss, _ in steps] == pytest.approx(results["tp2"]["losses"], abs=1e-6)
    digests = dict(re.findall(r"^(losses|weights) sha256 +([0-9a-f]{64})$", run.stdout, re.M))
    assert digests == {"losses": results["tp2"]["losses_sha256"], "weights": results["tp2"]["weights_sha256"]}, \
        run.stdout


def test_data_differ_between_data_parallel_ranks_and_repeat_for_a_rank():
    example = load_example()
    args = example.parse_args(ARGS)

    def batches(dp_rank):  # a rank's first two steps
        generator = example.data_generator(args, dp_rank)
        return [example.synthetic_batch(generator, args) for _ in range(2)]

    rank0, rank0_again, rank1 = batches(0), batches(0), batches(1)
    assert all(torch.equal(a, b) for a, b in zip(rank0, rank0_again))
    assert not torch.equal(rank0[0], rank1[0]) and not torch.equal(rank0[0], rank0[1])
    assert rank0[0].shape == (2, 301) and int(rank0[0].max()) < 64
