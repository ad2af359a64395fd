"""Issue 45 item 2: every part of the breakdown is defined once (observer.PART_MEANINGS)
and said with the same name in the console's legend, the flag, TensorBoard's tags, the
plots and docs/observability.md; the part that includes one-time tracing says so; an
efficiency above 100% and CPU binding are worded for a reader; breakdown.png draws each
part over the steps it belongs to."""
import re
from pathlib import Path

import pytest

from horovod_train import cpus, flags as ht_flags, metrics, report
from horovod_train.observe import observer

REPO = Path(__file__).resolve().parents[2]


def test_the_legend_defines_every_part_and_the_efficiency():
    line = observer.legend()
    assert line.startswith("legend | ") and "\n" not in line
    for part in observer.BREAKDOWN_PARTS:
        assert re.search(rf"(^legend \| |; ){part}: \w", line), part
    assert "divergence: the cross-rank weight check (--divergence_check_steps), the first " \
        "one with its one-time tracing" in line
    assert "above 100%, each rank beat the 1-rank run" in line


def test_one_name_per_part_in_the_flag_tensorboard_plots_and_docs():
    from horovod_train.observe import plots
    assert "divergence" in observer.BREAKDOWN_PARTS and "guard" not in observer.BREAKDOWN_PARTS
    assert "divergence_check_steps" in {field.name for _, field in ht_flags.option_fields()}
    assert "breakdown/divergence_ms" in observer.TRAIN_TAGS
    assert set(plots.COLORS) == set(observer.BREAKDOWN_PARTS)
    doc = (REPO / "docs" / "observability.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| (.+) \|$", doc, re.M))
    for part in observer.BREAKDOWN_PARTS:
        assert part in rows, f"docs/observability.md defines no `{part}`"
    assert "includes" in rows["divergence"] and "tracing" in rows["divergence"]
    assert not re.search(r"\bguard \d|guard %", doc)  # the part's old name, in a sample
    assert "above 100%" in doc.lower()


def test_the_line_says_which_part_traced_and_what_a_high_efficiency_means():
    line = metrics.format_line(40, 220, 0.19, 1364.0, {"compute": 0.3, "divergence": 0.7},
                               per_rank=682.0, efficiency=1.03,
                               notes={"divergence": "first check, includes tracing"})
    assert "divergence 70% (first check, includes tracing)" in line
    assert "(682/rank, efficiency 103%: each rank faster than the 1-rank run)" in line
    plain = metrics.format_line(60, 220, 0.1, 900.0, {"compute": 1.0}, efficiency=0.93)
    assert "efficiency 93%)" in plain and "faster" not in plain


def test_binding_reads_as_binding():
    chosen, why = cpus.planned(0, 2, 0, environ={}, allowed={0, 1}, online=2,
                               sysfs="/nonexistent")
    assert chosen is not None and why.startswith("bound to CPU ") and "(local rank 0 of 2)" in why


def _records(divergence_in: int):
    train = []
    for i in range(3):
        parts = {"data": 0.001, "other": 0.001}
        if i == divergence_in:
            parts["divergence"] = 0.005
        train.append({"step": 20 * (i + 1), "steps": 20, "traced": False,
                      "samples_per_sec": 100.0, "samples_per_sec_per_rank": [100.0],
                      "seconds_per_step": parts})
    return report.Run("/runs/d", {"world_size": 1}, train, [], None)


def test_breakdown_png_draws_a_part_over_its_own_interval_only():
    """The check ran in the interval of steps 21-40: its band covers those steps and no
    others (a line through the intervals' end points spread it over 1-60)."""
    from horovod_train.observe import plots
    fig = plots.breakdown_figure(_records(divergence_in=1))
    ax = fig.axes[0]
    band = next(c for c in ax.collections if c.get_label() == "divergence")
    path = band.get_paths()[0]
    # data below it is 1 ms: the band is 1..6 ms over steps 21-40.
    assert path.contains_point((25, 3.5)) and path.contains_point((39, 5.5))
    for x in (5, 15, 45, 55):
        assert not path.contains_point((x, 2.0)), x


def test_the_readme_sample_shows_the_legend_and_the_traced_check():
    text = (REPO / "README.md").read_text()
    assert not re.search(r"\bguard \d", text)
    assert f"<stderr>:{observer.legend()}\n" in text  # the legend as the trainer prints it
    assert re.search(r"divergence \d+% \(first check, includes tracing\)", text)
