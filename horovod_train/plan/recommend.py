"""Evaluate a request over node counts and recommend a configuration. Pure functions."""
from __future__ import annotations

import dataclasses
import itertools
import math

from horovod_train.config import DEFAULT_BUCKET_MB  # TF-free: the trainer's one constant
from horovod_train.plan.comm import Fabric
from horovod_train.plan.cost import (HOROVOD_CYCLE_MS, HOROVOD_FUSION_MB, Assumptions,
                                     Calibration, Job, Prediction, memory, predict)
from horovod_train.plan.hardware import GIB, GPUS, Gpu, Link
from horovod_train.plan.models import ModelSpec

MAX_ACCUM = 256
SEARCH_NODES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


@dataclasses.dataclass(frozen=True)
class PlanRequest:
    model: ModelSpec
    gpu: Gpu
    precision: str
    gpus_per_node: int
    nodes: tuple[int, ...]
    intra: Link
    network: Link | None
    nics_per_node: int = 1
    global_batch: int | None = None
    batch_per_gpu: int | None = None
    accum_steps: int = 1
    optimizer: str = "momentum"
    checkpointing: bool = False
    compression: str = "none"
    overlap: bool = DEFAULT_BUCKET_MB > 0     # the trainer's default buckets overlap backprop
    fusion_bytes: float = HOROVOD_FUSION_MB * 2 ** 20
    cycle_s: float = HOROVOD_CYCLE_MS * 1e-3
    target_hours: float | None = None
    target_efficiency: float = 0.8
    train_samples: float | None = None
    objective: str = "fastest"                # a key of OBJECTIVES
    price_per_gpu_hour: float | None = None   # USD
    horovod_build: str = "patched"            # a key of HOROVOD_BUILDS
    shard_optimizer_state: bool = False       # the trainer's --shard_optimizer_state


OBJECTIVES = ("fastest", "cheapest")
# The Horovod builds the planner models: does a submitted tensor wake the background loop
# (our patches), or does it wait for the next cycle (stock)? comm.exposed_comm.
HOROVOD_BUILDS = {"patched": True, "stock": False}


@dataclasses.dataclass(frozen=True)
class Row:
    nodes: int
    world: int
    micro_batch: float
    accum_steps: int
    global_batch: float
    prediction: Prediction | None      # None: the batch cannot be split this way
    notes: tuple[str, ...] = ()
    levers: tuple[str, ...] = ()       # flags added to the request to make it fit (fitted)

    @property
    def fits(self) -> bool:
        return self.prediction is not None and self.prediction.memory.fits


def fabric_for(req: PlanRequest, nodes: int) -> Fabric:
    # A one-node "cluster" of one GPU has nothing to reduce; the fabric still needs
    # a GPU count, so gpus_per_node stays what the user gave.
    return Fabric(req.gpus_per_node, nodes, req.intra, req.network, req.nics_per_node)


def job_for(req: PlanRequest, micro: float, accum: int) -> Job:
    return Job(req.model, req.precision, micro, accum, req.optimizer, req.checkpointing,
               req.compression, req.overlap, req.fusion_bytes, req.cycle_s,
               HOROVOD_BUILDS[req.horovod_build], req.shard_optimizer_state)


def evaluate(req: PlanRequest, nodes: int, a: Assumptions = Assumptions(),
             calib: Calibration = Calibration(), accum: int | None = None,
             micro: float | None = None) -> Row:
    world = req.gpus_per_node * nodes
    k = accum or req.accum_steps
    if micro is None:
        micro = req.batch_per_gpu if req.batch_per_gpu else req.global_batch / (world * k)
    global_batch = micro * k * world
    if micro < 1:
        note = (f"global batch {req.global_batch} < {world} GPUs x {k} accumulation steps: "
                "fewer than one sample per micro-batch")
        return Row(nodes, world, micro, k, global_batch, None, (note,))
    notes = []
    if micro != int(micro):
        notes.append(f"global batch {req.global_batch} does not split evenly over {world} GPUs "
                     f"x {k} steps ({micro:.2f} per micro-batch)")
    pred = predict(job_for(req, micro, k), req.gpu, fabric_for(req, nodes), a, calib)
    if not pred.memory.fits:
        notes.append(memory_advice(req, nodes, micro, k, a))
    return Row(nodes, world, micro, k, global_batch, pred, tuple(notes))


def evaluate_all(req: PlanRequest, a: Assumptions = Assumptions(),
                 calib: Calibration = Calibration()) -> list[Row]:
    return [evaluate(req, n, a, calib) for n in req.nodes]


