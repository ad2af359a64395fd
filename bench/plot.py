"""docs/benchmarks.png from the figures' JSON files (matplotlib, Agg: no display).

  python bench/plot.py [--in_dir runs/bench] [--out docs/benchmarks.png]

A panel per figure that is present; missing JSON files leave their panel out.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402


def _load(in_dir: str, name: str):
    path = os.path.join(in_dir, f"{name}.json")
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


def _bars(ax, labels, values, errors=None, target=None, title="", ylabel=""):
    ax.bar(range(len(values)), values, yerr=errors, capsize=3,
           color=["tab:blue" if "ours" in lab else "tab:gray" for lab in labels])
    ax.set_xticks(range(len(values)), labels, rotation=20, ha="right", fontsize=7)
    if target is not None:
        ax.axhline(target, color="tab:red", ls="--", lw=1, label=f"target {target:g}")
        ax.legend(fontsize=7)
    ax.set_title(title, fontsize=9)
    ax.set_ylabel(ylabel, fontsize=8)


def m1(ax, r):
    names = [("ours", "ours"), ("keras_fit", "Keras fit")]
    stats = [common.mean_ci(r["merged"][k]["per_rank"]) for k, _ in names]
    _bars(ax, [n for _, n in names], [s[0] for s in stats], [s[1] for s in stats],
          title=f"M1 overhead: ours/fit step time {r['step_time_ratio']:.2f} (<= 1.05)",
          ylabel="img/s, 1 rank x 1 thread")


def m2(ax, r):
    eff = r["efficiency"]
    keys = ["ours/gloo", "bare/gloo", "ours/mpi", "bare/mpi", "mwms"]
    _bars(ax, [k.replace("/", " ").replace("bare", "bare hvd") for k in keys],
          [eff[k] for k in keys], target=r["target"],
          title="M2 efficiency, 2 ranks / 1 rank", ylabel="efficiency")


def m3(ax, r):
    sizes = [x["bytes"] for x in r["m3"]]
    ax.loglog(sizes, [x["ours_busbw"] for x in r["m3"]], "o-", label="ours (grouped_allreduce)")
    ax.loglog(sizes, [x["mpi4py_busbw"] for x in r["m3"]], "s--", color="tab:gray",
              label="mpi4py Allreduce")
    ax.set_xlabel("bytes", fontsize=8)
    ax.set_ylabel("busbw GB/s", fontsize=8)
    ax.set_title("M3 allreduce bus bandwidth, 2 ranks, MPI", fontsize=9)
    ax.legend(fontsize=7)


def m4(ax, r):
    secs = r["m4"]["seconds"]
    _bars(ax, list(secs), [1e3 * v for v in secs.values()],
          title=f"M4 {r['m4']['tensors']} small tensors: fusion gain {r['m4']['fusion_gain']:.0f}x",
          ylabel="ms per allreduce of all")
    ax.set_yscale("log")


def m5(ax, r):
    ks = [x["k"] for x in r["m5"]]
    ax.plot(ks, [x["efficiency"] for x in r["m5"]], "o-", label="efficiency")
    ax.plot(ks, [x["collective_ops_per_step"] / x["k"] for x in r["m5"]], "s--",
            label="allreduce ops per micro-batch")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("accumulation steps k", fontsize=8)
    ax.set_title("M5 accumulation, 2 ranks", fontsize=9)
    ax.legend(fontsize=7)


def m6(ax, r):
    cases = r["cases"]
    _bars(ax, [c["case"].split(" -> ")[0][:24] for c in cases],
          [c["headroom"] for c in cases], target=3.0,
          title="M6 input-pipeline headroom (pipeline / consumer)", ylabel="x")
    ax.set_yscale("log")


PANELS = (("m1_overhead", m1), ("m2_scaling", m2), ("comm", m3), ("comm", m4), ("comm", m5),
          ("m6_input", m6))


def plot(in_dir: str, out: str) -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    present = [(fn, data) for name, fn in PANELS if (data := _load(in_dir, name)) is not None]
    if not present:
        return f"nothing to plot in {in_dir}"
    cols = 3
    rows = -(-len(present) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 4 * rows), squeeze=False)
    for ax in axes.flat[len(present):]:
        ax.axis("off")
    for ax, (fn, data) in zip(axes.flat, present):
        fn(ax, data)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--in_dir", default=common.OUT_DIR)
    parser.add_argument("--out", default=os.path.join(common.ROOT, "docs", "benchmarks.png"))
    args = parser.parse_args(argv)
    print(plot(args.in_dir, args.out))


if __name__ == "__main__":
    main()
