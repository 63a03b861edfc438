# SPDX-License-Identifier: Apache-2.0
"""Trains a small Llama-style model with dash_attn as its attention, data parallel (FSDP2) and optionally tensor
parallel over attention heads, reproducibly: the same command gives the same losses and weights, bit for bit.

    # CPU, 2 processes (gloo; dash_attn's CPU backend), tensor parallel over heads:
    PYTHONPATH=python torchrun --standalone --nproc-per-node 2 examples/train_distributed.py --device cpu --tp 2
    # one GPU, a one-rank process group (nccl):
    PYTHONPATH=python torchrun --standalone --nproc-per-node 1 examples/train_distributed.py --device cuda \\
        --layers 8 --heads 16 --kv-heads 4 --head-dim 128 --seqlen 4096 --batch 4 --vocab 32000 --steps 50

(PYTHONPATH=python and DASH_ATTN_LIBRARY=build/libdash_attn.so where dash_attn is not installed; `pip install .`
makes both unnecessary.) The world is a dp x tp mesh: --tp ranks share one data-parallel rank and hold
1/tp of the attention heads each; FSDP2 (fully_shard) shards the parameters over the dp dimension and averages the
gradients. Rank 0 prints one line per step (global mean loss, step time) and, at the end, a SHA-256 of the losses
and of the full weights: run the same command twice and compare those two lines.

What is fixed, and why (docs/distributed.md is the whole recipe):
  * attention: dash_attn through attn_implementation="dash", deterministic (the integration's default);
  * the other kernels: torch.use_deterministic_algorithms(True), and on CUDA CUBLAS_WORKSPACE_CONFIG (set here
    before the first cuBLAS call unless already set);
  * communication (CUDA): NCCL_ALGO=Ring, NCCL_PROTO=Simple, NCCL_NVLS_ENABLE=0 (set before NCCL starts unless
    already set), so that NCCL does not pick reduction algorithms by message size or reduce inside the switch;
  * initialisation: every rank builds the whole model on the CPU from --seed, the same on every rank, then moves it
    to its device and shards it;
  * data: synthetic token sequences from a generator seeded by (--seed, data-parallel rank): data-parallel ranks
    see different data, the tensor-parallel ranks of one data-parallel rank the same data;
  * the world layout (--tp and the number of processes) and, on CPU, the thread count (--threads).

The model is transformers' LlamaForCausalLM from a config (random weights; nothing is downloaded). The data are
arithmetic sequences modulo the vocabulary (a random start and stride per row), which the model learns: with the
defaults and --seqlen 64 on one CPU process the loss fell from 5.57 (ln 256 = 5.55) to about 2.6 in 300 steps.
dash_attn's CPU backend is fp32 and slow: keep the CPU model tiny.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import logging
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

# What the recipe fixes in the environment before CUDA, cuBLAS and NCCL start (setdefault: a value the caller
# exported wins, and is printed). NCCL reads its variables when a communicator is created, cuBLAS its workspace
# configuration when a handle is created: both happen after main() sets them.
CUDA_ENVIRONMENT = {
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",  # cuBLAS's fixed workspaces: needed by use_deterministic_algorithms
    "NCCL_ALGO": "Ring",                  # one algorithm for every message size (no Tree/NVLS/CollNet switches)
    "NCCL_PROTO": "Simple",               # one protocol for every message size
    "NCCL_NVLS_ENABLE": "0",              # no NVLink SHARP: reductions inside the switch
}

ATTENTION_IMPLEMENTATIONS = ("dash", "sdpa", "eager")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cuda",
                    help="cpu: gloo and dash_attn's CPU backend; cuda: nccl, one GPU per process (default)")
    ap.add_argument("--tp", type=int, default=1,
                    help="tensor-parallel ranks (heads split over them); the rest of the world is data parallel")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seqlen", type=int, default=256)
    ap.add_argument("--batch", type=int, default=2, help="sequences per data-parallel rank and step")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4, help="query heads")
    ap.add_argument("--kv-heads", type=int, default=2, help="key/value heads (GQA when fewer than --heads)")
    ap.add_argument("--head-dim", type=int, default=64,
                    help="a head dim dash_attn trains (both passes: dash_attn._abi.KERNEL_ROWS; every row on cpu)")
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3, help="AdamW learning rate")
    ap.add_argument("--seed", type=int, default=0, help="initialisation and data")
    ap.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), default=None,
                    help="compute dtype (FSDP2 mixed precision; fp32 master weights and gradient reduction); "
                         "default bf16 on cuda, fp32 on cpu")
    ap.add_argument("--attn", choices=ATTENTION_IMPLEMENTATIONS, default="dash",
                    help="attn_implementation (sdpa and eager: for comparison; not reproducible by themselves)")
    ap.add_argument("--schedule", default="auto", help="dash_attn's backward schedule (dash_attn.SCHEDULES)")
    ap.add_argument("--sm-margin", type=int, default=0, help="dash_attn: SMs left to other kernels (NCCL)")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads per process (--device cpu)")
    ap.add_argument("--no-torch-deterministic", dest="torch_deterministic", action="store_false",
                    help="leave torch.use_deterministic_algorithms off (the run is then not reproducible)")
    args = ap.parse_args(argv)
    if args.dtype is None:
        args.dtype = "bf16" if args.device == "cuda" else "fp32"
    check_args(ap, args)
    return args


def check_args(ap, args):
    """What can be checked before any process group exists; parser.error names the flag and exits."""
    for name in ("tp", "steps", "seqlen", "batch", "layers", "heads", "kv_heads", "head_dim", "vocab", "threads"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.sm_margin < 0:
        ap.error(f"--sm-margin must be >= 0, got {args.sm_margin}")
    if args.heads % args.kv_heads:
        ap.error(f"--heads {args.heads} must be a multiple of --kv-heads {args.kv_heads}")
    if args.kv_heads % args.tp:
        ap.error(f"--tp {args.tp} must divide --kv-heads {args.kv_heads}: each rank holds whole KV heads and "
                 "their query heads")
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: PyTorch sees no CUDA device (use --device cpu for the CPU backend)")
    if args.attn == "dash":
        import dash_attn
        # Training needs the backward: on CUDA the rows with a backward kernel, on the CPU backend every row (this
        # model's value head dim is its head dim).
        trained = tuple(r.head_dim for r in dash_attn._abi.KERNEL_ROWS
                        if r.head_dim_v == r.head_dim and (r.backward or args.device == "cpu"))
        if args.head_dim not in trained:
            ap.error(f"--head-dim {args.head_dim}: dash_attn trains head dims {trained} on {args.device} (the CUDA "
                     f"backward at {dash_attn._abi.FORWARD_ONLY_PAIRS_TEXT} is not built yet)")
        if args.schedule not in dash_attn.SCHEDULES:
            ap.error(f"--schedule {args.schedule!r} is unknown (expected one of {', '.join(dash_attn.SCHEDULES)})")
        if args.device == "cuda" and not dash_attn._abi.LIB.dash_cuda_available():
            ap.error(f"--device cuda --attn dash: {dash_attn._abi.LIBRARY_PATH} was built without CUDA kernels: use "
                     "--device cpu, or a build with them (scripts/build.sh with nvcc; DASH_ATTN_LIBRARY)")
        if args.device == "cuda" and args.dtype == "fp32":
            ap.error("--dtype fp32 with --device cuda --attn dash: dash_attn's CUDA kernels take bf16 and fp16")


def set_reproducible_environment(args) -> dict:
    """Sets CUDA_ENVIRONMENT's variables where unset (CUDA runs only) and the deterministic switches. Returns
    {name: (value, "set here" | "inherited")} for the report."""
    report = {}
    if args.device == "cuda":
        for name, value in CUDA_ENVIRONMENT.items():
            report[name] = (os.environ.get(name, value), "inherited" if name in os.environ else "set here")
            os.environ.setdefault(name, value)
        torch.backends.cudnn.benchmark = False  # cuDNN's autotuner may pick other kernels in another run
    else:
        torch.set_num_threads(args.threads)  # GEMM blocking may follow the thread count: keep it fixed
    torch.use_deterministic_algorithms(args.torch_deterministic)
    return report


def init_distributed(args):
    """Joins the process group torchrun describes (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT) and returns the
    (dp, tp) device mesh."""
    missing = [name for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
               if name not in os.environ]
    if missing:
        raise SystemExit(f"train_distributed.py: {', '.join(missing)} not set: launch it with torchrun "
                         "(torchrun --standalone --nproc-per-node N examples/train_distributed.py ...; N = 1 for "
                         "one process)")
    world = int(os.environ["WORLD_SIZE"])
    if world % args.tp:
        raise SystemExit(f"train_distributed.py: --tp {args.tp} must divide the world size {world} "
                         "(torchrun's --nproc-per-node times --nnodes)")
    if args.device == "cuda":
        local_rank = int(os.environ["LOCAL_RANK"])
        if local_rank >= torch.cuda.device_count():
            raise SystemExit(f"train_distributed.py: local rank {local_rank} has no GPU of its own "
                             f"({torch.cuda.device_count()} visible): start at most that many processes per node")
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    else:
        dist.init_process_group("gloo")
    return make_mesh(args)


def make_mesh(args):
    """The (dp, tp) mesh over the process group already initialised. Ranks r and r + 1 ... r + tp - 1 (one node's
    neighbours, for NVLink) form a tensor-parallel group."""
    from torch.distributed.device_mesh import init_device_mesh
    world = dist.get_world_size()
    return init_device_mesh(args.device, (world // args.tp, args.tp), mesh_dim_names=("dp", "tp"))


def build_model(args, attn_implementation=None):
    """LlamaForCausalLM from a config: random weights from --seed, built on the CPU (the same bits on every rank and
    for every device), in fp32 (FSDP2 casts to --dtype for compute). attn_implementation defaults to --attn."""
    import transformers
    import dash_attn.integrations.transformers as dash_hf  # registers attn_implementation="dash"
    dash_hf.configure(deterministic=True, schedule=args.schedule, sm_margin=args.sm_margin)
    config = transformers.LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.heads * args.head_dim, intermediate_size=4 * args.heads * args.head_dim,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        head_dim=args.head_dim, max_position_embeddings=args.seqlen, attention_dropout=0.0, use_cache=False,
        tie_word_embeddings=False)
    torch.manual_seed(args.seed)
    with torch.device("cpu"):
        model = transformers.AutoModelForCausalLM.from_config(
            config, attn_implementation=attn_implementation or args.attn, dtype=torch.float32)
    return model.train()


def parallelize(model, mesh, args):
    """Tensor parallel over heads (when --tp > 1), then FSDP2 over dp (always: with one dp rank it only applies the
    mixed-precision policy). Returns the model, in place."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    if args.tp > 1:
        # q/k/v projections split by output rows, which are whole heads (head-major), so each rank computes
        # heads/tp query heads and kv_heads/tp KV heads: its query heads' KV heads, GQA groups intact. The output
        # projection splits by input columns and sums its partial products over the tp ranks (an all-reduce).
        plan = {"q_proj": ColwiseParallel(), "k_proj": ColwiseParallel(), "v_proj": ColwiseParallel(),
                "o_proj": RowwiseParallel()}
        for layer in model.model.layers:
            parallelize_module(layer.self_attn, mesh["tp"], plan)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh["dp"], mp_policy=policy)
    fully_shard(model, mesh=mesh["dp"], mp_policy=policy)
    return model