def largest_fitting_batch(req: PlanRequest, nodes: int, accum: int, a: Assumptions,
                          checkpointing: bool | None = None) -> int:
    """Largest integer micro-batch that fits, 0 if not even one sample does."""
    world = req.gpus_per_node * nodes
    req = dataclasses.replace(req, checkpointing=req.checkpointing if checkpointing is None
                              else checkpointing)

    def fits(b: int) -> bool:
        return memory(job_for(req, b, accum), req.gpu, world, a).fits

    if not fits(1):
        return 0
    lo, hi = 1, 2
    while fits(hi) and hi < 2 ** 24:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def memory_advice(req: PlanRequest, nodes: int, micro: float, accum: int,
                  a: Assumptions) -> str:
    """Which term overflows, by how much, and the levers that would make it fit."""
    world = req.gpus_per_node * nodes
    mem = memory(job_for(req, micro, accum), req.gpu, world, a)
    term = mem.largest_term()
    head = (f"does not fit: {term} {mem.terms()[term] / GIB:.1f} GiB bring the total to "
            f"{mem.total / GIB:.1f} GiB, {mem.over_by / GIB:.1f} GiB over the "
            f"{mem.capacity / GIB:.1f} GiB of {req.gpu.name}")
    best = largest_fitting_batch(req, nodes, accum, a)
    sharding = _sharding_advice(req, nodes, micro, accum, a)
    if best == 0 and sharding:
        return f"{head}. {sharding}"
    if best == 0:
        bigger = sorted(g.name for g in GPUS.values()
                        if memory(job_for(req, 1, accum), g, world, a).fits)
        where = f"a GPU with more memory ({', '.join(bigger)})" if bigger else "a bigger GPU"
        return (f"{head}. Even one sample per GPU overflows: parameters, gradients and "
                f"optimizer state need sharding (ZeRO/FSDP), which data parallelism does not "
                f"do; use {where}")
    steps = accum * math.ceil(micro / best)
    new_micro = math.ceil(micro * accum / steps)   # same samples per optimizer step
    levers = [sharding] if sharding else []
    if not req.checkpointing:
        with_ckpt = largest_fitting_batch(req, nodes, accum, a, checkpointing=True)
        if with_ckpt >= micro:
            levers.append("--gradient_checkpointing (fits as is; ~1/3 more compute)")
        elif with_ckpt > best:
            levers.append(f"--gradient_checkpointing with micro-batch {with_ckpt}")
    if req.global_batch:
        levers += [f"--grad_accum_steps {steps} (micro-batch {new_micro}, same global batch)",
                   f"more GPUs (>= {math.ceil(req.global_batch / (accum * best))} "
                   "at this global batch)",
                   f"a smaller batch (--global_batch {best * accum * world} or less)"]
    else:
        levers += [f"a smaller batch (--batch_size {best}, the largest that fits)",
                   f"--batch_size {new_micro} --grad_accum_steps {steps} (same samples per step)"]
    return f"{head}. Levers: " + "; ".join(levers)


def _sharding_advice(req: PlanRequest, nodes: int, micro: float, accum: int,
                     a: Assumptions) -> str | None:
    """The lever --shard_optimizer_state is, when it alone makes this batch fit (or,
    failing that, makes one sample fit); None when it is on already or does not help."""
    world = req.gpus_per_node * nodes
    if req.shard_optimizer_state or world == 1:
        return None
    sharded = dataclasses.replace(req, shard_optimizer_state=True)
    saved = (memory(job_for(req, micro, accum), req.gpu, world, a).optimizer
             - memory(job_for(sharded, micro, accum), req.gpu, world, a).optimizer)
    if memory(job_for(sharded, micro, accum), req.gpu, world, a).fits:
        return (f"--shard_optimizer_state fits as is (each of the {world} GPUs keeps 1/{world} "
                f"of the optimizer state: {saved / GIB:.1f} GiB less; the same bytes on the "
                f"wire, the allgather after the update not hidden)")
    best = largest_fitting_batch(sharded, nodes, accum, a)
    if best and largest_fitting_batch(req, nodes, accum, a) == 0:
        return (f"--shard_optimizer_state (1/{world} of the optimizer state per GPU, "
                f"{saved / GIB:.1f} GiB less) with micro-batch {best} and --grad_accum_steps "
                f"{accum * math.ceil(micro / best)}")
    return None


def accum_for_efficiency(req: PlanRequest, row: Row, a: Assumptions,
                         calib: Calibration) -> int | None:
    """Fewest accumulation steps (doubling) that lift efficiency to the target while the
    micro-batch stays as it is, so the global batch grows. None if 256 is not enough."""
    if row.prediction is None or not row.fits:
        return None
    k = row.accum_steps
    while k <= MAX_ACCUM:
        trial = evaluate(req, row.nodes, a, calib, accum=k, micro=row.micro_batch)
        if trial.prediction.efficiency >= req.target_efficiency:
            return k
        k *= 2
    return None


def hours(req: PlanRequest, row: Row) -> float | None:
    """Wall-clock hours of the training; None without a length or when the
    configuration cannot run (it does not fit, or the batch does not split)."""
    if req.train_samples is None or not row.fits:
        return None
    return req.train_samples / row.prediction.throughput / 3600


def gpu_hours(req: PlanRequest, row: Row) -> float | None:
    h = hours(req, row)
    return None if h is None else h * row.world


def cost(req: PlanRequest, row: Row) -> float | None:
    g = gpu_hours(req, row)
    return None if g is None or req.price_per_gpu_hour is None else g * req.price_per_gpu_hour


def does_not_fit(row: Row) -> str | None:
    """`41.2 GiB > 40 GiB` for a configuration whose memory overflows, else None."""
    if row.prediction is None or row.fits:
        return None
    m = row.prediction.memory
    return f"{m.total / GIB:.1f} GiB > {m.capacity / GIB:.0f} GiB"


@dataclasses.dataclass(frozen=True)
class Recommendation:
    row: Row | None
    reason: str
    accum_for_target: dict[int, int | None]   # nodes -> accumulation steps


def recommend(req: PlanRequest, rows: list[Row], a: Assumptions = Assumptions(),
              calib: Calibration = Calibration()) -> Recommendation:
    accum = {r.nodes: accum_for_efficiency(req, r, a, calib) for r in rows}
    candidates = [fitted(req, r, a, calib) for r in rows]
    fitting = [r for r in candidates if r.fits]
    if not fitting:
        return Recommendation(None, f"no configuration fits in memory, even with "
                              f"{_levers_tried(req, rows)}; see the notes", accum)
    if req.objective == "cheapest":
        best, why = _cheapest(req, fitting)
        return Recommendation(best, "--objective cheapest: " + why, accum)
    if req.target_hours is not None:
        rec = _fewest_for_time(req, candidates, a, calib, accum)
        return dataclasses.replace(rec, reason="--objective fastest: " + rec.reason)
    good = [r for r in fitting if r.prediction.efficiency >= req.target_efficiency]
    if good:
        best = max(good, key=lambda r: r.prediction.throughput)
        why = (f"the fastest configuration at or above {req.target_efficiency:.0%} "
               f"scaling efficiency")
    else:
        best = max(fitting, key=lambda r: r.prediction.efficiency)
        why = (f"no configuration reaches {req.target_efficiency:.0%} efficiency; this is the "
               f"most efficient (raise --grad_accum_steps, see the accumulation column)")
    return Recommendation(best, "--objective fastest: " + why, accum)


# The candidate space: the switches the memory notes name, each its flag, the request
# field it sets and the fewest GPUs it acts on (one GPU has no optimizer state to shard).
# fitted() tries every subset of those that are off, each with the accumulation that
# splits the same samples per optimizer step into micro-batches that fit.
SWITCHES = (("--shard_optimizer_state", "shard_optimizer_state", 2),
            ("--gradient_checkpointing", "checkpointing", 1))


def fitted(req: PlanRequest, row: Row, a: Assumptions = Assumptions(),
           calib: Calibration = Calibration()) -> Row:
    """The candidate at row's node count: the row as planned when it fits (or its batch
    cannot be split); else, among the configurations the levers make fit, those with the
    fewest switches on (a switch changes more than accumulation does, and one the memory
    does not need is not asked for, as a row that fits as planned gets none), the
    fastest; the row itself when none fits."""
    if row.fits or row.prediction is None:
        return row
    tried = ((on, _with_levers(req, row, on, a, calib)) for on in _switch_sets(req, row.world))
    fits = [(len(on), r) for on, r in tried if r is not None]
    if not fits:
        return row
    return min(fits, key=lambda t: (t[0], -t[1].prediction.throughput))[1]