def data_generator(args, dp_rank: int) -> torch.Generator:
    """A CPU generator per data-parallel rank: the data do not depend on the device or on the tp rank."""
    return torch.Generator().manual_seed(args.seed * 1_000_003 + dp_rank)


def synthetic_batch(generator, args) -> torch.Tensor:
    """(batch, seqlen + 1) tokens: row r is start_r + i * stride_r (mod vocab), start and stride random."""
    start = torch.randint(0, args.vocab, (args.batch, 1), generator=generator)
    stride = torch.randint(1, 8, (args.batch, 1), generator=generator)
    return (start + stride * torch.arange(args.seqlen + 1)) % args.vocab


@dataclasses.dataclass
class Result:
    losses: list          # global mean loss per step, as Python floats (exact float32 values)
    step_ms: list
    state: dict           # name -> full tensor on the CPU, on rank 0 ({} on the other ranks)
    losses_sha256: str
    weights_sha256: str   # of `state`: meaningful on rank 0


def full_state(model) -> dict:
    """Every parameter and buffer, whole, on the CPU, on rank 0 ({} elsewhere). A collective: every rank must call
    it (torch.distributed.checkpoint gathers the FSDP2 and TP shards)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    # A (dp, tp)-sharded weight comes back through two all-gathers, and torch warns that sequential collectives "may
    # give inconsistent results due to different reduction orders": an all-gather reduces nothing, so it is muted.
    redistribute_log = logging.getLogger("torch.distributed.tensor._redistribute")
    level = redistribute_log.level
    redistribute_log.setLevel(logging.ERROR)
    try:
        state = get_model_state_dict(model, options=options)
    finally:
        redistribute_log.setLevel(level)
    return {name: tensor.clone() for name, tensor in state.items()}


def sha256_of_tensors(named) -> str:
    """SHA-256 over names and exact bytes (any dtype) of (name, tensor) pairs."""
    digest = hashlib.sha256()
    for name, tensor in named:
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def train(args, mesh, attn_implementation=None, log=print) -> Result:
    """Builds, parallelises and trains the model for --steps AdamW steps; returns the losses, step times and final
    weights. Runs on every rank; `log` is called on rank 0 only."""
    device = torch.device(args.device, torch.cuda.current_device()) if args.device == "cuda" else torch.device("cpu")
    model = parallelize(build_model(args, attn_implementation).to(device), mesh, args)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    dp_group, dp_size = mesh.get_group("dp"), mesh["dp"].size()
    generator = data_generator(args, mesh.get_local_rank("dp"))
    rank0 = dist.get_rank() == 0
    losses, loss_tensors, step_ms = [], [], []
    for step in range(args.steps):
        tokens = synthetic_batch(generator, args).to(device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        logits = model(input_ids=tokens[:, :-1], use_cache=False).logits
        loss = F.cross_entropy(logits.float().reshape(-1, args.vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        # The global mean loss, for the report only (gradients are averaged by FSDP2): a sum over dp ranks.
        reported = loss.detach().clone()
        dist.all_reduce(reported, group=dp_group)
        reported = (reported / dp_size).cpu()
        if device.type == "cuda":
            torch.cuda.synchronize()
        step_ms.append((time.perf_counter() - start) * 1e3)
        losses.append(reported.item())
        loss_tensors.append(reported)
        if rank0:
            log(f"step {step + 1:>5}/{args.steps}  loss {losses[-1]:.6f}  step {step_ms[-1]:8.1f} ms")
    state = full_state(model)
    return Result(losses=losses, step_ms=step_ms, state=state,
                  losses_sha256=sha256_of_tensors([("losses", torch.stack(loss_tensors))]),
                  weights_sha256=sha256_of_tensors(sorted(state.items())))


def describe(args, environment) -> str:
    world = dist.get_world_size()
    device = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    lines = [f"Llama: {args.layers} layers, {args.heads} heads / {args.kv_heads} KV heads of {args.head_dim}, vocab "
             f"{args.vocab}; seqlen {args.seqlen}, batch {args.batch} per dp rank; {args.dtype} on {device}",
             f"world {world} = dp {world // args.tp} x tp {args.tp}; attention {args.attn}"
             + (f" (schedule {args.schedule}, sm_margin {args.sm_margin})" if args.attn == "dash" else ""),
             f"torch.use_deterministic_algorithms({args.torch_deterministic})"
             + ("" if args.device == "cuda" else f"; {args.threads} CPU thread(s) per process")]
    lines += [f"{name}={value} ({how})" for name, (value, how) in environment.items()]
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    environment = set_reproducible_environment(args)
    mesh = init_distributed(args)
    try:
        rank0 = dist.get_rank() == 0
        if rank0:
            print(describe(args, environment), flush=True)
        result = train(args, mesh, log=lambda line: print(line, flush=True))
        if rank0:
            later = sorted(result.step_ms[1:]) or result.step_ms
            print(f"median step {later[len(later) // 2]:.1f} ms (after the first)")
            print(f"losses sha256  {result.losses_sha256}")
            print(f"weights sha256 {result.weights_sha256}", flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    code = main()
    # Leave without the interpreter's shutdown. Gloo's worker threads may still hold the last collective's work
    # objects (the state dict's all-gathers), and when they drop them during Python's finalisation, releasing a
    # tensor's Python object aborts the process ("terminate called without an active exception" from
    # ProcessGroupGloo::runLoop: PyTorch 2.11 on the CPU, about 1 run in 10 here, after every digest was printed).
    # The process group is destroyed and nothing else is left to finalise.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)