def _switch_sets(req: PlanRequest, world: int) -> list[tuple]:
    """Every subset of the switches that are off and act on this many GPUs."""
    off = [s for s in SWITCHES if not getattr(req, s[1]) and world >= s[2]]
    return [on for n in range(len(off) + 1) for on in itertools.combinations(off, n)]


def _with_levers(req: PlanRequest, row: Row, switches: tuple, a: Assumptions,
                 calib: Calibration) -> Row | None:
    """The fewest accumulation steps (a multiple m of the planned ones, the micro-batch
    divided by m, so the samples per optimizer step stay) that fit with these switches
    on; None when even MAX_ACCUM steps do not."""
    lever_req = dataclasses.replace(req, **{field: True for _, field, _ in switches})
    for m in range(1, MAX_ACCUM // row.accum_steps + 1):
        micro, k = row.micro_batch / m, row.accum_steps * m
        if micro < 1:
            return None
        if row.micro_batch == int(row.micro_batch) and row.micro_batch % m:
            continue                     # keep an even split even
        if (switches or m > 1) and memory(job_for(lever_req, micro, k), req.gpu, row.world,
                                          a).fits:
            flags = [s[0] for s in switches]
            if m > 1:
                flags += ([] if req.global_batch else [f"--batch_size {micro:g}"]) + [
                    f"--grad_accum_steps {k}"]
            found = evaluate(lever_req, row.nodes, a, calib, accum=k, micro=micro)
            return dataclasses.replace(found, levers=tuple(flags))
    return None


def _levers_tried(req: PlanRequest, rows: list[Row]) -> str:
    """What fitted() tried, for the line that says nothing fits: `A, B or C`."""
    used = {s for r in rows for on in _switch_sets(req, r.world) for s in on}
    levers = ([f"--grad_accum_steps up to {MAX_ACCUM} at the same samples per step"]
              + [s[0] for s in SWITCHES if s in used])
    return " or ".join([", ".join(levers[:-1]), levers[-1]]) if len(levers) > 1 else levers[0]


def _cheapest(req: PlanRequest, fitting: list[Row]) -> tuple[Row, str]:
    """Fewest GPU-hours (GPU-seconds per sample when no length is given, the same
    order) among the listed configurations at or above the efficiency floor, and
    within --target_hours when given."""
    floor = req.target_efficiency
    pool = [r for r in fitting if r.prediction.efficiency >= floor]
    why = f"at or above {floor:.0%} scaling efficiency"
    if req.target_hours is not None and pool:
        timely = [r for r in pool if hours(req, r) <= req.target_hours]
        if timely:
            pool, why = timely, why + f" that finish within {req.target_hours:g} h"
        else:
            why += (f"; none of them finishes within {req.target_hours:g} h (add node counts "
                    "to --nodes, or relax --target_hours)")
    if not pool:
        pool = fitting
        why = (f"no configuration reaches {floor:.0%} efficiency, so among all that fit "
               "(raise --grad_accum_steps, see the accumulation column)")
    best = min(pool, key=lambda r: (r.world / r.prediction.throughput, -r.prediction.throughput))
    unit = "GPU-hours" if req.train_samples is not None else "GPU-hours per sample"
    money = " and cost" if req.price_per_gpu_hour is not None else ""
    return best, f"the fewest {unit}{money} {why}"


def _fewest_for_time(req: PlanRequest, rows: list[Row], a: Assumptions,
                     calib: Calibration, accum: dict) -> Recommendation:
    """Fewest GPUs meeting --target_hours, over the given node counts and powers of two
    (one node only without an --interconnect: nothing joins more)."""
    search = SEARCH_NODES if req.network is not None else (1,)
    candidates = {r.nodes: r for r in rows}
    for n in search:
        if n not in candidates:
            candidates[n] = fitted(req, evaluate(req, n, a, calib), a, calib)
    ok = [r for r in candidates.values()
          if r.fits and hours(req, r) is not None and hours(req, r) <= req.target_hours]
    if ok:
        best = min(ok, key=lambda r: (r.world, -r.prediction.throughput))
        return Recommendation(best, f"the fewest GPUs that finish within {req.target_hours:g} h",
                              accum)
    fitting = [r for r in candidates.values() if r.fits]
    fastest = max(fitting, key=lambda r: r.prediction.throughput)
    more = ("" if req.network is not None else
            "; pass --interconnect to search more nodes")
    top = max(candidates)
    return Recommendation(fastest, f"no configuration up to {top} node{'s' * (top > 1)} finishes "
                          f"within {req.target_hours:g} h; this is the fastest "
                          f"({hours(req, fastest):.1f} h){more}", accum)
